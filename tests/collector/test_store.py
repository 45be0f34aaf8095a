"""The store on a real DuckDB file: migrations, the replace-the-same-step rule, NaN, downsampling."""

from __future__ import annotations

import math

import duckdb
import numpy as np
import pytest

from collector.core.model import BadLine, Points
from collector.store import alerts as store_alerts
from collector.store import points as store_points
from collector.store import read as store_read
from collector.store.db import Store
from collector.store.schema import MIGRATIONS, SCHEMA_VERSION, StoreError, migrate, schema_version


def _points(rows: list[tuple[int, str, float]]) -> Points:
    p = Points()
    for step, metric, value in rows:
        p.add(step, metric, value)
    return p


def _source(store: Store, run: str = "r") -> object:
    store.upsert_run(run, "/root", f"/root/{run}", "jsonl")
    return store.add_source(run, f"/root/{run}/metrics.jsonl", "jsonl")


def test_migrate_v1_database_then_again(tmp_path):
    db = tmp_path / "old.duckdb"
    con = duckdb.connect(str(db))
    assert migrate(con, target=1) == 1
    con.execute("INSERT INTO runs (id, path, format) VALUES ('a', '/x/a', 'jsonl')")
    con.execute(
        "INSERT INTO points VALUES ('a', 'train/loss', 1, 2.5, NULL, 1, 0), ('a', 'train/loss', 2, 2.0, NULL, 1, 0)"
    )
    con.close()

    store = Store(db)  # opening migrates to the current version
    assert schema_version(store.cursor()) == SCHEMA_VERSION == len(MIGRATIONS)
    # v2 summarised the points the v1 database already held
    assert store_read.metric_stats(store) == [
        {"run": "a", "metric": "train/loss", "points": 2, "first_step": 1, "last_step": 2, "last_value": 2.0}
    ]
    assert migrate(store.cursor()) == SCHEMA_VERSION  # again: nothing to do, nothing breaks
    assert store.rows("SELECT count(*) FROM schema_version")[0][0] == SCHEMA_VERSION
    assert store.rows("SELECT count(*) FROM points")[0][0] == 2
    store.close()


def test_migrating_to_integer_series_keeps_every_point_and_the_runs_go_on(tmp_path):
    db = tmp_path / "v4.duckdb"
    con = duckdb.connect(str(db))
    assert migrate(con, target=4) == 4
    rows = [(run, metric, step, float(step) * (1 + i), None, 1, 0) for i, (run, metric) in
            enumerate([("a", "train/loss"), ("a", "val/loss"), ("b", "train/loss")]) for step in range(1, 6)]  # fmt: skip
    con.executemany("INSERT INTO points (run_id, metric, step, value, wall_time, source_id, segment) VALUES (?, ?, ?, ?, ?, ?, ?)", rows)  # fmt: skip
    before = con.execute("SELECT run_id, metric, step, value FROM points ORDER BY ALL").fetchall()
    con.close()

    store = Store(db)
    assert store.rows("SELECT run_id, metric, step, value FROM points ORDER BY ALL") == before
    assert store.rows("SELECT count(*) FROM series")[0][0] == 3
    # the migrated rows lie in series order, each series' steps together
    assert store.rows("SELECT series, step FROM point_rows") == sorted(
        store.rows("SELECT series, step FROM point_rows")
    )
    # a run goes on after the migration: its series is found again, a new metric gets a new one
    s = store.add_source("a", "/root/a/metrics.jsonl", "jsonl")
    with store.transaction() as cur:
        store_points.add_points(
            cur, s, _points([(6, "train/loss", 0.5), (6, "grad_norm", 1.0)]), may_overlap=False
        )
        store_points.add_points(cur, s, _points([(5, "train/loss", 9.0)]), may_overlap=True)
    assert store.rows("SELECT count(*) FROM series")[0][0] == 4
    assert store.rows("SELECT step, value FROM points WHERE run_id = 'a' AND metric = 'train/loss' AND step >= 5 ORDER BY step") == [(5, 9.0), (6, 0.5)]  # fmt: skip
    assert store.rows("SELECT step, value FROM points_replaced") == [(5, 5.0)]
    store.close()


def test_rewritten_steps_replace_in_queries_and_keep_the_old_life(tmp_path):
    store = Store(tmp_path / "s.duckdb")
    s = _source(store)
    with store.transaction() as cur:
        store_points.add_points(
            cur, s, _points([(st, "loss", 10.0 - st) for st in range(1, 6)]), may_overlap=False
        )
    s.segment = 1  # the file was truncated: its second life rewrites steps 4 and 5
    with store.transaction() as cur:
        store_points.add_points(
            cur, s, _points([(4, "loss", 40.0), (5, "loss", 5.0), (6, "loss", 60.0)]), may_overlap=True
        )

    got = store_read.series(store, "r", "loss", points=100)
    assert got["steps"] == [1, 2, 3, 4, 5, 6]
    assert got["values"] == [9.0, 8.0, 7.0, 40.0, 5.0, 60.0]  # step 5 had the same value: nothing replaced
    old = store_read.replaced_points(store, "r", "loss")
    assert [(o["step"], o["value"], o["segment"]) for o in old] == [(4, 6.0, 0)]
    assert store_read.metric_stats(store, "r")[0]["points"] == 6
    store.close()


def _float32(value: float) -> float:
    return float(np.float32(value))


def test_a_float32_copy_replaced_by_its_float64_value_is_no_replaced_value(tmp_path):
    # an HF run: TensorBoard keeps float32 what trainer_state.json keeps float64, and the reader reads the
    # TensorBoard file first; on five real GPU HF runs all 594 such pairs were listed as replaced values
    store = Store(tmp_path / "s.duckdb")
    events = _source(store)
    state = store.add_source("r", "/root/r/checkpoint-100/trainer_state.json", "hf_trainer_state")
    exact = [(st, "loss", 1.0 / (3 * st)) for st in range(1, 6)]
    copies = [(st, m, _float32(v)) for st, m, v in exact]
    assert all(c[2] != e[2] for c, e in zip(copies, exact, strict=True))  # not equal as float64
    twice = [(8, "epoch", 1.0), (8, "epoch", 1.0), (9, "epoch", 1.0), (9, "epoch", 2.0)]  # one batch
    with store.transaction() as cur:
        first = _points([*copies, (6, "loss", 2.0), (7, "loss", math.inf)])
        store_points.add_points(cur, events, first, may_overlap=False)
    # beyond float32's spacing, and a finite value for an infinite one: other values, replaced as before
    others = [(6, "loss", 2.0 * (1 + 2.0**-20)), (7, "loss", 3.0e38)]
    with store.transaction() as cur:
        store_points.add_points(cur, state, _points(exact + others + twice), may_overlap=True)
    got = store_read.series(store, "r", "loss", points=100)
    assert got["values"] == [v for _, _, v in exact + others]  # the later write wins, as before
    old = store_read.replaced_points(store, "r", "loss")
    assert [(o["step"], o["value"]) for o in old] == [(6, 2.0), (7, math.inf)]
    # one value logged twice at a step in one batch is no older life; another value is
    assert [(o["step"], o["value"]) for o in store_read.replaced_points(store, "r", "epoch")] == [(9, 1.0)]
    assert {m["metric"]: m["points"] for m in store_read.metric_stats(store, "r")} == {"loss": 7, "epoch": 2}
    store.close()


def test_same_step_twice_in_one_batch_keeps_the_last(tmp_path):
    store = Store(tmp_path / "s.duckdb")
    s = _source(store)
    with store.transaction() as cur:
        store_points.add_points(cur, s, _points([(1, "loss", 1.0), (2, "loss", 2.0)]), may_overlap=False)
        store_points.add_points(cur, s, _points([(2, "loss", 3.0), (2, "loss", 4.0)]), may_overlap=True)
    assert store_read.series(store, "r", "loss")["values"] == [1.0, 4.0]
    assert sorted(o["value"] for o in store_read.replaced_points(store, "r", "loss")) == [2.0, 3.0]
    assert store_read.metric_stats(store, "r")[0]["points"] == 2
    store.close()


def test_a_transaction_that_fails_leaves_nothing(tmp_path):
    store = Store(tmp_path / "s.duckdb")
    s = _source(store)
    try:
        with store.transaction() as cur:
            store_points.add_points(cur, s, _points([(1, "loss", 1.0)]), may_overlap=False)
            s.offset = 99
            store.save_source(cur, s)
            raise RuntimeError("crash between the rows and the commit")
    except RuntimeError:
        pass
    assert store.rows("SELECT count(*) FROM points")[0][0] == 0
    assert store.sources()[s.path].offset == 0
    store.close()


def test_downsampling_keeps_every_spike_and_nan(tmp_path):
    store = Store(tmp_path / "s.duckdb")
    s = _source(store)
    rows = [(st, "loss", 1.0) for st in range(1, 100_001)]
    rows[12_345] = (12_346, "loss", 500.0)  # a spike
    rows[77_000] = (77_001, "loss", float("nan"))
    rows[90_000] = (90_001, "loss", float("inf"))
    with store.transaction() as cur:
        store_points.add_points(cur, s, _points(rows), may_overlap=False)
    got = store_read.series(store, "r", "loss", points=1000)
    assert got["downsampled"] and got["total_points"] == 100_000
    assert len(got["steps"]) == 1000
    assert 500.0 in got["max"] and all(math.isfinite(v) for v in got["max"])
    assert sum(got["nonfinite"]) == 2
    nan_buckets = [i for i, v in enumerate(got["values"]) if isinstance(v, float) and math.isnan(v)]
    assert len(nan_buckets) == 1
    i = nan_buckets[0]
    assert got["steps"][i - 1] < 77_001 <= got["steps"][i] and got["nonfinite"][i] == 1
    assert got["max"][i] == got["min"][i] == 1.0
    inf_bucket = got["values"].index(math.inf)
    assert got["steps"][inf_bucket - 1] < 90_001 <= got["steps"][inf_bucket]
    assert got["nonfinite"][inf_bucket] == 1 and got["max"][inf_bucket] == 1.0
    # enough points asked for: every point, raw
    raw = store_read.series(store, "r", "loss", points=100_000)
    assert not raw["downsampled"] and len(raw["steps"]) == 100_000 and raw["values"][12_345] == 500.0
    store.close()


def test_a_nan_does_not_hide_a_spike_in_its_bucket(tmp_path):
    store = Store(tmp_path / "s.duckdb")
    s = _source(store)
    rows = [(st, "grad_norm", 1.0) for st in range(1, 31)]
    rows[2] = (3, "grad_norm", float("nan"))
    rows[9] = (10, "grad_norm", 19.28)  # the same bucket of ten steps as the NaN
    rows[20:] = [(st, "grad_norm", float("nan")) for st in range(21, 31)]  # a bucket of NaN only
    with store.transaction() as cur:
        store_points.add_points(cur, s, _points(rows), may_overlap=False)
    got = store_read.series(store, "r", "grad_norm", points=3)
    assert got["steps"] == [10, 20, 30] and got["nonfinite"] == [1, 0, 10]
    assert got["max"][:2] == [19.28, 1.0] and got["min"][:2] == [1.0, 1.0]
    assert math.isnan(got["max"][2]) and math.isnan(got["min"][2])  # no finite value at all
    assert math.isnan(got["values"][0]) and got["values"][1] == 1.0 and math.isnan(got["values"][2])
    assert got["first"][0] == 1.0 and got["last"][0] == 19.28
    store.close()


def test_quarantine_is_counted_per_source(tmp_path):
    store = Store(tmp_path / "s.duckdb")
    s = _source(store)
    with store.transaction() as cur:
        store.quarantine(cur, s, [BadLine(3, "not JSON", "garbage"), BadLine(9, "no step", "{}")])
    assert store_read.sources(store, "r")[0]["bad_lines"] == 2
    assert [(q["line"], q["reason"]) for q in store_read.quarantined(store, "r")] == [
        (3, "not JSON"),
        (9, "no step"),
    ]
    store.close()


def test_alert_episode_upserts_and_keeps_history(tmp_path):
    from collector.detect.engine import AlertEvent

    store = Store(tmp_path / "s.duckdb")
    store.upsert_run("r", "/root", "/root/r", "jsonl")
    ev = AlertEvent("grad_spike", "warn", "train/grad_norm", 10, 10, 50.0, "spike")
    assert store_alerts.upsert_events(store, "r", [ev]) == [{"id": 1, "event": "opened"}]
    ev2 = AlertEvent("grad_spike", "error", "train/grad_norm", 10, 14, 80.0, "bigger spike")
    assert store_alerts.upsert_events(store, "r", [ev2])[0]["event"] == "escalated"
    store_alerts.set_state(store, 1, "acked", "looking")
    cleared = AlertEvent("grad_spike", "error", "train/grad_norm", 10, 15, 1.0, "cleared", active=False)
    assert store_alerts.upsert_events(store, "r", [cleared])[0]["event"] == "auto_resolved"
    alert = store_alerts.get_alert(store, 1)
    assert (alert["state"], alert["last_step"], alert["note"]) == ("resolved", 15, "looking")
    assert [h["event"] for h in alert["history"]] == ["opened", "escalated", "acked", "auto_resolved"]
    assert len(store_alerts.list_alerts(store, state="open")) == 0
    store.close()


def test_a_database_that_does_not_match_its_version_is_refused_clearly(tmp_path):
    path = tmp_path / "dev.duckdb"
    Store(path).close()
    con = duckdb.connect(str(path))
    con.execute("ALTER TABLE runs DROP COLUMN detected_to")  # what a development build's v2 lacked
    con.close()
    with pytest.raises(StoreError, match=r"lacks runs\.detected_to.*Nothing was changed"):
        Store(path)


def test_reading_a_run_in_slices_returns_every_point_once_across_gaps(tmp_path):
    store = Store(tmp_path / "s.duckdb")
    s = _source(store)
    steps = [*range(1, 101), *range(10_000, 10_051), 2_000_000]  # dense, a gap, a lone far step
    rows = [(st, m, float(st)) for st in steps for m in ("loss", "lr")]
    with store.transaction() as cur:
        store_points.add_points(cur, s, _points(rows[:-2] + [(5, "grad", 1.0)]), may_overlap=False)
        store_points.add_points(cur, s, _points(rows[-2:]), may_overlap=False)
    for metrics, want in (
        (None, sorted(rows + [(5, "grad", 1.0)])),
        (["lr"], [r for r in rows if r[1] == "lr"]),
    ):
        got, after = [], 0
        while batch := store_read.points_from(store, "r", metrics, after, 7):
            got += batch
            after = batch[-1][0]
            if len(batch) == 7:  # a step split by the limit is read again whole, as the callers do
                got = [r for r in got if r[0] != after]
                after = max((r[0] for r in got), default=0)
        assert got == want
    store.close()


def test_a_failed_unordered_insert_leaves_row_order_preserved(tmp_path):
    """A bulk insert lets DuckDB write rows in any order (a global setting); when it fails, the rollback
    puts the setting back, or later stages (read in file order) would lose their order."""
    from collector.store.points import _unordered

    store = Store(tmp_path / "s.duckdb")
    with pytest.raises(duckdb.Error), store.transaction() as cur, _unordered(cur):
        cur.execute("INSERT INTO point_rows (series) SELECT error('disk full')")
    assert store.rows("SELECT current_setting('preserve_insertion_order')") == [(True,)]
    store.close()
