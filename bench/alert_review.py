"""The alert review's answers: what the page asks the collector on every render (`GET /api/incidents` and
`GET /api/alerts`, all states, each alert needing one with its action), built in-process by one `RunService`
as the API's is, `--asks` times on a database; the first time and the median of the others, wall and CPU.
`--before PATH` times another checkout's collector on the same database, in turns (`--turns`), and checks the
two give the same answers.

    .venv/bin/python bench/alert_review.py --db DB [--asks 10] [--turns 2] [--before PATH]
    .venv/bin/python bench/alert_review.py --root ../shared/real-runs-wild    # ingested into a new database
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402


def ask(db: Path, asks: int) -> dict:
    """In this process (its `collector` is the checkout on sys.path): the two answers `asks` times."""
    from collector.api import alerts as api_alerts
    from collector.api import incidents as api_incidents
    from collector.runs.service import RunService
    from collector.store.db import Store

    store = Store(db)
    try:
        service = RunService(store)
        walls, cpus = [], []
        for _ in range(asks):
            wall, cpu = time.perf_counter(), time.process_time()
            incidents = api_incidents.incidents(service, state="all")
            alerts = api_alerts.alerts(service, state="all")
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
    finally:
        store.close()
    for a in alerts:  # when it was stored differs between databases, not between checkouts
        a.pop("created_at", None), a.pop("updated_at", None)
    answers = json.dumps([incidents, alerts], sort_keys=True, default=str).encode()
    return {
        "first_ms": walls[0] * 1000,
        "first_cpu_ms": cpus[0] * 1000,
        "median_ms": statistics.median(walls[1:] or walls) * 1000,
        "median_cpu_ms": statistics.median(cpus[1:] or cpus) * 1000,
        "incidents": len(incidents),
        "alerts": len(alerts),
        "actions": sum(a.get("action") is not None for a in alerts),
        "answers": hashlib.sha256(answers).hexdigest()[:12],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", type=Path, help="a database (else --root is ingested into a new one)")
    ap.add_argument("--root", type=Path, help="runs to ingest with this checkout's `collector ingest`")
    ap.add_argument("--asks", type=int, default=10, help="answers built per turn (default 10)")
    harness.turn_arguments(ap, turns=2)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(ask(args.db, args.asks)))
        return
    with tempfile.TemporaryDirectory(prefix="bench-alert-review-") as tmp:
        db = args.db
        if db is None:
            if args.root is None:
                ap.error("give --db or --root")
            db = Path(tmp) / "review.duckdb"
            ingest = [sys.executable, "-m", "collector", "ingest", "--db", str(db), str(args.root)]
            subprocess.run(ingest, cwd=harness.gen.REPO, check=True, capture_output=True)
        trees = harness.checkouts(args.before)
        rows = []
        for turn in range(args.turns):
            for name, tree in trees.items():
                got = harness.in_checkout(tree, __file__, ["--db", str(db), "--asks", str(args.asks)])
                rows.append((name, turn, got, os.getloadavg()[0]))
                print(
                    f"{name:6} turn {turn}: first {got['first_ms']:.0f} ms ({got['first_cpu_ms']:.0f} ms CPU), "
                    f"then median {got['median_ms']:.0f} ms ({got['median_cpu_ms']:.0f} ms CPU); "
                    f"{got['incidents']} incidents, {got['alerts']} alerts, {got['actions']} actions; "
                    f"answers {got['answers']}; load {rows[-1][3]:.1f}"
                )
        if len({row[2]["answers"] for row in rows}) > 1:
            raise SystemExit("the checkouts' answers differ")


if __name__ == "__main__":
    main()
