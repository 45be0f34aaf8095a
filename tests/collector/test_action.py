"""An error alert's action (issue 12 item 8): the last good checkpoint before the episode and the exact resume
command for the run's trainer, told from what the run's files say; one voice with the checkpoint advice."""

from __future__ import annotations

import math

from collector.advice.action import Trainer, action_for_alert, needs_action, trainer_of
from tests.collector.test_daemon_support import cli_json
from tests.collector.test_kept_resume_points import spiky_run


def ckpt(step: int, complete: bool = True, value: float | None = None, inferred: bool = False) -> dict:
    return {"step": step, "path": f"/runs/a/global_step_{step}", "complete": complete, "value": value,
            "inferred": inferred}  # fmt: skip


VERL = Trainer("verl", "its checkpoints are verl's global_step_N folders")


def advice(checkpoints: list[dict], recommended: int | None = None, metric: str = "val/loss") -> dict:
    rec = None if recommended is None else {"step": recommended, "path": f"/runs/a/global_step_{recommended}",
                                            "reason": f"Step {recommended} has the lowest {metric}."}  # fmt: skip
    return {"recommended": rec, "checkpoints": checkpoints, "metric": metric}


def test_trainer_is_told_by_the_files_not_guessed():
    ours = {"trainer": "verl_sft", "preset": "demo", "config": {}}
    assert trainer_of("jsonl", [], ours, [], []).kind == "runwatch"
    assert (
        trainer_of("jsonl", [], {"trainer": "verl_sft", "preset": "custom"}, ["/r/global_step_5"], []).kind
        == "verl"
    )
    assert trainer_of("hf_trainer_state", [], {}, [], []).kind == "hf"
    assert trainer_of("jsonl", [], {}, ["/o/checkpoint-500"], []).kind == "hf"
    assert trainer_of("llamafactory_log", [], {}, [], []).kind == "llamafactory"
    assert trainer_of("console", [], {}, [], []).kind == "verl"
    tb = trainer_of("tensorboard", [], {}, [], ["actor/entropy", "critic/score/mean", "x"])
    assert tb.kind == "verl" and "actor/entropy" in tb.evidence
    unknown = trainer_of("csv", [], {}, [], ["loss", "val_loss"])
    assert unknown.kind == "unknown" and "do not say" in unknown.evidence


def test_only_error_alerts_and_checkpoint_naming_alerts_carry_an_action():
    assert needs_action({"rule": "grad_spike", "severity": "error"})
    assert needs_action({"rule": "val_loss_rise", "severity": "warn"})
    assert needs_action({"rule": "reward_collapse", "severity": "warn"})
    assert not needs_action({"rule": "loss_spike", "severity": "warn"})


def test_a_collapse_that_points_near_its_best_step_says_how_the_checkpoint_relates_to_it():
    collapse = {"rule": "reward_collapse", "severity": "warn", "metric": "critic/score/mean", "first_step": 260,
                "last_step": 300, "evidence": {"best_step": 180}}  # fmt: skip
    act = action_for_alert(collapse, advice([ckpt(100), ckpt(200), ckpt(300)]), VERL, "/runs/a", [])
    assert (
        act["restart_step"] == 200 and "points near step 180" in act["text"] and "later than" in act["text"]
    )


def test_a_spike_restarts_from_a_checkpoint_100_steps_before_and_skips_its_batches():
    cks = [ckpt(100), ckpt(200), ckpt(250), ckpt(300), ckpt(400)]
    alert = {
        "rule": "grad_spike",
        "severity": "error",
        "metric": "grad_norm",
        "first_step": 300,
        "last_step": 303,
    }
    act = action_for_alert(alert, advice(cks, 400), VERL, "/runs/a", [(300, 303)])
    assert act["restart_step"] == 200 and act["skip_steps"] == [300, 303]
    # a spike's peak step is no "best" to point near
    peaked = action_for_alert(
        {**alert, "evidence": {"peak_step": 301}}, advice(cks, 400), VERL, "/runs/a", []
    )
    assert "points near" not in peaked["text"]
    assert (
        act["command"] == "trainer.resume_mode=resume_path trainer.resume_from_path=/runs/a/global_step_200"
    )
    assert "steps 300-303" in act["text"] and "the checkpoint advice keeps step 400" in act["text"]
    # none 100 steps before: the last one before the spike, and the text says how close it is
    close = action_for_alert(
        {**alert, "first_step": 270}, advice([ckpt(100), ckpt(250)]), VERL, "/runs/a", [], restart_before=100
    )
    assert close["restart_step"] == 100  # 170 before: well before the spike
    near = action_for_alert({**alert, "first_step": 270}, advice([ckpt(250)]), VERL, "/runs/a", [])
    assert near["restart_step"] == 250 and "only 20 step(s) before" in near["text"]


def test_incomplete_and_bad_checkpoints_are_passed_over():
    cks = [ckpt(100), ckpt(150), ckpt(200, complete=False)]
    alert = {"rule": "nonfinite", "severity": "error", "metric": "loss", "first_step": 260, "last_step": 260}
    act = action_for_alert(alert, advice(cks), VERL, "/runs/a", [(140, 160)])
    assert act["restart_step"] == 100 and act["skip_steps"] is None


def test_no_checkpoint_before_the_episode_is_said_plainly():
    alert = {"rule": "nonfinite", "severity": "error", "metric": "loss", "first_step": 50, "last_step": 50}
    act = action_for_alert(alert, advice([ckpt(100)]), VERL, "/runs/a", [])
    assert act["checkpoint"] is None and act["command"] is None
    assert "no checkpoint to go back to" in act["text"] and "step 100, after it began" in act["text"]
    none = action_for_alert(alert, advice([]), VERL, "/runs/a", [])
    assert "no checkpoint of this run was seen" in none["text"]


def test_an_action_and_the_advice_name_the_same_step_when_no_checkpoint_was_seen():
    # the advice keeps step 1500 (its best evaluation; no folder seen): the action never says "restart from the
    # beginning" as if there were nothing, it names that step
    alert = {"rule": "run_failed", "severity": "error", "metric": "", "first_step": 2000, "last_step": 2000}
    rec = {
        "recommended": {"step": 1500, "path": None, "reason": "best"},
        "checkpoints": [],
        "metric": "eval_loss",
    }
    act = action_for_alert(alert, rec, Trainer("hf", "an HF console log"), None, [])
    assert "the checkpoint advice's step 1500 is the one to go back to" in act["text"]
    assert not act["text"].startswith("There is no checkpoint")


def test_commands_per_trainer_and_remote_paths():
    alert = {"rule": "nonfinite", "severity": "error", "metric": "loss", "first_step": 500, "last_step": 500}
    hf = {"step": 400, "path": "gpu1:/out/checkpoint-400", "complete": True, "value": None, "inferred": False}
    act = action_for_alert(alert, advice([hf]), Trainer("hf", "x"), "gpu1:/out", [])
    assert (
        act["command"] == 'trainer.train(resume_from_checkpoint="/out/checkpoint-400")'
        and "on gpu1" in act["text"]
    )
    ours = action_for_alert(alert, advice([ckpt(400)]), Trainer("runwatch", "x", "demo"), "/runs/a", [])
    assert ours["command"] == "python -m trainer.launch --preset demo --out /runs/a --resume-from 400"
    lf = action_for_alert(alert, advice([hf]), Trainer("llamafactory", "x"), "/out", [])
    assert lf["command"] == "resume_from_checkpoint: /out/checkpoint-400"
    unknown = action_for_alert(
        alert, advice([ckpt(400)]), Trainer("unknown", "its files do not say"), "/a", []
    )
    assert unknown["command"] is None and "your trainer's resume option" in unknown["text"]


DEMO_EVALS = ((10, 4.268), (20, 3.039), (30, 2.642), (40, 2.603), (50, 2.813), (60, 4.391))


def demo_saves(evals=DEMO_EVALS) -> list[dict]:
    """make demo's checkpoints with their val/loss, each evaluated at its own step."""
    return [{**ckpt(s), "value": v, "evaluated_at": s} for s, v in evals]


def test_a_spike_resume_point_other_than_the_advices_says_so_in_its_short_lines():
    # the demo (make demo): a grad spike at 61 goes back to a save before it, while the checkpoint advice keeps
    # step 40 and the Checkpoints page lists the other as safe to delete; the dashboard shows Keep / Run / Why,
    # not the paragraph, so the Keep line itself says the step is where to resume from and names the advice's
    # (it read "Keep step 60" beside "Keep step 40" on the Checkpoints page), and the Run line reads after its label
    spike = {"rule": "grad_spike", "severity": "error", "metric": "train/grad_norm", "first_step": 61,
             "last_step": 64}  # fmt: skip
    ours = Trainer("runwatch", "x", "demo")
    act = action_for_alert(spike, advice(demo_saves(DEMO_EVALS[3:]), 40), ours, "/runs/a", [(61, 64)])
    # (two evaluations before it: no noise to judge by, so step 60 is not known to be damaged)
    assert act["keep"] == (
        "step 60 (/runs/a/global_step_60), to resume from before the trouble; at the end, the checkpoint advice "
        "keeps step 40 (by val/loss)"
    )
    assert act["restart_step"] == 60 and act["advice_step"] == 40  # the fields keep their meaning
    assert "checkpoint advice" not in act["why"]  # said once, on the Keep line
    assert act["run"] == "this command; when replaying, skip the batches of steps 61-64"
    assert (
        "(This is where to resume from before the trouble; at the end, the checkpoint advice keeps step 40 (by val/loss).)"
        in act["text"]
    )
    same = action_for_alert(spike, advice(demo_saves(DEMO_EVALS[3:]), 60), ours, "/runs/a", [(61, 64)])
    assert same["keep"] == "step 60 (/runs/a/global_step_60)" and "checkpoint advice" not in same["why"]
    unscored = action_for_alert(
        spike, advice([ckpt(40), ckpt(60)], 40), ours, "/runs/a", [(61, 64)]
    )  # no evaluation: the advice keeps its latest good one
    assert unscored["keep"].endswith(
        "at the end, the checkpoint advice keeps step 40 (as the latest good one, with no evaluation to go by)"
    )


def test_a_spike_does_not_go_back_to_a_save_whose_own_evaluation_shows_its_damage():
    # make demo: the lr is boosted for the updates of steps 60-61; step 60's loss and grad norm were logged
    # before its update, so the spike shows at 61, but the step-60 save holds that update: its val/loss, 4.391
    # against 2.813 at step 50, says so. A careful engineer resumes from step 50, not 60.
    spike = {"rule": "grad_spike", "severity": "error", "metric": "train/grad_norm", "first_step": 61,
             "last_step": 64}  # fmt: skip
    act = action_for_alert(spike, advice(demo_saves(), 40), Trainer("runwatch", "x", "demo"), "/runs/a", [])
    assert act["restart_step"] == 50 and act["command"].endswith("--resume-from 50")
    assert act["why"].startswith("The last sound complete checkpoint before step 61 (evaluation 2.813)")
    assert "Not step 60: its own evaluation, 4.391 against 2.813 at step 50" in act["why"]
    assert (
        "already shows the damage" in act["text"]
        and "whose own evaluation does not already show it" in act["text"]
    )
    # an evaluation within its usual wobble of the one before (overfitting's slow rise) is no damage
    wobble = demo_saves(DEMO_EVALS[:5] + ((60, 2.95),))
    kept = action_for_alert(spike, advice(wobble, 40), Trainer("runwatch", "x", "demo"), "/runs/a", [])
    assert kept["restart_step"] == 60 and "Not step" not in kept["text"]
    # a score (higher is better) that fell as far shows it too
    scores = demo_saves(tuple((s, -v) for s, v in DEMO_EVALS))
    fell = action_for_alert(
        spike, {**advice(scores, 40), "direction": "max"}, Trainer("runwatch", "x", "demo"), "/runs/a", []
    )
    assert fell["restart_step"] == 50
    # a NaN among the earlier evaluations is no noise figure (it made the noise NaN and every such save damaged,
    # "nanx the evaluations' own noise"); a NaN evaluation of the save itself is damage
    nan_before = demo_saves(((10, 4.268), (20, math.nan), *DEMO_EVALS[2:5], (60, 2.95)))
    kept = action_for_alert(spike, advice(nan_before, 40), Trainer("runwatch", "x", "demo"), "/runs/a", [])
    assert kept["restart_step"] == 60 and "nan" not in kept["text"].lower(), kept["text"]
    nan_save = demo_saves((*DEMO_EVALS[:5], (60, math.nan)))
    act = action_for_alert(spike, advice(nan_save, 40), Trainer("runwatch", "x", "demo"), "/runs/a", [])
    assert act["restart_step"] == 50 and "Not step 60: its own evaluation, NaN, already shows" in act["why"]
    # a save whose value was carried from an earlier evaluation is not judged by it
    carried = [*demo_saves()[:-1], {**ckpt(60), "value": 4.391, "evaluated_at": 55}]
    assert action_for_alert(spike, advice(carried, 40), VERL, "/runs/a", [])["restart_step"] == 60


def test_a_validation_alert_keeps_the_advices_checkpoint_and_says_why_it_differs():
    cks = [ckpt(10, value=2.0), ckpt(20, value=1.5), ckpt(30, value=1.7)]
    rise = {"rule": "val_loss_rise", "severity": "warn", "metric": "eval_loss", "first_step": 30, "last_step": 40,
            "evidence": {"best_step": 25}}  # fmt: skip
    same = action_for_alert(rise, advice(cks, 20, metric="eval_loss"), VERL, "/runs/a", [])
    assert same["restart_step"] == 20 and "no complete checkpoint" in same["text"]
    other = action_for_alert(rise, advice(cks, 30, metric="eval_wer"), VERL, "/runs/a", [])
    assert other["restart_step"] == 30 and "because the advice chooses by eval_wer" in other["text"]


def test_the_api_and_cli_json_give_each_error_alert_its_action(tmp_path):
    spiky_run(tmp_path / "root")
    db = tmp_path / "rw.duckdb"
    cli_json(db, "ingest", str(tmp_path / "root"))
    alerts = cli_json(db, "alerts")
    errors = [a for a in alerts if a["severity"] == "error"]
    assert errors and all(a["action"] is not None for a in errors)
    assert all(a["action"] is None for a in alerts if not needs_action(a))
    spike = next(a for a in errors if a["rule"] == "grad_spike")
    assert spike["action"]["restart_step"] == 200 and spike["action"]["trainer"] == "verl"
    assert spike["action"]["checkpoint"]["path"].endswith("global_step_200")
    assert spike["action"]["skip_steps"] == [spike["first_step"], spike["last_step"]]
    # the documented fields are all still there
    for key in (
        "id",
        "run",
        "rule",
        "severity",
        "metric",
        "first_step",
        "last_step",
        "state",
        "message",
        "value",
    ):
        assert key in spike


def test_the_action_in_three_short_lines_names_the_command_once():
    # issue 23.2: Keep / Run / Why beside the paragraph (`text` stays, a documented field)
    alert = {
        "rule": "grad_spike",
        "severity": "error",
        "metric": "grad_norm",
        "first_step": 300,
        "last_step": 303,
    }
    act = action_for_alert(alert, advice([ckpt(100), ckpt(200), ckpt(250)]), VERL, "/runs/a", [(300, 303)])
    assert act["keep"] == "step 200 (/runs/a/global_step_200)"
    assert act["run"] == "add this to your verl command; when replaying, skip the batches of steps 300-303"
    assert act["command"] not in act["run"] and act["command"] in act["text"]
    assert act["why"].startswith("The last complete checkpoint before step 300, where the trouble began")
    assert "100 steps before the spike" in act["why"]
    lost = action_for_alert({**alert, "first_step": 50}, advice([ckpt(100)]), VERL, "/runs/a", [])
    assert (
        lost["keep"] == "nothing: no good checkpoint from before the trouble was seen"
        and lost["command"] is None
    )
    assert lost["why"] == (
        "No complete checkpoint outside a bad episode was saved before step 50, where the trouble began "
        "(the first one seen is step 100, after it began)."
    )
    kept = action_for_alert(
        {
            "rule": "val_loss_rise",
            "severity": "warn",
            "metric": "val/loss",
            "first_step": 40,
            "last_step": 60,
        },
        advice([ckpt(20), ckpt(40)], 20),
        Trainer("hf", "x"),
        "/runs/a",
        [],
    )
    assert kept["keep"] == "step 20 (/runs/a/global_step_20)"
    assert kept["why"] == "The checkpoint advice keeps it: the best val/loss."
    # the advice's whole reason (a paragraph on real runs) stays in text; why is one short line with the value
    valued = [{**ckpt(20), "value": 1.052}, ckpt(40)]
    best = action_for_alert(
        {"rule": "val_loss_rise", "severity": "warn", "metric": "val/loss", "first_step": 40, "last_step": 60,
         "evidence": {"best_step": 40}},
        advice(valued, 20), Trainer("hf", "x"), "/runs/a", [],
    )  # fmt: skip
    assert best["why"] == (
        "The checkpoint advice keeps it: the best val/loss (1.052); this alert's own best evaluation is step 40 "
        "(the full text says why they differ)."
    )
    assert "Step 20 has the lowest val/loss." in best["text"]
    assert kept["run"].startswith("call this in your training script")


def test_keep_names_the_advices_step_when_no_checkpoint_was_seen_before_the_trouble():
    # the three lines agree with the paragraph: keep says the step the why and the text name
    alert = {"rule": "nonfinite", "severity": "error", "metric": "loss", "first_step": 300, "last_step": 300}
    act = action_for_alert(alert, advice([], 200), VERL, "/runs/a", [])
    assert act["checkpoint"] is None and "step 200" in act["text"] and "200" in act["why"]
    assert act["keep"].startswith("step 200, the checkpoint advice's, if the trainer saved it")
    later = action_for_alert(alert, advice([], 400), VERL, "/runs/a", [])
    assert later["keep"] == "nothing: no good checkpoint from before the trouble was seen"


def test_a_validation_alert_whose_best_step_lost_a_tie_says_so():
    # a public verl PPO run (Bihan/dstack-configs): 150 and 190 both scored 0.904, both saved; the advice keeps
    # 190 by its tie rule, and the action once said no checkpoint was saved at 150
    from collector.advice.recommend import AdviceInput, recommend_checkpoint

    scores = [(110, 0.892), (120, 0.898), (130, 0.901), (140, 0.897), (150, 0.904), (160, 0.902), (170, 0.896),
              (180, 0.899), (190, 0.904), (200, 0.893), (210, 0.889), (220, 0.886)]  # fmt: skip
    saves = [{"step": s, "path": f"/runs/a/global_step_{s}", "complete": True, "bytes": 1} for s, _ in scores]
    out = recommend_checkpoint(AdviceInput(saves, scores, metric="val/score", direction="max"))
    assert out["recommended"]["step"] == 190 and 150 in out["recommended"]["tie"]["steps"]
    decline = {"rule": "val_score_decline", "severity": "warn", "metric": "val/score", "first_step": 200,
               "last_step": 220, "evidence": {"best_step": 150}}  # fmt: skip
    text = action_for_alert(decline, out, VERL, "/runs/a", [])["text"]
    assert "no complete checkpoint" not in text
    assert "(step 150) because the two tie" in text and "goes to the later checkpoint" in text


def test_a_validation_alert_and_the_advice_give_one_noise_figure_for_one_series():
    # the same public verl run: the alert said its evaluations "wobble by about 0.003145", the advice called
    # their "own noise" 0.00484; one figure (`detect.base.eval_noise`), printed with two digits, in both
    from collector.advice.recommend import AdviceInput, recommend_checkpoint
    from collector.detect.engine import detect_series

    scores = [(110, 0.892), (120, 0.898), (130, 0.901), (140, 0.897), (150, 0.904), (160, 0.902), (170, 0.896),
              (180, 0.899), (190, 0.904), (200, 0.893), (210, 0.872), (220, 0.874), (230, 0.871)]  # fmt: skip
    series = {"val-core/gsm8k/reward/mean@1": ([s for s, _ in scores], [v for _, v in scores])}
    (alert,) = [
        e for e in detect_series(series, run_info={"algorithm": "ppo"}) if e.rule == "val_score_decline"
    ]
    saves = [{"step": s, "path": f"/runs/a/global_step_{s}", "complete": True, "bytes": 1} for s, _ in scores]
    out = recommend_checkpoint(
        AdviceInput(saves, scores, metric="val-core/gsm8k/reward/mean@1", direction="max")
    )
    assert alert.evidence["wobble"] == out["recommended"]["tie"]["noise"] > 0
    figure = f"{alert.evidence['wobble']:.2g}"
    assert f"wobble by about {figure})" in alert.message
    assert f"own noise ({figure})" in out["recommended"]["reason"]
