"""`pip install` of the repository gives a `runwatch` command with the monitor's dependencies only: the wheel
is built, installed into a fresh venv (no torch, verl, Ray or transformers), and that venv's `runwatch`
judges a real run and serves the dashboard with its collector, run from a folder outside the repository.

The install resolves the dependencies from the package index pip is configured with (on the development
machine a local mirror: 26 s on a quiet machine, 150 s at load 10), so the module is `slow`. Nothing of the
project's own venv is used.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from collector.api.client import Client
from collector.core.runtime import read_marker
from tests.collector.test_daemon_support import wait_for
from tests.conftest import REAL_RUNS, REPO

INSTALL_LIMIT_S = 900
pytestmark = pytest.mark.slow

RUN = "yongshuaiy__LLMs-final__output-checkpoint-669"


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel built from the repository installed (and its dependencies, nothing more)."""
    base = tmp_path_factory.mktemp("install")
    wheels = base / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "-q", "-w", str(wheels)],
        cwd=base,
        check=True,
        timeout=INSTALL_LIMIT_S,
    )
    # the build's scratch folders stay out of the checkout (setuptools writes build/ and *.egg-info there)
    shutil.rmtree(REPO / "build", ignore_errors=True)
    for info in REPO.glob("*.egg-info"):
        shutil.rmtree(info, ignore_errors=True)
    (wheel,) = wheels.glob("runwatch-*.whl")
    env = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True, timeout=300)
    subprocess.run(
        [str(env / "bin" / "pip"), "install", "-q", str(wheel)], cwd=base, check=True, timeout=INSTALL_LIMIT_S
    )
    return env


def run_in(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(venv / "bin" / "runwatch"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env=clean_env(cwd),
    )


def clean_env(home: Path) -> dict[str, str]:
    """No PYTHONPATH pointing at the checkout, and a fresh HOME (Streamlit asks for an e-mail on a first run)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "RUNWATCH_", "VIRTUAL_ENV"))}
    return env | {"HOME": str(home)}


def test_the_wheel_holds_the_monitor_without_the_training_stack(venv: Path, tmp_path: Path):
    probe = "import importlib.util as u; print([m for m in ('torch', 'verl', 'ray', 'transformers') if u.find_spec(m)])"
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=clean_env(tmp_path),
    )
    assert out.stdout.strip() == "[]", out.stderr
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import collector, app, runwatch; print(collector.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=clean_env(tmp_path),
    )
    assert str(venv) in where.stdout, "the installed package was not the one imported"
    mcp = subprocess.run(
        [str(venv / "bin" / "runwatch"), "mcp", "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=clean_env(tmp_path),
    )
    assert mcp.returncode == 0 and "--db" in mcp.stdout, mcp.stderr  # the MCP SDK came with the monitor
    config = venv.glob("lib/python*/site-packages/app/.streamlit/config.toml")
    assert next(config).read_text().count('address = "127.0.0.1"') == 1


def test_installed_runwatch_judges_a_real_run(venv: Path, tmp_path: Path):
    out = run_in(venv, "check", str(REAL_RUNS / f"{RUN}.json"), "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr  # warnings only: exit 0 under --fail-on error
    (verdict,) = json.loads(out.stdout)["runs"]
    assert verdict["run"] == RUN
    # the run overfits after step 200 (eval_loss rises from 1.052): that checkpoint is kept, the rise is told
    assert verdict["recommended_step"] == 200
    assert "val_loss_rise" in out.stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_installed_runwatch_ui_serves_the_dashboard_and_its_collector(venv: Path, tmp_path: Path):
    root = tmp_path / "runs"
    root.mkdir()
    shutil.copy(REAL_RUNS / f"{RUN}.json", root / f"{RUN}.json")
    db = tmp_path / "state" / "runwatch.duckdb"
    port = free_port()
    ui = subprocess.Popen(
        [str(venv / "bin" / "runwatch"), "ui", str(root), "--db", str(db), "--port", str(port)],
        cwd=tmp_path,
        env=clean_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        info = wait_for(lambda: read_marker(db), "the collector `runwatch ui` starts", timeout=120)
        client = Client.for_db(db)
        assert "problem_files" in client.get("/api/health")  # the collector's API answers with its token
        assert wait_for(
            lambda: any(r["id"] == RUN for r in client.get("/api/runs")), "the run ingested by that collector"
        )
        client.close()

        def dashboard_health() -> bool:
            if ui.poll() is not None:
                raise AssertionError(f"runwatch ui exited {ui.returncode}: {ui.stdout.read().decode()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=5) as r:
                    return r.read() == b"ok"
            except OSError:
                return False

        wait_for(dashboard_health, "the dashboard's health answer", timeout=120)
    finally:
        if ui.poll() is None:
            os.killpg(ui.pid, signal.SIGTERM)
            ui.wait(timeout=60)
        marker = read_marker(db)
        if marker is not None:  # the collector outlives the dashboard on purpose: stop it here
            os.kill(marker["pid"], signal.SIGTERM)
            wait_for(lambda: read_marker(db) is None, "the collector to stop")
    assert info["pid"] != ui.pid
