"""A spike episode reports its peak (value, step, ratio to the baseline), not the last point that kept it open."""

from __future__ import annotations

import pytest

from collector.core.model import Points
from collector.detect.engine import RunDetector, detect_series
from scripts.detect_report import analyse
from tests.collector.detect.synth import healthy_sft, replace_values


def only(events, rule):
    found = [e for e in events if e.rule == rule]
    assert len(found) == 1, [(e.rule, e.first_step, e.last_step) for e in events]
    return found[0]


BURST = {700: 8.0, 701: 60.0, 702: 20.0, 703: 9.0, 704: 7.0, 705: 6.0}


def test_grad_spike_episode_reports_its_peak_not_its_last_point():
    series = replace_values(healthy_sft(seed=6), "train/grad_norm", BURST)
    alert = only(detect_series(series), "grad_spike")
    assert (alert.first_step, alert.last_step) == (700, 705)
    assert alert.value == 60.0
    assert alert.evidence["peak"] == 60.0 and alert.evidence["peak_step"] == 701
    assert "peaked at 60 at step 701" in alert.message
    ratio = 60.0 / alert.evidence["baseline_median"]
    assert f"{ratio:.4g}x its median" in alert.message


def test_the_peak_survives_batches_and_a_restart():
    series = replace_values(healthy_sft(seed=6), "train/grad_norm", BURST)
    steps, values = series["train/grad_norm"]
    det = RunDetector("r")
    events = []
    for s, v in zip(steps, values, strict=True):
        if s <= 701:
            events += det.update(Points([s], ["train/grad_norm"], [v], [None]))
    (opened,) = [e for e in events if e.rule == "grad_spike"][-1:]
    # a restarted collector resumes the stored alert; lower points after it keep the stored peak
    again = RunDetector("r")
    again.resume_episodes([opened.to_dict()])
    tail = [(s, v) for s, v in zip(steps, values, strict=True) if 600 <= s <= 704]
    later = again.update(Points([s for s, _ in tail], ["train/grad_norm"] * len(tail), [v for _, v in tail],
                                [None] * len(tail)))  # fmt: skip
    last = [e for e in later if e.rule == "grad_spike"][-1]
    assert last.first_step == 700 and last.value == 60.0 and last.evidence["peak_step"] == 701


def test_step_time_and_loss_spikes_report_their_peaks_too():
    series = replace_values(healthy_sft(seed=18), "train/time(s)", {777: 9.0, 778: 30.0, 779: 12.0})
    alert = only(detect_series(series), "step_time_spike")
    assert alert.value == 30.0 and alert.evidence["peak_step"] == 778
    series = replace_values(healthy_sft(seed=8), "train/loss", {702: 4.0, 703: 6.0, 704: 3.5})
    alert = only(detect_series(series), "loss_spike")
    assert (
        alert.value == 6.0
        and alert.evidence["peak_step"] == 703
        and "peaked at 6 at step 703" in alert.message
    )


def test_qwen_chess_burst_is_reported_at_its_peak(real_runs):
    row = analyse(real_runs / "Miguel-Alessio__qwen-chess-lora__logs.json")
    (grad,) = [a for a in row["alerts"] if a["rule"] == "grad_spike"]
    assert grad["value"] == pytest.approx(131, abs=1) and grad["evidence"]["peak_step"] == 2680
    assert "peaked at 131" in grad["message"] and "at step 2680" in grad["message"]
    assert grad["evidence"]["baseline_median"] == pytest.approx(0.33, abs=0.01)
