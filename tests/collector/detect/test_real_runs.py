"""Every real trainer_state.json in ../shared/real-runs: the alerts each must raise, the ones it must not, and
whether the checkpoint advice agrees with the run's own best_model_checkpoint (or why not).

What each file shows is in ../shared/real-runs/README.md; the expectations below follow it.
"""

from __future__ import annotations

import pytest

from collector.advice.health import health_checklist
from scripts.detect_report import analyse

FILES = {
    "kg_llm": "ChenguangYang96UCR__KG-LLM__outputs.json",
    "coral": "CoralReefFish__whisper-tiny-nbaiLab__root.json",
    "dheena": "Dheena731__tinyLlama-finetune__root.json",
    "qwen_chess": "Miguel-Alessio__qwen-chess-lora__logs.json",
    "rishikarpe": "Rishikarpe__LoRA-Fine-Tuning__outputs-checkpoint-1000.json",
    "smolvlm": "akanksha28pathak__SmolVLM_EndoscopyQA__root.json",
    "whisper_flemish": "anthonyrathe__fixed-whisperv2-flemish__root.json",
    "pranav": "pranavkumaarofficial__nlcli-wizard__outputs-checkpoint-255.json",
    "grpo": "srinath-manda__IITD_Feb26_AAIPL__outputs-checkpoint-500.json",
    "yongshuaiy": "yongshuaiy__LLMs-final__output-checkpoint-669.json",
}

# name -> (alerts that must be raised as (rule, metric), rules that must not appear at all)
EXPECTED = {
    "kg_llm": (
        {("nonfinite", "grad_norm")},
        {"grad_spike", "loss_spike", "lr_anomaly", "no_learning", "val_loss_rise"},
    ),
    "coral": (set(), {"val_loss_rise", "loss_spike", "lr_anomaly", "no_learning", "nonfinite"}),
    "dheena": (
        set(),
        {
            "val_loss_rise",
            "loss_spike",
            "grad_spike",
            "lr_anomaly",
            "no_learning",
            "nonfinite",
            "loss_plateau",
        },
    ),
    "qwen_chess": (
        {("grad_spike", "grad_norm"), ("loss_spike", "loss")},
        {"nonfinite", "no_learning", "lr_anomaly"},
    ),
    "rishikarpe": (
        {("no_learning", "grad_norm")},  # one incident naming the loss too (issue 12: incidents, not storms)
        {"loss_plateau", "grad_spike", "lr_anomaly"},
    ),
    # start-up: grad norm 4.3/15 in the first 30 steps (3 logs) while the loss falls 19 -> 0.4: no spike (issue 12)
    "smolvlm": (set(), {"grad_spike", "val_loss_rise", "nonfinite", "no_learning", "lr_anomaly"}),
    # the training loss really does jump 10x at 10700 (0.0125 -> 0.158, back by 11000): a warning, not noise
    # its eval_loss wobbles 0.21-0.27 around a flat level while WER improves to the end: no turn (issue 12)
    "whisper_flemish": (
        {("loss_spike", "loss")},
        {"nonfinite", "lr_anomaly", "no_learning", "grad_spike", "val_loss_rise"},
    ),
    "pranav": (
        set(),
        {"val_loss_rise", "loss_spike", "grad_spike", "lr_anomaly", "no_learning", "nonfinite"},
    ),
    # GRPO: "loss" is a policy loss and grad_norm is 0 on groups with no reward spread: none of that is trouble
    "grpo": (set(), {"loss_spike", "loss_plateau", "no_learning", "grad_spike", "lr_anomaly", "nonfinite"}),
    "yongshuaiy": (
        {("val_loss_rise", "eval_loss")},
        {"nonfinite", "no_learning", "lr_anomaly", "grad_spike"},
    ),
}

HEALTHY = ("coral", "dheena")


@pytest.fixture(scope="module")
def results(real_runs):
    missing = [f for f in FILES.values() if not (real_runs / f).is_file()]
    assert not missing, f"missing real runs: {missing}"
    return {name: analyse(real_runs / file) for name, file in FILES.items()}


def alerts_of(results, name, rule=None):
    return [a for a in results[name]["alerts"] if rule is None or a["rule"] == rule]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_alerts_raised_and_not_raised(results, name):
    must, must_not = EXPECTED[name]
    raised = {(a["rule"], a["metric"]) for a in alerts_of(results, name)}
    # an incident's alert names the findings it holds (a grad spike and the loss jump after it)
    for a in alerts_of(results, name):
        ev = a.get("evidence") or {}
        raised |= set(zip(ev.get("rules", []), ev.get("metrics", []), strict=False))
    assert must <= raised, f"{name}: missing {must - raised}; raised {sorted(raised)}"
    assert not {rule for rule, _ in raised} & must_not, f"{name}: raised {sorted(raised)}"


@pytest.mark.parametrize("name", HEALTHY)
def test_healthy_runs_raise_no_error_and_no_warning(results, name):
    assert [a for a in alerts_of(results, name) if a["severity"] != "info"] == []


def test_kg_llm_fp16_overflow_is_one_nonfinite_episode_at_the_start(results):
    (alert,) = alerts_of(results, "kg_llm", "nonfinite")
    # grad_norm NaN at 1, 2, 6 while the loss stays finite: the loss scaler skipping steps, a notice (issue 12)
    assert (alert["severity"], alert["first_step"], alert["last_step"]) == ("info", 1, 6)


def test_qwen_chess_grad_burst_around_2680_is_an_error_with_the_loss_bump(results):
    (alert,) = alerts_of(results, "qwen_chess", "grad_spike")
    assert (
        alert["first_step"] <= 2680 <= alert["last_step"] and alert["last_step"] - alert["first_step"] < 200
    )
    assert alert["severity"] == "error"
    # the loss bump right after is the same incident: the grad spike's alert names it and reaches to it
    assert alert["evidence"]["metrics"] == ["grad_norm", "loss"] and "loss_spike on loss" in alert["message"]
    assert alerts_of(results, "qwen_chess", "loss_spike") == [] and alert["last_step"] >= 2700


def test_smolvlm_start_up_is_not_a_grad_spike(results):
    assert alerts_of(results, "smolvlm", "grad_spike") == []


def test_rishikarpe_is_stuck_from_the_first_log(results):
    # loss and grad norm stuck at exactly 0 from the same first log: one alert that names both
    (alert,) = alerts_of(results, "rishikarpe", "no_learning")
    assert alert["severity"] == "error" and alert["first_step"] == 10 and alert["active"]
    assert alert["evidence"]["metrics"] == ["grad_norm", "loss"] and "also: loss" in alert["message"]


def test_yongshuaiy_overfitting_names_best_step_200(results):
    (alert,) = alerts_of(results, "yongshuaiy", "val_loss_rise")
    assert (
        alert["evidence"]["best_step"] == 200
        and "step 200" in alert["message"]
        and alert["first_step"] == 250
    )


def test_whisper_flemish_loss_blip_is_a_notice(results):
    # one logged point 10x up and back by the next: a notice, not a warning (issue 12)
    (spike,) = alerts_of(results, "whisper_flemish", "loss_spike")
    assert (spike["first_step"], spike["severity"]) == (10700, "info")


# ----- checkpoint advice against the run's own best_model_checkpoint -----


@pytest.mark.parametrize("name", ["dheena", "yongshuaiy", "smolvlm"])
def test_advice_agrees_where_the_run_chose_by_eval_loss(results, name):
    row = results[name]
    assert row["advice"]["metric"] == "eval_loss"
    assert row["advice"]["recommended"]["step"] == row["run_best_checkpoint"]


@pytest.mark.parametrize("name", ["coral", "whisper_flemish"])
def test_advice_follows_the_runs_own_metric_when_it_was_not_the_loss(results, name):
    # best_metric is a WER: the advice finds the metric whose value at the best step matches it
    row = results[name]
    assert (row["advice"]["metric"], row["advice"]["direction"]) == ("eval_wer", "min")
    assert row["advice"]["recommended"]["step"] == row["run_best_checkpoint"]


def test_pranav_advice_says_why_it_differs_from_checkpoint_200(results):
    # min eval_loss was at 250, which was not a save step: HF kept checkpoint-200 as best. The advice uses the
    # evaluation nearest each save, so checkpoint-255 (5 steps after the 250 evaluation) wins, and says so.
    advice = results["pranav"]["advice"]
    assert results["pranav"]["run_best_checkpoint"] == 200
    assert advice["recommended"]["step"] == 255
    reason = advice["recommended"]["reason"]
    assert "evaluated at step 250" in reason and "step 200 0.1424" in reason and "inferred" in reason
    # the checkpoints are inferred from save_steps (a lone trainer_state.json): nothing is offered for deletion
    assert advice["deletable"] == [] and advice["frees_bytes"] is None
    assert all(c["inferred"] and c["complete"] is None for c in advice["checkpoints"])


def test_runs_without_evaluations_keep_the_latest_checkpoint_and_say_why(results):
    advice = results["qwen_chess"]["advice"]
    assert advice["recommended"]["step"] == 12000 and "no evaluation" in advice["recommended"]["reason"]
    assert 2500 in [c["step"] for c in advice["checkpoints"]] and advice["deletable"] == []
    assert "inferred from save_steps" in advice["recommended"]["reason"]


# ----- health checklist over the same files -----


def test_health_checklist_on_real_runs(real_runs):
    from collector.core.roles import role_of
    from scripts.detect_report import load_trainer_state

    def checklist(file):
        series, info = load_trainer_state(real_runs / file)
        by_role = {}
        for metric, data in series.items():
            role = role_of(metric)
            if role in ("loss", "val_loss", "grad_norm", "lr", "step_time"):
                by_role.setdefault(role, data)
        return {i["id"]: i for i in health_checklist(by_role, [], None, info)}

    smol = checklist(FILES["smolvlm"])
    assert smol["start_grad_norm_range"]["state"] == "fail"  # 15 at step 30, then 0.02-0.06
    assert smol["start_loss_falling"]["state"] == "pass"
    rishi = checklist(FILES["rishikarpe"])
    assert rishi["start_loss_falling"]["state"] == "fail" and rishi["end_final_loss"]["state"] == "fail"
    dheena = checklist(FILES["dheena"])
    assert dheena["start_lr_warmup"]["state"] == "pass" and dheena["end_final_loss"]["state"] == "pass"
    assert all(item["state"] != "fail" for item in dheena.values()), dheena
