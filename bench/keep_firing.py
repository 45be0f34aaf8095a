"""The live path while an incident only keeps firing: after each commit of such a run the collector asks whether
the run went past the incident's window (`Detection._keep_firing`). A run whose gradient norm spikes every
`--every` steps (one recurring incident, its alerts growing with each spike) is fed `--per-commit` steps a
commit through a real collector in-process on a real DuckDB file; the checks made while an incident waited are
timed (median, mean, total; wall and this thread's CPU) and the events told counted. `--before PATH` times another checkout's collector
in turns (`--turns`) and checks the two told the same.

    .venv/bin/python bench/keep_firing.py [--steps 1200] [--every 50] [--per-commit 2] [--before PATH]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

WARM_UP = 40  # steps stored before the live commits


def lines(first: int, last: int, every: int) -> str:
    out = []
    for s in range(first, last + 1):
        rng = random.Random(s)
        grad = 60.0 if s % every == 0 else math.exp(rng.gauss(0, 0.2))
        loss = 0.6 + 2 * math.exp(-s / 800) + rng.gauss(0, 0.01)
        out.append(json.dumps({"step": s, "data": {"train/grad_norm": grad, "train/loss": loss}}) + "\n")
    return "".join(out)


def feed(steps: int, every: int, per_commit: int) -> dict:
    """In this process (its `collector` is the checkout on sys.path): the run fed live, its checks timed."""
    from collector.core.runtime import Settings
    from collector.daemon.service import Collector

    class Told(list):
        def send(self, alert: dict) -> None:
            self.append(
                (alert["event"], alert["rule"], alert["first_step"], (alert["incident"] or {}).get("state"))
            )

        def close(self) -> None:
            pass

    with tempfile.TemporaryDirectory(prefix="bench-keep-firing-") as tmp:
        run = Path(tmp) / "root" / "spiky"
        run.mkdir(parents=True)
        path = run / "metrics.jsonl"
        path.write_text(lines(1, WARM_UP, every))
        told = Told()
        collector = Collector(Settings(db=Path(tmp) / "rw.duckdb", roots=[run.parent]), sinks=[told])
        try:
            collector.ingest_once()
            detection = collector.detection
            checks: list[float] = []
            cpus: list[float] = []  # this thread's CPU: the figure a loaded machine disturbs least
            plain = detection._keep_firing

            def timed(name: str) -> None:
                waiting = detection._waiting.get(name)
                start, cpu_start = time.perf_counter(), time.thread_time()
                plain(name)
                if waiting:
                    checks.append(time.perf_counter() - start)
                    cpus.append(time.thread_time() - cpu_start)

            detection._keep_firing = timed
            cpu = time.process_time()
            for first in range(WARM_UP + 1, steps + 1, per_commit):
                with path.open("a") as f:
                    f.write(lines(first, min(steps, first + per_commit - 1), every))
                collector.ingestor.ingest([str(path)])
            cpu = time.process_time() - cpu
        finally:
            collector.close()
    return {
        "checks": len(checks),
        "median_ms": statistics.median(checks) * 1000 if checks else 0.0,
        "mean_ms": statistics.mean(checks) * 1000 if checks else 0.0,
        "total_s": sum(checks),
        "median_cpu_ms": statistics.median(cpus) * 1000 if cpus else 0.0,
        "total_cpu_s": sum(cpus),
        "cpu_s": cpu,
        "told": len(told),
        "events": hashlib.sha256(json.dumps(told).encode()).hexdigest()[:12],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=1200, help="steps the run logs (default 1200)")
    ap.add_argument(
        "--every", type=int, default=50, help="a gradient spike every this many steps (default 50)"
    )
    ap.add_argument("--per-commit", type=int, default=2, help="steps a commit (default 2)")
    harness.turn_arguments(ap, turns=1)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(feed(args.steps, args.every, args.per_commit)))
        return
    trees = harness.checkouts(args.before)
    child = ["--steps", str(args.steps), "--every", str(args.every), "--per-commit", str(args.per_commit)]
    events = set()
    for turn in range(args.turns):
        for name, tree in trees.items():
            got = harness.in_checkout(tree, __file__, child)
            events.add(got["events"])
            print(
                f"{name:6} turn {turn}: {got['checks']} keep-firing checks, median {got['median_ms']:.2f} ms "
                f"({got['median_cpu_ms']:.2f} ms CPU), mean {got['mean_ms']:.2f} ms, total {got['total_s']:.2f} s "
                f"({got['total_cpu_s']:.2f} s CPU); all commits {got['cpu_s']:.1f} s CPU; {got['told']} events told "
                f"({got['events']}); load {os.getloadavg()[0]:.1f}"
            )
    if len(events) > 1:
        raise SystemExit("the checkouts told different events")


if __name__ == "__main__":
    main()
