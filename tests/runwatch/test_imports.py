"""The monitor never imports the training stack: `python -X importtime` of the `runwatch` command and of a
`check` over a real run (with torch, verl and transformers installed in this venv) lists none of them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REAL_RUNS, REPO

TRAINING_STACK = ("torch", "verl", "transformers", "ray")


def imported_modules(*args: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-X", "importtime", *args], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert out.returncode in (0, 2), out.stderr[-3000:]  # check exits 2 on an error alert
    lines = [
        line.split("|")[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")
    ]
    assert "collector.cli" in lines, "importtime's output was not read"
    return set(lines)


def training_modules(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in TRAINING_STACK)


def test_runwatch_help_imports_no_training_stack():
    assert training_modules(imported_modules("-m", "runwatch", "--help")) == []


@pytest.mark.parametrize("command", ["runwatch", "collector"])
def test_check_of_a_real_run_imports_no_training_stack(command: str):
    run = REAL_RUNS / "Miguel-Alessio__qwen-chess-lora__logs.json"
    modules = imported_modules("-m", command, "check", str(run), "--json")
    assert "collector.formats.discover" in modules  # it did read the run
    assert training_modules(modules) == []


def test_the_guard_sees_a_training_import():
    # the check above would pass on an empty list: make sure it names torch when torch is imported
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import collector.cli, torch"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    modules = {
        line.split("|")[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")
    }
    assert "torch" in training_modules(modules)
