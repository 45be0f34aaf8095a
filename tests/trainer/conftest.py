"""Fixtures for the trainer tests: launching real verl runs (torchrun subprocesses) and reading what they wrote.

Runs that several tests read are module- or session-scoped so each one trains once.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DATA_BUILD = REPO / "data" / "build"


@dataclass
class Launched:
    rc: int
    out: Path
    output: str


def launch(out: Path, preset: str, *args: str, timeout: float = 600) -> Launched:
    """Run `python -m trainer.launch --preset PRESET --out OUT ARGS...` to the end."""
    proc = subprocess.run(
        [sys.executable, "-m", "trainer.launch", "--preset", preset, "--out", str(out), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Launched(proc.returncode, out, proc.stdout + proc.stderr)


def read_metrics(run_dir: Path) -> list[dict]:
    """metrics.jsonl as a list of `{"step", "data"}` records (bare NaN allowed, as the file writes it)."""
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def train_records(run_dir: Path) -> dict[int, dict]:
    """The last training record per step."""
    return {r["step"]: r["data"] for r in read_metrics(run_dir) if "train/loss" in r["data"]}


def val_losses(run_dir: Path) -> dict[int, float]:
    return {r["step"]: r["data"]["val/loss"] for r in read_metrics(run_dir) if "val/loss" in r["data"]}


@pytest.fixture(scope="session")
def built_data() -> Path:
    if not (DATA_BUILD / ".done").is_file():
        pytest.fail(f"{DATA_BUILD} is not built: run `make data` (python -m data.build --out data/build)")
    return DATA_BUILD


@pytest.fixture(scope="session")
def smoke_run_1(built_data, tmp_path_factory) -> Launched:
    """The smoke preset on one process, with the W&B mirror (offline)."""
    result = launch(tmp_path_factory.mktemp("smoke1") / "run", "smoke", "--nproc", "1", "--wandb")
    assert result.rc == 0, result.output[-4000:]
    return result


@pytest.fixture(scope="session")
def smoke_run_2(built_data, tmp_path_factory) -> Launched:
    """The smoke preset on two gloo processes (FSDP2 across them)."""
    result = launch(tmp_path_factory.mktemp("smoke2") / "run", "smoke", "--nproc", "2")
    assert result.rc == 0, result.output[-4000:]
    return result
