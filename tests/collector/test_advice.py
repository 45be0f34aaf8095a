"""Checkpoint advice: the choice, its one-sentence reason, what can be deleted, and the metric choice."""

from __future__ import annotations

import math

import pytest

from collector.advice.evaluations import choose_metric
from collector.advice.hf_saves import checkpoint_step, hf_checkpoints_from_state
from collector.advice.recommend import AdviceInput, recommend_checkpoint

GB = 1_000_000_000


def ckpt(step, complete=True, size=2 * GB):
    return {"step": step, "path": f"/runs/a/global_step_{step}", "complete": complete, "bytes": size}


EVALS = [(100, 2.0), (200, 1.5), (300, 1.2), (400, 1.3), (500, 1.4)]


def test_picks_the_lowest_val_loss_and_explains_with_the_alternatives():
    out = recommend_checkpoint(
        AdviceInput([ckpt(s) for s in (100, 200, 300, 400, 500)], EVALS, [], "val/loss", "min")
    )
    assert set(out) == {
        "recommended",
        "checkpoints",
        "deletable",
        "kept",  # why each seen checkpoint not deletable stays
        "frees_bytes",
        "metric",
        "direction",
        "no_recommendation",
        "never_learned",
        "interrupted_save",
    }
    assert out["never_learned"] is False and out["interrupted_save"] is None
    assert out["recommended"]["step"] == 300 and out["recommended"]["path"] == "/runs/a/global_step_300"
    reason = out["recommended"]["reason"]
    assert reason.count(".") >= 1 and "lowest val/loss, 1.2" in reason and "step 400 1.3" in reason
    assert out["deletable"] == [100, 200, 400]  # not 300 (recommended), not 500 (latest: resume needs it)
    assert out["frees_bytes"] == 3 * 2 * GB
    assert [c["value"] for c in out["checkpoints"]] == [2.0, 1.5, 1.2, 1.3, 1.4]
    assert set(out["checkpoints"][0]) == {
        "step",
        "path",
        "complete",
        "bytes",
        "value",
        "inferred",
        "inferred_from",
        "evaluated_at",
    }


def test_never_recommends_a_checkpoint_inside_a_bad_episode():
    out = recommend_checkpoint(
        AdviceInput([ckpt(s) for s in (100, 200, 300, 400)], EVALS, [(250, 320)], "val/loss", "min")
    )
    assert out["recommended"]["step"] == 400
    assert "not considered: step(s) 300" in out["recommended"]["reason"]


def test_incomplete_checkpoints_are_not_candidates_and_a_newest_incomplete_one_is_kept():
    checkpoints = [ckpt(100), ckpt(200), ckpt(300, complete=False), ckpt(400), ckpt(500, complete=False)]
    out = recommend_checkpoint(AdviceInput(checkpoints, EVALS, [], "val/loss", "min"))
    assert out["recommended"]["step"] == 400  # 300 had the best evaluation but its save is incomplete
    # 500 may still be being written; 400 is also the newest complete one (resume); 300, incomplete, is still
    # the best evaluated: never offered for deletion (what is missing may be found or re-saved)
    assert out["deletable"] == [100, 200]


def test_uses_the_evaluation_nearest_each_save_step():
    # a save carries the evaluation at its step, else the latest one since the previous save: never a later
    # evaluation (it judged weights trained further)
    out = recommend_checkpoint(AdviceInput([ckpt(150), ckpt(290), ckpt(420)], EVALS, [], "val/loss", "min"))
    assert [c["value"] for c in out["checkpoints"]] == [2.0, 1.5, 1.3]
    assert [c["evaluated_at"] for c in out["checkpoints"]] == [100, 200, 400]
    assert out["recommended"]["step"] == 420 and "evaluated at step 400" in out["recommended"]["reason"]
    # the best evaluation (300) has no save of its own: said, not borrowed by a save before it
    assert "1.2 at step 300, has no complete checkpoint near it" in out["recommended"]["reason"]
    out = recommend_checkpoint(AdviceInput([ckpt(50), ckpt(100)], [(100, 1.0)], [], "val/loss", "min"))
    assert [c["value"] for c in out["checkpoints"]] == [None, 1.0]


def test_max_direction_for_a_separate_eval_metric():
    evals = [(100, 0.2), (200, 0.6), (300, 0.5)]
    out = recommend_checkpoint(
        AdviceInput([ckpt(100), ckpt(200), ckpt(300)], evals, [], "exec_success_rate", "max")
    )
    assert out["recommended"]["step"] == 200 and "highest exec_success_rate" in out["recommended"]["reason"]


def test_without_evaluations_the_latest_good_checkpoint_is_recommended_and_said_so():
    out = recommend_checkpoint(
        AdviceInput([ckpt(100), ckpt(200)], [], [(150, 250)], "val/loss", "min", latest_step=200)
    )
    assert out["recommended"]["step"] == 100 and "no evaluation" in out["recommended"]["reason"]
    assert out["deletable"] == []


def test_non_finite_evaluations_are_ignored():
    out = recommend_checkpoint(
        AdviceInput([ckpt(100), ckpt(200)], [(100, math.nan), (200, 1.0)], [], "val/loss", "min")
    )
    assert [c["value"] for c in out["checkpoints"]] == [None, 1.0] and out["recommended"]["step"] == 200


def test_no_checkpoints_and_no_evaluation_means_no_recommendation():
    out = recommend_checkpoint(AdviceInput([], [], [], "val/loss", "min"))
    assert out["recommended"] is None and out["deletable"] == [] and out["frees_bytes"] == 0


def test_no_checkpoint_seen_names_the_best_evaluation_step_without_a_path():
    # a lone metrics file (verl TensorBoard events) has evaluations but no checkpoint folder beside it
    out = recommend_checkpoint(AdviceInput([], EVALS, [], "val-core/x/reward/mean@1", "max"))
    rec = out["recommended"]
    assert rec["step"] == 100 and rec["path"] is None and out["deletable"] == [] and out["frees_bytes"] == 0
    assert "No checkpoint of this run was seen" in rec["reason"] and "step 100" in rec["reason"]
    assert recommend_checkpoint(AdviceInput([], EVALS, [], "val/loss", "min"))["recommended"]["step"] == 300
    # the base model's evaluation (step 0) is no checkpoint, and one evaluation alone is no choice
    assert (
        recommend_checkpoint(AdviceInput([], [(0, 0.1), (10, 0.5), (20, 0.4)], [], "acc", "max"))[
            "recommended"
        ]["step"]
        == 10
    )
    assert (
        recommend_checkpoint(AdviceInput([], [(0, 0.1), (10, 0.5)], [], "acc", "max"))["recommended"] is None
    )


def test_bad_direction_is_refused():
    with pytest.raises(ValueError, match="direction"):
        recommend_checkpoint(AdviceInput([], [], [], "x", "up"))


def test_choose_metric():
    assert choose_metric({}, ["train/loss", "val/loss"]) == ("val/loss", "min")
    assert choose_metric({}, ["loss", "eval_loss", "eval_wer"]) == ("eval_loss", "min")
    assert choose_metric({"metric_for_best_model": "wer"}, ["eval_loss", "eval_wer"]) == ("eval_wer", "min")
    assert choose_metric(
        {"metric_for_best_model": "accuracy", "greater_is_better": True}, ["eval_accuracy"]
    ) == ("eval_accuracy", "max")
    assert choose_metric({}, ["val-core/gsm8k/reward/mean@1"]) == ("val-core/gsm8k/reward/mean@1", "max")
    assert choose_metric({}, ["train/loss"]) == ("val_loss", "min")
    info = {"best_metric": 9.6, "best_model_checkpoint": "/x/checkpoint-300"}
    evals = {"eval_loss": [(300, 0.2)], "eval_wer": [(200, 10.0), (300, 9.6)]}
    assert choose_metric(info, list(evals), evals) == ("eval_wer", "min")


def test_hf_checkpoints_are_inferred_from_save_steps_best_and_final():
    info = {
        "save_steps": 100,
        "global_step": 255,
        "best_model_checkpoint": "/elsewhere/outputs/checkpoint-200",
    }
    found = hf_checkpoints_from_state(info, 255)
    assert [c["step"] for c in found] == [100, 200, 255]
    # nobody has seen these folders: completeness and size are unknown, not "complete, 0 bytes"
    assert all(
        c["inferred"] is True
        and c["complete"] is None
        and c["bytes"] is None
        and c["path"] == f"checkpoint-{c['step']}"
        for c in found
    )
    assert [
        c["step"] for c in hf_checkpoints_from_state({"best_model_checkpoint": "./checkpoint-98000"}, 100000)
    ] == [98000, 100000]
    assert checkpoint_step("./results/checkpoint-2800/") == 2800 and checkpoint_step(None) is None


def test_a_best_checkpoint_off_the_save_steps_grid_means_saves_were_not_by_steps():
    # save_strategy "epoch" (a Gemma-2B LoRA run of 3 epochs): the state file still holds save_steps' 500, but
    # the saves were at the epoch ends, best_model_checkpoint among them; no checkpoint-23000 ever existed
    info = {"save_steps": 500, "global_step": 68559, "best_model_checkpoint": "./results/checkpoint-45706"}
    found = hf_checkpoints_from_state(info, 68559)
    assert [(c["step"], c["inferred_from"]) for c in found] == [
        (45706, "best_model_checkpoint"),
        (68559, "global_step (HF saves at the end)"),
    ]
    # on the grid, or the final save itself, it says nothing against save_steps
    on_grid = {"save_steps": 500, "global_step": 1200, "best_model_checkpoint": "out/checkpoint-1000"}
    assert [c["step"] for c in hf_checkpoints_from_state(on_grid, 1200)] == [500, 1000, 1200]
    final = {"save_steps": 500, "global_step": 1203, "best_model_checkpoint": "out/checkpoint-1203"}
    assert [c["step"] for c in hf_checkpoints_from_state(final, 1203)] == [500, 1000, 1203]


def test_says_when_the_best_evaluation_has_no_checkpoint_left():
    # max_ckpt_to_keep deleted the checkpoint of the best evaluation (the trainer's overfit demo)
    out = recommend_checkpoint(AdviceInput([ckpt(400), ckpt(500)], EVALS, [], "val/loss", "min"))
    assert out["recommended"]["step"] == 400
    assert (
        "the best evaluation overall, 1.2 at step 300, has no complete checkpoint near it"
        in out["recommended"]["reason"]
    )


def test_inferred_checkpoints_are_never_offered_for_deletion():
    info = {"save_steps": 100, "global_step": 500}
    out = recommend_checkpoint(
        AdviceInput(hf_checkpoints_from_state(info, 500), EVALS, [], "eval_loss", "min")
    )
    assert out["recommended"]["step"] == 300  # still a recommendation: the run most likely saved it
    assert out["deletable"] == [] and out["frees_bytes"] is None
    assert all(c["complete"] is None and c["inferred"] is True for c in out["checkpoints"])
    assert "inferred from save_steps" in out["recommended"]["reason"]
    assert "no deletion advice" in out["recommended"]["reason"]
    without_evals = recommend_checkpoint(
        AdviceInput(hf_checkpoints_from_state(info, 500), [], [], "eval_loss", "min")
    )
    assert without_evals["recommended"]["step"] == 500 and without_evals["deletable"] == []
    assert "inferred from save_steps" in without_evals["recommended"]["reason"]


def test_seen_checkpoints_are_marked_not_inferred():
    out = recommend_checkpoint(AdviceInput([ckpt(100), ckpt(200)], EVALS, [], "val/loss", "min"))
    assert [c["inferred"] for c in out["checkpoints"]] == [False, False]


# ----- the one entry point every caller uses -----


def test_advice_for_run_chooses_the_metric_and_maps_evaluations():
    from collector.advice.recommend import advice_for_run

    evals = {"val/loss": EVALS, "val/accuracy": [(100, 0.1), (200, 0.4), (500, 0.9)]}
    checkpoints = [ckpt(s) for s in (100, 200, 300, 400, 500)]
    out = advice_for_run(checkpoints, evals, [], {}, 500)
    assert (out["metric"], out["direction"], out["recommended"]["step"]) == ("val/loss", "min", 300)
    assert set(out) == {
        "recommended", "checkpoints", "deletable", "kept", "frees_bytes", "metric", "direction", "no_recommendation",
        "never_learned", "interrupted_save",
    }  # fmt: skip
    # an explicit metric wins; its direction follows its name unless given
    out = advice_for_run(checkpoints, evals, [], {}, 500, metric="val/accuracy")
    assert (out["metric"], out["direction"], out["recommended"]["step"]) == ("val/accuracy", "max", 500)
    out = advice_for_run(checkpoints, evals, [], {}, 500, metric="val/accuracy", direction="min")
    assert out["direction"] == "min" and out["recommended"]["step"] == 100
    # a bad episode still rules a checkpoint out; the latest step is never deletable
    out = advice_for_run(checkpoints, evals, [(290, 310)], {}, 400)
    assert out["recommended"]["step"] == 400 and 400 not in out["deletable"]
    # 500 is the best by val/accuracy (0.9): the best by any evaluation the run logs is never deletable
    assert out["deletable"] == [100, 200]


def test_advice_for_run_explicit_direction_with_the_chosen_metric_and_bad_direction():
    from collector.advice.recommend import advice_for_run

    out = advice_for_run([ckpt(100), ckpt(200)], {"val/loss": EVALS}, [], None, None, direction="max")
    assert (out["metric"], out["direction"], out["recommended"]["step"]) == ("val/loss", "max", 100)
    with pytest.raises(ValueError, match="direction"):
        advice_for_run([], {}, [], None, None, direction="down")


def test_advice_for_run_follows_hf_best_metric_and_infers_a_lone_state_files_checkpoints(real_runs):
    from collector.advice.recommend import advice_for_run
    from collector.core.roles import role_of
    from collector.formats import parser_for

    parsed = parser_for("hf_trainer_state")(
        (real_runs / "anthonyrathe__fixed-whisperv2-flemish__root.json").read_bytes()
    )
    evals: dict[str, list[tuple[int, float]]] = {}
    for step, metric, value in zip(
        parsed.points.step, parsed.points.metric, parsed.points.value, strict=True
    ):
        if role_of(metric) in ("val_loss", "eval_metric", "val_score"):
            evals.setdefault(metric, []).append((step, value))
    info = parsed.info
    out = advice_for_run([], evals, [], info, info["global_step"])
    assert (out["metric"], out["direction"]) == ("eval_wer", "min")
    assert out["recommended"]["step"] == checkpoint_step(info["best_model_checkpoint"])
    assert out["checkpoints"] and all(c["inferred"] for c in out["checkpoints"]) and out["deletable"] == []
    # without a trainer_state's save facts nothing is inferred: the best evaluation's step, no path
    # reasons say only what the state file gave: inferred checkpoints are not called complete
    assert " complete checkpoint" not in out["recommended"]["reason"]
    assert "inferred from best_model_checkpoint" in out["recommended"]["reason"]
    bare = advice_for_run([], evals, [], {}, 100)
    assert bare["checkpoints"] == [] and bare["recommended"]["path"] is None


def test_advice_for_run_takes_the_configured_metric_unless_one_is_passed():
    from collector.advice.recommend import advice_for_run
    from collector.settings.config import AdviceSettings, DetectConfig

    evals = {"val/loss": EVALS, "exec_success_rate": [(100, 0.2), (200, 0.7), (300, 0.5)]}
    checkpoints = [ckpt(s) for s in (100, 200, 300)]
    config = DetectConfig(advice=AdviceSettings(metric="exec_success_rate", direction="max"))
    out = advice_for_run(checkpoints, evals, [], {}, 300, config=config)
    assert (out["metric"], out["direction"], out["recommended"]["step"]) == ("exec_success_rate", "max", 200)
    out = advice_for_run(checkpoints, evals, [], {}, 300, metric="val/loss", config=config)
    assert (out["metric"], out["direction"], out["recommended"]["step"]) == ("val/loss", "min", 300)
    # a configured metric this run never logged: the run's own choice decides, and the reason says why
    out = advice_for_run(checkpoints, {"val/loss": EVALS}, [], {}, 300, config=config)
    assert out["metric"] == "val/loss" and out["direction"] == "min"
    assert "exec_success_rate (configured) has no evaluation in this run" in out["recommended"]["reason"]
    # the configured direction belongs to the configured metric: an explicit metric takes its own
    out = advice_for_run(checkpoints, evals, [], {}, 300, metric="val/loss", config=config)
    assert out["direction"] == "min"


def test_the_best_checkpoint_by_any_evaluation_is_never_deletable():
    # the RL demo's shape: the advice goes by the validation loss, but the score's best save (75, 0.409) and
    # the loss's best (150) both stay; nothing best by either is "safe to delete"
    saves = [ckpt(s) for s in (25, 50, 75, 100, 125, 150, 175)]
    loss = [(25, 1.2), (50, 1.0), (75, 0.95), (100, 0.9), (125, 0.92), (150, 0.85), (175, 0.88)]
    score = [(25, 0.2), (50, 0.35), (75, 0.409), (100, 0.39), (125, 0.38), (150, 0.37), (175, 0.36)]
    out = recommend_checkpoint(
        AdviceInput(
            saves, loss, metric="val/loss", all_evals={"val/loss": loss, "val-core/gsm8k/reward": score}
        )
    )
    assert out["recommended"]["step"] == 150
    assert 75 not in out["deletable"] and out["deletable"] == [25, 50, 100, 125]


def test_values_closer_than_the_evaluations_noise_are_a_tie_broken_by_a_stated_rule():
    # step 100 beats 150 by 0.0001 on a score that moves by ~0.01 between evaluations: a tie, the later kept
    saves = [ckpt(s) for s in (50, 100, 150, 200)]
    score = [(50, 0.36), (100, 0.4091), (150, 0.4090), (200, 0.37)]
    out = recommend_checkpoint(AdviceInput(saves, score, metric="val/score", direction="max"))
    reason = out["recommended"]["reason"]
    assert out["recommended"]["step"] == 150, reason
    assert reason.startswith("Step 150 ties for the highest val/score, 0.409")
    assert "step(s) 100 (0.4091) are within the evaluations' own noise" in reason
    assert "goes to the later checkpoint (more training, the same result)" in reason
    # both stay: the tie's other half is the best by its value, never deletable
    assert 100 not in out["deletable"]
    # a real difference is no tie
    score = [(50, 0.36), (100, 0.45), (150, 0.41), (200, 0.37)]
    out = recommend_checkpoint(AdviceInput(saves, score, metric="val/score", direction="max"))
    assert out["recommended"]["step"] == 100 and "tie" not in out["recommended"]["reason"]


def test_an_incomplete_best_checkpoint_is_named_with_what_is_missing_and_kept():
    broken = [
        dict(ckpt(s, complete=False), problem=f"no model weights in global_step_{s}") for s in (100, 200, 300)
    ]
    out = recommend_checkpoint(AdviceInput(broken, [(100, 2.0), (200, 1.1), (300, 1.5)], metric="val/loss"))
    assert out["recommended"] is None and 200 not in out["deletable"]
    assert "step 200 (best by val/loss 1.1): no model weights in global_step_200" in out["no_recommendation"]


def test_a_run_without_a_validation_loss_is_judged_by_the_evaluation_it_has():
    from collector.advice.recommend import advice_for_run

    evals = {
        "eval_rouge-l": [(100, 0.31), (200, 0.36), (300, 0.34)],
        "eval_bleu-4": [(100, 0.11), (200, 0.12), (300, 0.15)],
        "eval_runtime": [(100, 9.0), (200, 1.0), (300, 30.0)],
    }
    out = advice_for_run([ckpt(s) for s in (100, 200, 300, 400)], evals, [], {}, 400)
    assert (out["metric"], out["direction"], out["recommended"]["step"]) == ("eval_rouge-l", "max", 200)
    assert "its evaluation eval_rouge-l decided" in out["recommended"]["reason"]
    # BLEU's best (300) stays too; eval_runtime judges nothing
    assert out["deletable"] == [100]
    assert choose_metric({}, ["eval_runtime", "eval_logps/chosen"]) == ("val_loss", "min")
