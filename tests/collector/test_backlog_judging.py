"""A bulk backlog stored by `collector ingest` and judged by detection (`Detection.catch_up`, in slices read from
a real DuckDB file through the backlog path) gives the alerts of feeding every stored point to the incremental
engine; a collector started again on the database judges it all again, in slices, and stores nothing new."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys

from collector.core.model import Points
from collector.daemon.detection import Detection
from collector.detect.engine import RunDetector
from collector.store import alerts as store_alerts
from collector.store import read as store_read
from collector.store.db import Store
from tests.collector.test_daemon_support import Told
from tests.conftest import REPO


def test_a_stored_backlog_judged_in_slices_gives_the_engines_alerts(tmp_path):
    run = tmp_path / "root" / "big"
    run.mkdir(parents=True)
    rng = random.Random(3)
    with (run / "metrics.jsonl").open("w") as f:  # ~3 MiB: stored in bulk, judged after in slices
        for s in range(1, 30_001):
            loss = 0.6 + 3.0 * math.exp(-s / 6000) + 0.02 * rng.gauss(0, 1)
            grad = 40.0 if s in (4_000, 17_000, 17_001) else abs(1.0 + 0.1 * rng.gauss(0, 1))
            data = {"train/loss": "NaN" if s == 21_000 else loss, "train/grad_norm": grad, "train/lr": 1e-4}
            f.write(json.dumps({"step": s, "data": data}).replace('"NaN"', "NaN") + "\n")
    db = tmp_path / "rw.duckdb"
    subprocess.run(
        [sys.executable, "-m", "collector", "ingest", "--db", str(db), str(tmp_path / "root")],
        cwd=REPO, capture_output=True, text=True, check=True,
    )  # fmt: skip
    store = Store(db)
    try:
        assert store.detection_backlogs() == {}  # `ingest` judged what it stored before it ended
        stored = store_alerts.list_alerts(store, run="big")
        told = Told()
        detection = Detection(store, db, sinks=[told])  # a collector started again on the database
        detection.warm_up()
        detection.judge_again()  # every stored run (else a run is judged again when it next changes)
        slices = 0
        while detection.catch_up(budget=7_000):
            slices += 1
        assert slices > 5  # judged again in slices, each resuming where the last stopped
        assert store.detection_backlogs() == {} and told == []  # nothing new to tell
        again = store_alerts.list_alerts(store, run="big")
        assert json.dumps(again) == json.dumps(stored)  # not one row rewritten (NaN values compared as text)
        got = {
            (a["rule"], a["metric"], a["first_step"]): (
                a["last_step"],
                a["severity"],
                a["state"],
                a["message"],
            )
            for a in store_alerts.list_alerts(store, run="big")
        }
        rows = store_read.points_from(store, "big", None, -(2**62), 10**9)
        engine = RunDetector("big")
        events = engine.update(
            Points([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [None] * len(rows))
        )
    finally:
        store.close()
    want = {
        (e.rule, e.metric, e.first_step): (
            e.last_step,
            str(e.severity),
            "open" if e.active else "resolved",
            e.message,
        )
        for e in events
    }
    assert {k[::2] for k in want} >= {("grad_spike", 4_000), ("grad_spike", 17_000), ("nonfinite", 21_000)}
    assert got == want
