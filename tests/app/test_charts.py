"""Unit tests of the app's pure series and figure functions, on API-shaped series and the API's alerts."""

from __future__ import annotations

import json
import math

import pytest

from app.charts import NONFINITE_TRACE, alerts_for, bucket_note, epoch_figure, metric_figure
from app.series import (
    append_new,
    debiased_ema,
    from_api,
    group_metrics,
    raw_points,
    scaled,
)
from collector.api.models import Alert, EpochRow, Series


def alert(rule: str, severity: str, metric: str | None, first_step: int, last_step: int) -> Alert:
    """An open alert as `GET /api/alerts` answers it."""
    return Alert(
        id=first_step,
        run="r",
        rule=rule,
        severity=severity,
        metric=metric,
        first_step=first_step,
        last_step=last_step,
        state="open",
        message=f"{rule} at step {first_step}",
        value=None,
        note=None,
        created_at=None,
        updated_at=None,
    )


def raw_series(metric: str, steps: list[int], values: list) -> dict:
    return from_api(raw_points(metric, steps, values))


def test_debiased_ema_matches_tensorboard_by_hand():
    weight = 0.6
    values = [1.0, 2.0, 4.0]
    # TensorBoard: last = last*w + (1-w)*v; smoothed = last / (1 - w^n)
    last, expected = 0.0, []
    for n, v in enumerate(values, start=1):
        last = last * weight + (1 - weight) * v
        expected.append(last / (1 - weight**n))
    assert debiased_ema(values, weight) == pytest.approx(expected)
    # debiasing makes the first smoothed point equal the first value (a plain EMA would start at 0.4)
    assert debiased_ema(values, weight)[0] == pytest.approx(1.0)


def test_debiased_ema_passes_nan_through_without_poisoning_the_rest():
    out = debiased_ema([1.0, math.nan, 1.0, 1.0], 0.9)
    assert math.isnan(out[1])
    assert out[2] == pytest.approx(1.0) and out[3] == pytest.approx(1.0)
    assert debiased_ema([3.0, 5.0], 0.0) == [3.0, 5.0]


def test_from_api_marks_null_and_counted_nonfinite_points():
    series = raw_series("train/loss", [1, 2, 3], [1.0, None, "NaN"])
    assert series["nonfinite_steps"] == [2, 3]
    down = from_api(
        Series.model_validate(
            {
                "metric": "train/grad_norm",
                "steps": [0, 100],
                "values": [1.0, 1.0],
                "min": [0.5, 0.4],
                "max": [2.0, 900.0],
                "downsampled": True,
                "total_points": 200,
                "nonfinite": [3, 0],  # the API's count of NaN/inf points per bucket
            }
        )
    )
    assert down["maxs"] == [2.0, 900.0] and down["mins"] == [0.5, 0.4]
    assert down["nonfinite_steps"] == [0]
    assert down["total_points"] == 200


def test_append_new_adds_only_points_past_the_last_step():
    held = raw_series("train/loss", [1, 2], [3.0, 2.5])
    polled = raw_series("train/loss", [2, 3, 4], [2.5, None, 2.0])
    merged = append_new(held, polled)
    assert merged["steps"] == [1, 2, 3, 4]
    assert merged["nonfinite_steps"] == [3]
    assert merged["total_points"] == 4
    assert append_new(merged, polled) is merged  # a repeated poll adds nothing
    assert held["steps"] == [1, 2]  # the held series is not changed in place


def test_lr_in_scaled_units_is_shown_in_real_units():
    # the scale and the real name come from the API (core.roles, as detection reads them), 2.5e-4 too
    from collector.core.roles import real_units_name, value_scale

    assert value_scale("train/lr(1e-3)") == pytest.approx(1e-3)
    assert value_scale("lr(2.5e-4)") == pytest.approx(2.5e-4)
    assert value_scale("train/lr") == 1.0
    assert real_units_name("train/lr(1e-3)") == "train/lr" and real_units_name("train/lr") == "train/lr"
    series = scaled(raw_series("train/lr(1e-3)", [1, 2], [0.5, 1.0]), 1e-3)
    assert series["values"] == pytest.approx([5e-4, 1e-3])


def test_group_metrics_by_prefix_leaving_out_role_panels():
    names = ["train/loss", "train/mfu", "actor/kl", "critic/vf_loss", "perf/max_memory_allocated_gb", "epoch"]
    assert group_metrics(names, exclude={"train/loss"}) == {
        "actor": ["actor/kl"],
        "critic": ["critic/vf_loss"],
        "other": ["epoch"],
        "perf": ["perf/max_memory_allocated_gb"],
        "train": ["train/mfu"],
    }


def figure_json(fig) -> dict:
    return json.loads(fig.to_json())


def test_downsampled_series_draws_band_nan_markers_and_says_so():
    series = from_api(
        Series.model_validate(
            {
                "metric": "train/grad_norm",
                "steps": [0, 500, 1000],
                "values": [1.0, 1.1, None],
                "min": [0.5, 0.6, 0.7],
                "max": [1.5, 750.0, None],
                "downsampled": True,
                "total_points": 1500,
            }
        )
    )
    fig = figure_json(metric_figure([series], title="grad_norm", normal_band=(0.1, 10), warning_line=100))
    names = [t["name"] for t in fig["data"]]
    assert names == ["train/grad_norm max", "train/grad_norm min", "train/grad_norm", NONFINITE_TRACE,
                     "normal range", "warning 100"]  # fmt: skip
    # the levels are named in the legend, not written over the chart where alert labels go
    assert not [
        a for a in fig["layout"].get("annotations", []) if "normal" in a["text"] or "warning" in a["text"]
    ]
    band_max = fig["data"][0]["y"]
    assert 750.0 in band_max  # the spike inside a bucket stays visible
    nan_trace = fig["data"][3]
    assert nan_trace["x"] == [1000] and nan_trace["yaxis"] == "y2"
    assert "buckets" in fig["layout"]["meta"]["bucket_note"]
    shapes = fig["layout"]["shapes"]
    assert any(s.get("y0") == 0.1 and s.get("y1") == 10 for s in shapes)
    assert any(s.get("y0") == 100 and s.get("y1") == 100 for s in shapes)
    assert bucket_note([series]).startswith("Showing min-max buckets")


def test_raw_series_with_smoothing_keeps_raw_points_under_the_line_and_marks_alerts():
    series = raw_series("train/loss", list(range(1, 11)), [float(10 - i) for i in range(10)])
    val = raw_series("val/loss", [5, 10], [6.0, 4.0])
    alerts = [
        alert("val_loss_rise", "warn", "val/loss", 5, 10),
        alert("grad_spike", "error", "train/grad_norm", 3, 3),
        alert("stall", "error", None, 9, 9),
    ]
    shown = alerts_for(alerts, ["train/loss", "val/loss"])
    assert [a.rule for a in shown] == ["val_loss_rise", "stall"]
    fig = figure_json(metric_figure([series, val], title="loss", smoothing=0.6, log_y=True, alerts=shown))
    names = [t["name"] for t in fig["data"]]
    assert names == [
        "train/loss raw",
        "train/loss",
        "val/loss raw",
        "val/loss",
        "val_loss_rise (warn)",
        "stall (error)",
    ]
    assert fig["data"][0]["y"] == [float(10 - i) for i in range(10)]
    assert fig["data"][1]["y"] != fig["data"][0]["y"]  # the line on top is the smoothed one
    assert fig["layout"]["yaxis"]["type"] == "log"
    rect = [s for s in fig["layout"]["shapes"] if s.get("type") == "rect"]
    assert rect[0]["x0"] == 5 and rect[0]["x1"] == 10 and rect[0]["fillcolor"] == "#ff7f0e"
    assert fig["layout"]["meta"]["bucket_note"] is None
    # Alerts are named in the legend, not by labels on the plot (issue 23.2: they overlapped each other and
    # the threshold labels); a marker at each episode's start sits on the top edge
    assert not [
        a for a in fig["layout"].get("annotations", []) if "(warn)" in a["text"] or "(error)" in a["text"]
    ]
    marks = {t["name"]: t for t in fig["data"][4:]}
    assert marks["val_loss_rise (warn)"]["x"] == [5] and marks["stall (error)"]["x"] == [9]
    assert (
        marks["val_loss_rise (warn)"]["yaxis"] == "y2"
        and marks["val_loss_rise (warn)"]["marker"]["color"] == "#ff7f0e"
    )
    assert marks["val_loss_rise (warn)"]["text"] == ["val_loss_rise (warn) at step 5–10"]


def test_recurring_alerts_are_one_legend_entry_beside_the_thresholds():
    series = raw_series("grad_norm", list(range(1, 101)), [1.0] * 100)
    spikes = [alert("grad_spike", "error", "grad_norm", s, s) for s in (10, 11, 12, 60)]
    fig = figure_json(
        metric_figure([series], title="grad", alerts=spikes, warning_line=5.0, normal_band=(0.5, 2))
    )
    (mark,) = [t for t in fig["data"] if t["name"].startswith("grad_spike")]
    assert mark["name"] == "grad_spike (error) ×4" and mark["x"] == [10, 11, 12, 60]
    # the thresholds are named in the legend too: nothing is written over the plot to collide
    assert not fig["layout"].get("annotations")
    assert {"normal range", "warning 5", "grad_spike (error) ×4"} <= {t["name"] for t in fig["data"]}
    below = figure_json(metric_figure([series], title="grad", alerts=spikes, legend_below=True))
    plain = figure_json(metric_figure([series], title="grad", legend_below=True))
    assert below["layout"]["height"] > plain["layout"]["height"]  # the legend's alert line has its room


def test_checkpoint_saves_are_marked_on_the_step_time_chart():
    series = raw_series("timing/step_s", [1, 2, 3, 4], [0.1, 0.1, 0.9, 0.1])
    fig = figure_json(metric_figure([series], title="step time", checkpoint_steps=[3]))
    assert any(s.get("x0") == 3 and s.get("line", {}).get("dash") == "dot" for s in fig["layout"]["shapes"])
    assert "checkpoint saved" in [t["name"] for t in fig["data"]]


def test_epoch_figure_draws_mean_with_spread():
    rows = [
        EpochRow(epoch=1, mean=2.0, std=0.5, min=1.0, max=3.0, points=4),
        EpochRow(epoch=0, mean=3.0, std=0.2, min=2.5, max=3.5, points=4),
    ]
    fig = figure_json(epoch_figure(rows, metric="train/loss"))
    mean = next(t for t in fig["data"] if t["name"] == "mean")
    assert mean["x"] == [0, 1] and mean["y"] == [3.0, 2.0]
    assert mean["error_y"]["array"] == [0.2, 0.5]


def test_a_bucket_with_a_nan_and_a_spike_draws_both():
    # The API's shape for such a bucket: value NaN, max the spike (finite values only), nonfinite counted.
    series = from_api(
        Series.model_validate(
            {
                "metric": "grad_norm",
                "steps": [40, 80, 120],
                "values": [float("nan"), 1.67, 0.84],
                "min": [0.49, 0.52, 0.6],
                "max": [19.28, 1.92, 1.74],
                "nonfinite": [3, 0, 0],
                "downsampled": True,
                "total_points": 120,
            }
        )
    )
    fig = figure_json(metric_figure([series], title="grad_norm"))
    by_name = {t["name"]: t for t in fig["data"]}
    assert by_name["grad_norm max"]["y"][0] == 19.28  # the spike's band
    assert by_name[NONFINITE_TRACE]["x"] == [40]  # and the NaN's marker, in the same bucket


def test_small_values_keep_their_digits_on_the_axis():
    # a constant lr of 5e-4 read "0" on a -0.5..1 axis: the ticks say 0.0005
    series = raw_points("lr", [1, 2, 3], [5e-4, 4e-4, 3e-4])
    fig = figure_json(metric_figure([from_api(series)], title="lr"))
    assert fig["layout"]["yaxis"]["tickformat"] == ".4~g"
