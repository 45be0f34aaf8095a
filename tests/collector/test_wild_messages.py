"""Messages worded by what the data shows (public HF runs checked by hand, 2026-11-24): a skipped fp16 step
worded by where in the run it happened; trainer.predict()'s test-set entries, which carry no step, said to be
not read (test-set results) instead of reported as bad lines. Fixtures of the same shape, written here."""

from __future__ import annotations

import json

from collector.detect.runlevel import NonfiniteRule, nonfinite_finding
from collector.formats import hf_trainer_state
from tests.collector.test_daemon_support import cli_json


def test_a_skipped_step_is_worded_by_where_it_happened():
    early = nonfinite_finding("grad_norm", 12, float("inf"), NonfiniteRule(), "grad_norm", settings={})
    assert "normal a few times at the start" in early.message
    later = nonfinite_finding(
        "grad_norm", 2100, float("nan"), NonfiniteRule(), "grad_norm", settings={"total_steps": 4500}
    )
    assert "normal" not in later.message and "47% into the run" in later.message
    assert "this step's gradients overflowed" in later.message
    unknown = nonfinite_finding("grad_norm", 2100, float("nan"), NonfiniteRule(), "grad_norm", settings={})
    assert "past the start" in unknown.message and "normal" not in unknown.message


def _state_with_predictions() -> dict:
    history = [{"step": s, "epoch": s / 549, "loss": 1.1 - s / 10000} for s in range(500, 5001, 500)]
    history += [{"step": s, "epoch": s / 549, "eval_loss": 0.6 - s / 50000} for s in range(549, 5491, 549)]
    history.sort(key=lambda e: e["step"])
    history += [{"epoch": 10.0, "train_runtime": 3600.0, "step": 5490}]
    # trainer.predict() on the test set, appended by the script: one entry per metric, no step
    history += [
        {f"predict_{name}": value} for name, value in (("loss", 0.49), ("rouge-l", 36.1), ("runtime", 9.2))
    ]
    return {"global_step": 5490, "max_steps": 5490, "save_steps": 500, "log_history": history}


def test_predict_entries_without_a_step_are_not_bad_lines():
    result = hf_trainer_state.parse(json.dumps(_state_with_predictions()).encode())
    assert result.bad == []
    assert (
        result.info["entries_not_read"]
        == "3 predict_* entries without a step were not read (test-set results)"
    )
    assert "predict_loss" not in result.points.metric


def test_check_json_says_the_predict_entries_were_not_read(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "trainer_state.json").write_text(json.dumps(_state_with_predictions()))
    out = cli_json(tmp_path / "db.duckdb", "check", str(tmp_path / "run"))
    [run] = out["runs"]
    assert [f["reason"] for f in run["not_read"]] == [
        "3 predict_* entries without a step were not read (test-set results)"
    ]


def test_a_lone_trainer_state_is_judged_with_its_own_settings(tmp_path):
    """The file that brings the points also brings the run's settings (max_steps): they are known when its
    points are judged, so a skipped step late in the run is placed in it, not "past the start"."""
    history = [
        {"step": s, "epoch": s / 450, "loss": 1.2 - s / 10000, "grad_norm": 0.8} for s in range(10, 4501, 10)
    ]
    history[209]["grad_norm"] = float("nan")  # step 2100 of 4500
    state = {"global_step": 4500, "max_steps": 4500, "save_steps": 500, "log_history": history}
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "trainer_state.json").write_text(json.dumps(state))
    out = cli_json(tmp_path / "db.duckdb", "check", str(tmp_path / "run"))
    [run] = out["runs"]
    [skipped] = [a for a in run["alerts"] if a["rule"] == "nonfinite"]
    assert skipped["first_step"] == 2100
    assert "47% into the run" in skipped["message"], skipped["message"]
