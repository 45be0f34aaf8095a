"""A collector that starts again continues the alerts it had open (same alert, same peak) instead of opening
second ones, and knows the run's config from the store, not only from files that change."""

from __future__ import annotations

import json
import random
import subprocess
import sys

from tests.conftest import REPO


def cli(db, *args: str):
    out = subprocess.run(
        [sys.executable, "-m", "collector", *args, "--db", str(db), "--json"],
        cwd=REPO, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(out.stdout) if args[0] != "ingest" else out.stdout


def write(path, steps_values) -> None:
    with path.open("a") as f:
        for step, value in steps_values:
            f.write(json.dumps({"step": step, "data": {"train/grad_norm": value}}) + "\n")


def test_an_open_spike_continues_across_a_restart(tmp_path):
    run = tmp_path / "runs" / "exp"
    run.mkdir(parents=True)
    db = tmp_path / "state" / "db.duckdb"
    rng = random.Random(7)
    metrics = run / "metrics.jsonl"
    write(
        metrics,
        [(s, 1.0 + rng.uniform(-0.05, 0.05)) for s in range(1, 61)] + [(61, 50.0), (62, 48.0), (63, 45.0)],
    )
    cli(db, "ingest", str(tmp_path / "runs"))
    first = [a for a in cli(db, "alerts", "--state", "all") if a["rule"] == "grad_spike"]
    assert len(first) == 1 and first[0]["state"] == "open", first
    assert first[0]["first_step"] == 61 and first[0]["value"] == 50.0

    # A new collector process: the spike goes on at lower values; it is the same episode with the same peak.
    write(metrics, [(64, 40.0), (65, 42.0)])
    cli(db, "ingest", str(tmp_path / "runs"))
    after = [a for a in cli(db, "alerts", "--state", "all") if a["rule"] == "grad_spike"]
    assert len(after) == 1, after
    assert after[0]["id"] == first[0]["id"] and after[0]["first_step"] == 61
    assert after[0]["last_step"] == 65 and after[0]["value"] == 50.0, after[0]
