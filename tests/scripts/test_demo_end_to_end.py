"""The headless demo end to end: a real verl CPU run per misbehaviour preset, watched by a real collector
daemon, must raise the alert the preset was built for; the advice is printed at the end."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow


def run_demo(tmp_path, preset: str, *extra: str) -> tuple[subprocess.CompletedProcess, list[dict], dict]:
    root, db = tmp_path / "runs", tmp_path / "state" / "runwatch.duckdb"
    proc = subprocess.run(
        [
            sys.executable,
            "scripts/demo.py",
            "--headless",
            "--preset",
            preset,
            "--root",
            str(root),
            "--db",
            str(db),
            *extra,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not (db.parent / "runwatch.duckdb.collector.json").exists(), "the demo left its collector running"

    def cli(*args: str):
        out = subprocess.run(
            [sys.executable, "-m", "collector", *args, "--db", str(db), "--json"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        )
        return json.loads(out.stdout)

    runs = cli("runs")
    assert len(runs) == 1 and runs[0]["id"].startswith(preset + "-"), runs
    run = runs[0]["id"]
    return proc, cli("alerts", "--run", run, "--state", "all"), cli("checkpoints", "--run", run)


@pytest.mark.parametrize(
    ("preset", "rule", "metric"),
    [
        ("nan", "nonfinite", "train/loss"),
        ("spike", "grad_spike", "train/grad_norm"),
        ("overfit", "val_loss_rise", "val/loss"),
        ("stall", "stalled", None),
    ],
)
def test_preset_raises_its_alert_through_the_daemon(tmp_path, preset, rule, metric):
    proc, alerts, advice = run_demo(tmp_path, preset)
    hits = [a for a in alerts if a["rule"] == rule and (metric is None or a["metric"] == metric)]
    assert hits, (
        f"{preset}: no {rule} alert; got {[(a['rule'], a['metric']) for a in alerts]}\n{proc.stdout[-2000:]}"
    )
    assert f"{rule}" in proc.stdout  # the headless summary names it
    assert "Checkpoint advice:" in proc.stdout
    assert advice["checkpoints"], "the run saved checkpoints and the index has none"
    if preset == "overfit":
        # The advice keeps the checkpoint with the best validation loss, saved before the loss turned up.
        valued = [c for c in advice["checkpoints"] if c["complete"] and c["value"] is not None]
        best = min(valued, key=lambda c: c["value"])
        assert advice["recommended"]["step"] == best["step"], advice
        # The last val_loss_rise episode (an earlier one may have cleared on a new best) began after it.
        assert best["step"] < max(h["first_step"] for h in hits), (best, hits)
