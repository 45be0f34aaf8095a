"""The trainer's misbehaviour scenarios, trained for real with verl on CPU, caught by the detectors.

Each test launches `python -m trainer.launch --preset P` (a real torchrun subprocess), then feeds the run
directory's metrics.jsonl, run.json and checkpoint folders to a `RunDetector`, as the collector would.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from collector.core.model import Points
from collector.detect.engine import AlertEvent, RunDetector

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]


def train(out: Path, preset: str, *args: str) -> Path:
    if not (REPO / "data" / "build" / ".done").is_file():
        pytest.fail("data/build is not built: run `make data` (python -m data.build --out data/build)")
    cmd = [sys.executable, "-m", "trainer.launch", "--preset", preset, "--out", str(out), *args]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return out


def detect(run_dir: Path) -> list[AlertEvent]:
    points = Points()
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)  # the file writes bare NaN, which json reads
        for name, value in record["data"].items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                points.add(record["step"], name, float(value))
    detector = RunDetector(run_dir.name, run_info=json.loads((run_dir / "run.json").read_text()))
    detector.note_checkpoints([int(p.name.split("_")[-1]) for p in run_dir.glob("global_step_*")])
    latest = {}
    for event in detector.update(points):
        latest[(event.rule, event.metric, event.first_step)] = event
    return list(latest.values())


def test_nan_scenario_raises_nonfinite_at_step_12(tmp_path):
    events = detect(
        train(tmp_path / "nan", "nan", "--steps", "14", "trainer.test_freq=7", "trainer.save_freq=7")
    )
    found = {(e.rule, e.metric, e.first_step, e.severity) for e in events if e.rule == "nonfinite"}
    assert ("nonfinite", "train/loss", 12, "error") in found
    assert not [e for e in events if e.rule in ("no_learning", "lr_anomaly", "val_loss_rise")]


def test_spike_scenario_raises_grad_spike_where_the_lr_was_boosted(tmp_path):
    run = train(tmp_path / "spike", "spike", "--steps", "46", "trainer.test_freq=23", "trainer.save_freq=23")
    injected = json.loads((run / "run.json").read_text())["injected"][0]  # lr x30 from step 40 for 3 steps
    spikes = [e for e in detect(run) if e.rule == "grad_spike" and e.first_step > injected["step"]]
    assert spikes and spikes[0].first_step <= injected["step"] + injected["steps"] + 1
    assert spikes[0].metric == "train/grad_norm" and spikes[0].severity in ("warn", "error")


def test_stall_scenario_raises_a_step_time_warning_at_the_stalled_step(tmp_path):
    from trainer.presets import PRESETS

    # the preset says where it sleeps (the trainer's choice): train one step past it, saving only at the end
    stall = next(f for f in PRESETS["stall"].faults if f["kind"] == "stall")
    steps = str(stall["step"] + 1)
    events = detect(
        train(
            tmp_path / "stall",
            "stall",
            "--steps",
            steps,
            f"trainer.test_freq={steps}",
            f"trainer.save_freq={steps}",
        )
    )
    slow = [e for e in events if e.rule == "step_time_spike"]
    assert [(e.first_step, e.severity) for e in slow if e.severity != "info"] == [(stall["step"], "warn")]
