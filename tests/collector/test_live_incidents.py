"""The live path keeps each run's alerts and incidents between commits (`collector.runs.incidents.RunIncidents`)
and reads or groups them again only when the run's alerts or steps changed: after every commit, and after a
person resolves an alert, it answers what the store holds (`stored_incidents`), and the sinks are told an
incident's end at the commit that takes the run past its keep-firing window. A real collector in-process over a
real run folder, its real DuckDB file, fed a few steps a commit."""

from __future__ import annotations

import json
import math
import random

from collector.core.runtime import Settings
from collector.daemon.service import Collector
from collector.runs.incidents import stored_incidents
from collector.store import alerts as store_alerts
from tests.collector.test_daemon_support import Told

RUN = "spiky"


def lines(first: int, last: int) -> str:
    """verl file-logger lines whose gradient norm spikes every 250 steps (one recurring incident)."""
    rng = random.Random(first)
    out = []
    for s in range(first, last + 1):
        grad = 60.0 if s % 250 == 0 else math.exp(rng.gauss(0, 0.2))
        loss = 0.6 + 2 * math.exp(-s / 800) + rng.gauss(0, 0.01)
        out.append(json.dumps({"step": s, "data": {"train/grad_norm": grad, "train/loss": loss}}) + "\n")
    return "".join(out)


def test_live_incidents_follow_every_commit_and_a_persons_resolve(tmp_path):
    root = tmp_path / "root"
    (root / RUN).mkdir(parents=True)
    path = root / RUN / "metrics.jsonl"
    path.write_text(lines(1, 505))  # spikes at 250 and 500: the incident is open at 505
    told = Told()
    collector = Collector(Settings(db=tmp_path / "rw.duckdb", roots=[root]), sinks=[told])
    live = collector.detection.incidents
    store = collector.store

    def same_as_stored() -> dict[int, str]:
        alerts, found = live.of_run(RUN)
        assert found == stored_incidents(store, RUN)
        assert alerts == store_alerts.list_alerts(store, run=RUN)
        return {i.id: i.state for i in found}

    def last_told() -> dict[int, str]:
        return {e["incident"]["id"]: e["incident"]["state"] for e in told}

    try:
        collector.ingest_once()
        assert set(same_as_stored().values()) == {"open"}
        ended_at = None
        for first in range(506, 606, 4):  # a commit of four steps at a time
            with path.open("a") as f:
                f.write(lines(first, first + 3))
            collector.ingestor.ingest([str(path)])
            states = same_as_stored()
            assert last_told() == states  # told at the commit it changed, not one later
            if ended_at is None and set(states.values()) == {"resolved"}:
                ended_at = first
        assert ended_at is not None and ended_at > 506  # it waited out its window, then ended live
        assert [e["event"] for e in told].count("auto_resolved") == 1

        # the next spike reopens it; a person resolves its alert: the live path reads that change
        with path.open("a") as f:
            f.write(lines(606, 752))
        collector.ingestor.ingest([str(path)])
        assert set(same_as_stored().values()) == {"open"}
        spike = next(a for a in store_alerts.list_alerts(store, run=RUN) if a["first_step"] == 750)
        store_alerts.set_state(store, spike["id"], "resolved", "known: a bad batch")
        assert set(same_as_stored().values()) == {"open"}  # all resolved: it keeps firing for its window
        assert all(a["state"] == "resolved" for a in live.of_run(RUN)[0])
    finally:
        collector.close()
