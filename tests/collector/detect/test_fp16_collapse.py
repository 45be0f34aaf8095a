"""An fp16 run whose loss scale collapsed (seen on an H100: HF Trainer, fp16 AMP, lr 1.0, no clipping): the
grad norm NaN at every logged step from the first, the training loss logged as exactly 0 beside it (HF's
`logging_nan_inf_filter` averages no NaN, so a window of only NaN losses logs 0), eval_loss NaN at each
evaluation. One error alert from the first NaN step, worded by what the escalation means. Synthetic series of
that shape; `tests/collector/test_hf_two_files.py` takes the same shape through a DuckDB ingest."""

from __future__ import annotations

import math

import numpy as np

from collector.detect.backlog import judge_backlog
from collector.detect.engine import RunDetector, detect_series
from collector.detect.incidents import RunSteps, incidents

RUN_INFO = {"trainer": "hf_trainer", "total_steps": 200, "warmup_steps": 0, "vocab_size": 512}


def collapsed_fp16(last: int = 200) -> dict[str, tuple[list[int], list[float]]]:
    """HF's log order at a step: grad_norm, loss (training metrics by name), then eval_loss."""
    steps = list(range(5, last + 1, 5))
    evals = [s for s in steps if s % 50 == 0]
    return {
        "grad_norm": (steps, [math.nan] * len(steps)),
        "loss": (steps, [17.85 if s == 5 else 0.0 for s in steps]),
        "eval_loss": (evals, [math.nan] * len(evals)),
    }


def _backlog(series: dict) -> list:
    rows = sorted(
        (s, order, m, v)
        for order, (m, (steps, values)) in enumerate(series.items())
        for s, v in zip(steps, values, strict=True)
    )
    steps, _, metrics, values = zip(*rows, strict=True)
    detector = RunDetector("run", None, RUN_INFO)
    return judge_backlog(detector, np.array(steps), np.array(metrics, dtype=object), np.array(values))


def test_nan_gradients_from_step_5_are_one_error_alert_from_step_5_worded_by_the_escalation():
    events = detect_series(collapsed_fp16(), run_info=RUN_INFO)
    (alert,) = events  # no second alert: neither the eval_loss NaN nor the loss of 0 (no_learning)
    assert (alert.rule, alert.metric, str(alert.severity)) == ("nonfinite", "grad_norm", "error")
    assert (alert.first_step, alert.last_step) == (5, 200)
    assert alert.evidence["metrics"] == ["grad_norm", "eval_loss"] and alert.evidence["points"] == 40
    assert alert.evidence["since_step"] == 5
    message = alert.message
    assert "at 40 logged steps in a row since step 5" in message, message
    assert "loss scale collapsed or the weights themselves are NaN" in message
    assert "harmless once" not in message and "normal a few times" not in message
    # the loss of 0 beside the NaN gradients is the trainer's NaN filter, not a perfect fit
    assert "logged as exactly 0" in message and "logging_nan_inf_filter" in message
    assert "before step 5" in message
    # the backlog path says the same
    (same,) = _backlog(collapsed_fp16())
    assert (same.first_step, same.last_step, same.severity, same.message) == (5, 200, alert.severity, message)
    found = incidents(
        [alert.to_dict() | {"id": 1, "state": "open"}], {"run": RunSteps(5, 200, running=False)}
    )
    assert [(i.first_step, str(i.severity)) for i in found] == [(5, "error")]


def test_an_escalated_episode_says_what_it_means_at_each_level():
    # 6 NaN gradients in a row (a warning): collapsing; the loss still finite, so no word about a NaN filter
    steps = list(range(5, 31, 5))
    series = {"grad_norm": (steps, [math.nan] * 6), "loss": (steps, [2.0] * 6)}
    (alert,) = detect_series(series, run_info=RUN_INFO)
    assert str(alert.severity) == "warn" and alert.first_step == 5
    assert "at 6 logged steps in a row since step 5" in alert.message
    assert "loss scale is collapsing" in alert.message and "exactly 0" not in alert.message
    # NaNs with finite steps between them in one episode are not "in a row"
    gappy = [5, 10, 15, 25, 30, 40, 45]
    series = {
        "grad_norm": (list(range(5, 46, 5)), [math.nan if s in gappy else 1.0 for s in range(5, 46, 5)])
    }
    (alert,) = detect_series(series, run_info=RUN_INFO)
    assert "at 7 logged steps in one episode since step 5" in alert.message, alert.message
    # a single skipped step keeps its own wording
    single = {"grad_norm": ([5, 10, 15], [1.0, math.nan, 1.0])}
    (alert,) = detect_series(single, run_info=RUN_INFO)
    assert str(alert.severity) == "info" and "normal a few times at the start" in alert.message


def test_a_nan_evaluation_at_the_step_the_gradients_went_nan_still_heads_the_incident():
    # both NaN from the same step: the more severe metric heads (the fold is for one step only)
    series = collapsed_fp16()
    series["grad_norm"] = (
        series["grad_norm"][0],
        [1.0 if s < 50 else math.nan for s in series["grad_norm"][0]],
    )
    series["loss"] = (series["loss"][0], [3.0 - s / 100 for s in series["loss"][0]])
    (alert,) = detect_series(series, run_info=RUN_INFO)
    assert (alert.metric, alert.first_step, alert.last_step, str(alert.severity)) == (
        "eval_loss",
        50,
        200,
        "error",
    )
    assert alert.evidence["metrics"] == [
        "eval_loss",
        "grad_norm",
    ]  # and the grad norm's NaNs after 50 stay in it
    # a NaN loss beside NaN gradients at every step from 12: one alert headed by the loss, from 12 to the end
    steps = list(range(1, 41))
    both = {
        "grad_norm": (steps, [1.0 if s < 12 else math.nan for s in steps]),
        "loss": (steps, [3.0 - s / 100 if s < 12 else math.nan for s in steps]),
    }
    (alert,) = detect_series(both, run_info=RUN_INFO)
    assert (alert.metric, alert.first_step, alert.last_step) == ("loss", 12, 40)
    assert alert.evidence["metrics"] == ["loss", "grad_norm"]
    (same,) = _backlog(both)
    assert (same.metric, same.first_step, same.last_step) == ("loss", 12, 40)
