"""The same incidents on every path (issue 22 item 3): a run judged point by point as it is written (live), its
stored backlog judged in bulk, and a collector restarted in the middle of the run on the same DuckDB file give
the same incidents (rule, metric, first step, severity, alert count, state); and on every real log in
../shared, `ingest` and a collector started again on its database hold the same alerts and tell nothing new."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from collector.core.model import Points
from collector.core.roles import step_order
from collector.core.runtime import Settings
from collector.daemon.detection import Detection
from collector.daemon.service import Collector
from collector.detect.backlog import judge_backlog
from collector.detect.engine import RunDetector
from collector.detect.incidents import RunSteps, incidents, run_steps
from collector.runs.incidents import stored_incidents
from collector.store import alerts as store_alerts
from collector.store.db import Store
from tests.collector.test_daemon_support import Told
from tests.conftest import SHARED

METRICS = ("train/loss", "train/grad_norm", "train/lr", "val/loss", "actor/kl_loss", "critic/score/mean")


def _run(seed: int, n: int) -> list[tuple[int, str, float]]:
    """A run's rows in file order (steps only go forward), with trouble planted: spikes, NaN, plateaus, rises."""
    rng = np.random.default_rng(seed)
    names = [m for m in METRICS if rng.random() < 0.6] or ["train/loss"]
    every = int(rng.choice([1, 1, 5, 10]))
    t = np.arange(n) / n
    data = {}
    for m in names:
        v = {"train/loss": 0.6 + 3 * np.exp(-4 * t), "train/lr": np.full(n, 1e-4),
             "val/loss": 1.0 + 0.3 * t * rng.random(), "actor/kl_loss": 0.001 + 0.05 * t,
             "critic/score/mean": 0.2 + 0.6 * (1 - np.exp(-5 * t))}.get(m, np.ones(n))  # fmt: skip
        v = v * (1 + 0.05 * rng.standard_normal(n))
        for _ in range(int(rng.integers(0, 8))):
            at, span = int(rng.integers(0, n)), int(rng.integers(1, max(2, n // 6)))
            kind = int(rng.integers(0, 5))
            if kind == 0:
                v[at] *= float(rng.choice([5.0, 30.0, 1e3]))
            elif kind == 1:
                v[at] = np.nan
            elif kind == 2:
                v[at : at + span] = v[at]
            elif kind == 3:
                v[at : at + span] += np.linspace(0, float(rng.uniform(0.5, 5)), len(v[at : at + span]))
            else:
                v[at : at + span : max(1, int(rng.integers(2, 15)))] *= 10
        data[m] = v
    rows = []
    for i in range(n):
        for m in sorted(names, key=step_order):  # a step's points as every path judges them (`step_order`)
            if m != "val/loss" or i % 10 == 9:
                rows.append(((i + 1) * every, m, float(data[m][i])))
    return rows


def _run_steps(rows) -> dict[str, RunSteps]:
    """The run's steps as the store gives them to grouping (`run_steps` over its metrics' statistics): the log
    interval is the densest metric's, which for a run of evaluations only is the evaluations' spacing."""
    stats: dict[str, dict] = {}
    for step, metric, _ in rows:
        s = stats.setdefault(metric, {"run": "run", "points": 0, "first_step": step, "last_step": step})
        s["points"] += 1
        s["last_step"] = step
    return run_steps([{"id": "run", "last_step": rows[-1][0], "status": None}], list(stats.values()))


def _shape(found) -> list[tuple]:
    return sorted((i.rule, i.metric, i.first_step, i.severity, i.alert_count, i.state) for i in found)


def _as_alerts(events) -> list[dict]:
    latest = {(e.rule, e.metric, e.first_step): e for e in events}
    ordered = sorted(latest.values(), key=lambda e: (e.first_step, e.rule, e.metric))
    return [e.to_dict() | {"id": n + 1, "state": "open" if e.active else "resolved", "run": "run"}
            for n, e in enumerate(ordered)]  # fmt: skip


def _write(path: Path, rows) -> None:
    with path.open("a") as f:
        for step, metric, value in rows:
            f.write(json.dumps({"step": step, "data": {metric: value}}).replace('"NaN"', "NaN") + "\n")


def _ingest(db: Path, root: Path, sinks: list | None = None) -> None:
    collector = Collector(Settings(db=db, roots=[root]), sinks=sinks if sinks is not None else [])
    try:
        collector.ingest_once()
    finally:
        collector.close()


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    seed=st.integers(0, 2**31), n=st.integers(60, 900), cut=st.floats(0.05, 0.95), chunk=st.integers(1, 200)
)
# a run of evaluations only: its log interval is theirs (an alert back after 100 steps is the same incident)
@example(seed=2138727811, n=462, cut=0.15454133335873582, chunk=123)
# a NaN gradient norm and a NaN lr at one step, read in two batches: the error heads on every path
@example(seed=5719, n=60, cut=0.5, chunk=1)
def test_live_backlog_and_a_restart_in_the_middle_give_the_same_incidents(tmp_path, seed, n, cut, chunk):
    rows = _run(seed, n)
    steps = _run_steps(rows)
    live = RunDetector("run")
    events = []
    for at in range(0, len(rows), chunk):  # as a live file is read: a batch per commit
        part = rows[at : at + chunk]
        events += live.update(Points([r[0] for r in part], [r[1] for r in part], [r[2] for r in part],
                                     [None] * len(part)))  # fmt: skip
    want = _shape(incidents(_as_alerts(events), steps))
    bulk = judge_backlog(RunDetector("run"), np.array([r[0] for r in rows]), np.array([r[1] for r in rows],
                         dtype=object), np.array([r[2] for r in rows]))  # fmt: skip
    assert _shape(incidents(_as_alerts(bulk), steps)) == want

    # on a DuckDB file: half the run ingested, the collector gone, then a new one on the rest of the run
    case = tmp_path / f"case-{seed}-{n}"
    shutil.rmtree(case, ignore_errors=True)
    (case / "root" / "run").mkdir(parents=True)
    db, log = case / "rw.duckdb", case / "root" / "run" / "metrics.jsonl"
    half = max(1, int(len(rows) * cut))
    while half < len(rows) and rows[half][0] == rows[half - 1][0]:
        half += 1  # whole steps in each part, as a trainer writes them
    _write(log, rows[:half])
    _ingest(db, case / "root")
    _write(log, rows[half:])
    _ingest(db, case / "root")
    store = Store(db)
    try:
        assert _shape(stored_incidents(store, "run")) == want
    finally:
        store.close()


def _real_logs() -> list[Path]:
    wild = SHARED / "real-runs-wild" / "files"
    return sorted(p for p in wild.iterdir() if p.is_file()) + sorted((SHARED / "real-runs").glob("*.json"))


def _originals() -> dict[str, str]:
    out = {}
    for line in (SHARED / "real-runs-wild" / "sources.jsonl").read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            out[Path(record["file"]).name] = Path(record["path"]).name
    return out


@pytest.mark.skipif(not (SHARED / "real-runs-wild").is_dir(), reason="../shared/real-runs-wild is not here")
def test_every_real_log_gives_the_same_incidents_after_ingest_and_after_a_restart(tmp_path):
    root, originals = tmp_path / "root", _originals()
    files = _real_logs()
    for f in files:  # one folder per file, under the name its tool gave it
        folder = root / f.name.replace(".", "_")
        folder.mkdir(parents=True)
        shutil.copyfile(f, folder / originals.get(f.name, f.name))
    db = tmp_path / "rw.duckdb"
    _ingest(db, root)
    store = Store(db)
    try:
        alerts_before = json.dumps(store_alerts.list_alerts(store))
        before = _shape(stored_incidents(store))
    finally:
        store.close()
    told = Told()
    _ingest(db, root, [told])  # a collector started again on the same database and files
    store = Store(db)
    try:  # ... and one that judges every stored run again from its first point (as when a run changes)
        detection = Detection(store, db, sinks=[told])
        detection.warm_up()
        detection.judge_again()
        while detection.catch_up():
            pass

        assert json.dumps(store_alerts.list_alerts(store)) == alerts_before  # not one alert new or rewritten
        assert _shape(stored_incidents(store)) == before
        runs = {i.run for i in stored_incidents(store)}
    finally:
        store.close()
    assert told == []  # nothing new to tell anyone
    assert len(before) >= 20 and len(runs) >= 15, (len(before), len(runs))  # the logs were judged at all
