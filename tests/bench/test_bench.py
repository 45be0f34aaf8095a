"""Checks of the benchmark's own parts (in the fast suite, about 8 s): the generated history holds
exactly the points and trouble it promises, the peak-RSS measurement is per child, and the visibility
check finds planted spikes in bucket maxima and misses removed ones."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import duckdb
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import backfill  # noqa: E402
import gen  # noqa: E402
import harness  # noqa: E402
import query  # noqa: E402
import tensorboard_peer  # noqa: E402


def test_slices_hold_the_same_values_as_the_whole_run_across_noise_blocks():
    h = gen.history(150_000)
    whole = gen.train_columns(h)
    part = gen.train_columns(h, 60_000, 140_000)  # spans two noise-block edges
    for m in gen.TRAIN_METRICS:
        np.testing.assert_array_equal(whole[m][60_000 - 1 : 140_000 - 1], part[m])


def test_generated_file_holds_every_point_and_the_planted_trouble(tmp_path):
    h = gen.history(5_000, val_every=1000)
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(gen.verl_lines(h)))
    rows = duckdb.sql(
        f"""SELECT metric, step, value FROM (UNPIVOT (SELECT step, data.* FROM read_ndjson('{path}'))
            ON COLUMNS(* EXCLUDE step) INTO NAME metric VALUE value)"""
    ).fetchall()
    assert len(rows) == h.points == 4 * 5_000 + 5
    nans = [(m, s) for m, s, v in rows if math.isnan(v)]
    assert nans == [("train/loss", h.nan_step)]
    grad = {s: v for m, s, v in rows if m == "train/grad_norm"}
    top5 = sorted(grad, key=grad.get)[-5:]
    assert sorted(top5) == list(h.spike_steps)
    assert [grad[s] for s in h.spike_steps] == list(h.spike_values)
    assert max(v for s, v in grad.items() if s not in h.spike_steps) < 2.0


def _buckets(h: gen.History, cols: dict, n: int) -> dict:
    """Bucket maxima the way the API labels them (last step of each bucket), built with numpy."""
    edges = np.array_split(np.arange(h.steps), n)
    out = {}
    for m in ("train/grad_norm", "train/loss"):
        v = cols[m]
        out[m] = {
            "steps": [int(cols["step"][e[-1]]) for e in edges],
            "max": [float("nan") if np.isnan(v[e]).any() else float(np.max(v[e])) for e in edges],
        }
    return out


def test_visibility_check_finds_spikes_in_bucket_maxima_and_misses_removed_ones():
    h = gen.history(20_000)
    cols = gen.train_columns(h)
    assert query.trouble_visible(h, _buckets(h, cols, 2000)) == {
        "spikes_visible": 5,
        "spikes_planted": 5,
        "nan_visible": True,
    }
    cols["train/grad_norm"][h.spike_steps[2] - 1] = 1.0
    cols["train/loss"][h.nan_step - 1] = 1.0
    assert query.trouble_visible(h, _buckets(h, cols, 2000)) == {
        "spikes_visible": 4,
        "spikes_planted": 5,
        "nan_visible": False,
    }


def test_peak_rss_is_the_childs_own_not_the_parents():
    ballast = np.ones(40_000_000)  # 320 MB in this process: a forked child would inherit this high-water mark
    small = harness.measured_run([sys.executable, "-c", "pass"])
    big = harness.measured_run(
        [sys.executable, "-c", "b = bytearray(200 * 2**20); b[::4096] = b'x' * len(b[::4096])"]
    )
    assert ballast.sum() == 40_000_000
    assert small.rc == 0 and big.rc == 0
    assert small.peak_rss_mb < 100
    assert big.peak_rss_mb > 200


def test_replayed_server_sampling_keeps_exactly_what_the_tensorboard_server_keeps():
    h = gen.history(3_000)
    logdir = gen.tensorboard_dir(h)
    loaded = tensorboard_peer.server_load(logdir)  # the server's own ingester: 1,000 per tag
    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(str(logdir), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    everything = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    replayed = tensorboard_peer.server_sample(everything)
    assert sorted(loaded) == sorted(replayed)
    for tag in loaded:
        assert len(loaded[tag]) == min(1000, len(everything[tag]))
        assert [s for s, _ in loaded[tag]] == [s for s, _ in replayed[tag]]
        np.testing.assert_array_equal([v for _, v in loaded[tag]], [v for _, v in replayed[tag]])


def test_both_duckdb_yardsticks_load_every_point_and_the_nan(tmp_path):
    h = gen.history(5_000, val_every=1000)
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(gen.verl_lines(h)))
    for script in (backfill._YARDSTICK, backfill._YARDSTICK_STRINGS):
        r = backfill.yardstick(script, path, tmp_path / "y.duckdb")
        assert (r["points"], r["nan_points"]) == (h.points, 1), r
        assert not list(tmp_path.glob("y.duckdb*"))  # removed after the load


def test_the_median_run_keeps_the_last_runs_verified_counts():
    runs = [{"wall_s": 3.0}, {"wall_s": 1.0}, {"wall_s": 2.0, "points_stored": 7}]
    assert backfill.median_run(runs) == {"wall_s": 2.0, "points_stored": 7}
    runs = [{"wall_s": 2.0}, {"wall_s": 1.0}, {"wall_s": 3.0, "points_stored": 7}]
    assert backfill.median_run(runs) == {"wall_s": 2.0, "points_stored": 7}
    assert backfill.median_run([{"wall_s": 1.0}, {"error": "x", "wall_s": 0.1}])["error"] == "x"
