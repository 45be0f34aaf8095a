"""Shared test fixtures: paths to the repository, the built data and the real runs beside the checkout."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
REAL_RUNS = SHARED / "real-runs"
DATA_BUILD = REPO / "data" / "build"


@pytest.fixture(autouse=True)
def umask_restored():
    """Each test starts with the umask the session had: a collector built in-process (`Collector`) makes its
    process's umask 0o077 (`keep_private`), and a later test whose folders a collector running as another user
    must enter (test_problem_files) found them 0700 and waited in vain (only in a full run, after
    test_incident_sinks)."""
    before = os.umask(0o022)
    os.umask(before)
    yield
    os.umask(before)


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def real_runs() -> Path:
    if not REAL_RUNS.is_dir():
        pytest.fail(f"{REAL_RUNS} is missing: the tests read the real runs from ../shared/real-runs")
    return REAL_RUNS


@pytest.fixture(scope="session")
def python() -> str:
    """The interpreter running the tests (the project's venv), for subprocesses."""
    return sys.executable
