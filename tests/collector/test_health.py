"""The health checklist on synthetic runs: a healthy finished verl run passes; each broken part fails."""

from __future__ import annotations

import math

from collector.advice.health import health_checklist
from tests.collector.detect.synth import healthy_sft

INFO = {"trainer": {"total_training_steps": 2000}, "optim": {"lr_warmup_steps_ratio": 0.05}}


def by_role(series):
    names = {
        "train/loss": "loss",
        "val/loss": "val_loss",
        "train/grad_norm": "grad_norm",
        "train/lr": "lr",
        "train/time(s)": "step_time",
    }
    return {names[m]: data for m, data in series.items()}


def checkpoints(steps, broken=()):
    return [{"step": s, "path": f"global_step_{s}", "complete": s not in broken, "bytes": 10} for s in steps]


def items(**kw):
    args = {
        "series": by_role(healthy_sft(seed=40)),
        "checkpoints": checkpoints(range(200, 2001, 200)),
        "status": {"status": "completed", "current_step": 2000, "total_steps": 2000},
        "run_info": INFO,
        "latest_marker": 2000,
    } | kw
    return {i["id"]: i for i in health_checklist(**args)}


def test_healthy_finished_run_passes_everything():
    found = items()
    assert [i for i in found.values() if i["state"] != "pass"] == []
    assert {i["phase"] for i in found.values()} == {"start", "checkpoint", "end"}
    assert all(
        set(i) == {"id", "phase", "title", "state", "evidence"} and i["evidence"] for i in found.values()
    )


def test_each_broken_part_fails_with_evidence():
    series = by_role(healthy_sft(seed=41))
    steps, values = series["val_loss"]
    series["val_loss"] = (
        steps,
        [v if s <= 1000 else v + (s - 1000) / 1000 for s, v in zip(steps, values, strict=True)],
    )
    steps, values = series["grad_norm"]
    series["grad_norm"] = (steps, [50.0 if s <= 100 else v for s, v in zip(steps, values, strict=True)])
    steps, values = series["step_time"]
    series["step_time"] = (steps, [v * (5 if s % 3 == 0 else 1) for s, v in zip(steps, values, strict=True)])
    found = items(
        series=series,
        checkpoints=checkpoints(range(200, 1801, 200), broken=(400,)),
        status={"status": "failed", "current_step": 1850, "total_steps": 2000, "error": "CUDA out of memory"},
        latest_marker=1600,
    )
    failed = {k for k, v in found.items() if v["state"] == "fail"}
    assert failed == {
        "start_grad_norm_range",
        "start_step_time_stable",
        "checkpoint_val_loss",
        "checkpoint_complete",
        "checkpoint_latest_marker",
        "end_step_count",
        "end_checkpoints_saved",
        "end_status_completed",
    }
    assert "CUDA out of memory" in found["end_status_completed"]["evidence"]
    assert "400" in found["checkpoint_complete"]["evidence"]
    assert "marker 1600, newest complete checkpoint 1800" in found["checkpoint_latest_marker"]["evidence"]


def test_a_run_still_going_leaves_the_end_unknown():
    found = items(status={"status": "running", "current_step": 900, "total_steps": 2000})
    assert {
        found[k]["state"] for k in ("end_step_count", "end_checkpoints_saved", "end_status_completed")
    } == {"unknown"}


def test_a_run_stopped_on_request_has_ended_short_with_the_reason():
    status = {"state": "stopped", "step": 900, "total_steps": 2000, "stop_reason": "nonfinite at step 880"}
    found = items(status=status)
    assert found["end_status_completed"]["state"] == "fail"
    assert "stopped on request (nonfinite at step 880)" in found["end_status_completed"]["evidence"]
    assert found["end_step_count"]["state"] == "fail" and "900 of 2000" in found["end_step_count"]["evidence"]


def test_loss_not_falling_or_nan_at_the_end_fails():
    series = by_role(healthy_sft(seed=42))
    steps, _ = series["loss"]
    series["loss"] = (steps, [math.log(504)] * (len(steps) - 1) + [math.nan])
    found = items(series=series)
    assert found["start_loss_falling"]["state"] == "fail" and found["end_final_loss"]["state"] == "fail"


def test_nothing_known_is_unknown_not_pass():
    found = {i["id"]: i for i in health_checklist({}, [], None, None)}
    assert {i["state"] for i in found.values()} == {"unknown"}


def test_warmup_seen_without_config_even_when_the_lr_peaks_early():
    # KG-LLM: lr 0, 0, 1e-4, 2e-4, then linear decay, all within the first 100 steps; no warmup in the info
    steps = list(range(1, 101))
    lr = [0.0, 0.0, 1e-4] + [2e-4 * (1 - s / 120) for s in steps[3:]]
    lr[10] = math.nan
    found = {i["id"]: i for i in health_checklist({"lr": (steps, lr)}, [], None, {})}
    assert found["start_lr_warmup"]["state"] == "pass" and "at step 4" in found["start_lr_warmup"]["evidence"]
    flat = {
        i["id"]: i
        for i in health_checklist(
            {"lr": (steps, [1e-4] * 100)}, [], None, {"warmup_ratio": 0.05, "max_steps": 1000}
        )
    }
    assert flat["start_lr_warmup"]["state"] == "fail"  # 50 warmup steps configured, lr flat
