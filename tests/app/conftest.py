"""Fixtures for the dashboard tests: a root of real runs, a real collector over it, and helpers to wait on it.

The root holds copies, made at test time, of the real `trainer_state.json` histories in ../shared/real-runs
plus a real CPU verl run written by `python -m trainer.launch --preset smoke` (or a copy of one such run
directory named by RUNWATCH_TEST_SMOKE_RUN, to save its ~40 s). The collector is a real
subprocess `python -m collector serve --db DB ROOT --port 0`; tests reach it over HTTP as the app does.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
REAL_RUNS = REPO.parent / "shared" / "real-runs"
SMOKE_RUN = "smoke"
# Waiting is on conditions, never on timing; these limits only stop a broken setup from hanging the suite.
START_LIMIT_S = 120
INGEST_LIMIT_S = 300


def real_run_ids() -> list[str]:
    """Run ids the collector gives the real-run copies (a lone trainer_state copy: its path without `.json`)."""
    return sorted(f"real/{p.stem}" for p in REAL_RUNS.glob("*.json"))


def stop_process(proc: subprocess.Popen) -> None:
    """Stop a process started in its own session, and everything it started."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@dataclass
class Collector:
    db: Path
    root: Path
    proc: subprocess.Popen
    info: dict

    def client(self):
        from collector.api.client import Client

        client = Client.for_db(self.db)
        assert client is not None, f"no live collector for {self.db}"
        return client


def start_collector(db: Path, roots: list[Path], log: Path) -> Collector:
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "collector", "serve", "--db", str(db), *map(str, roots), "--port", "0"],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    marker = Path(f"{db}.collector.json")

    def ready() -> dict | None:
        info = json.loads(marker.read_text()) if marker.exists() else None
        return info if info and info.get("pid") == proc.pid else None

    try:
        info = wait_for(ready, f"collector for {db} writes {marker.name}", START_LIMIT_S, proc=proc)
    except BaseException:
        stop_process(proc)  # a collector that never got ready must not outlive the test
        raise
    return Collector(db=db, root=roots[0], proc=proc, info=info)


def copy_real_runs(root: Path) -> None:
    if not REAL_RUNS.is_dir():
        pytest.fail(f"{REAL_RUNS} is missing: the app tests read the real runs from ../shared/real-runs")
    (root / "real").mkdir(parents=True)
    for path in REAL_RUNS.glob("*.json"):
        shutil.copyfile(path, root / "real" / path.name)


def write_rl_and_sft_runs(root: Path) -> None:
    """Two runs of 20 steps in verl's file-logger JSONL under `root`: `grpo`, an RL run that logs a reward
    (`critic/score/mean`, 0.1 + step/97) and a validation score every 10 steps (`val-core/...`, 0.3 +
    step/331) and no loss, and `sft`, which logs `train/loss` (2/step) and `val/loss` every 10 (2.5/step)."""
    rl, sft = [], []
    for s in range(1, 21):
        data = {"critic/score/mean": 0.1 + s / 97, "actor/entropy": 1.0 - s / 50}
        if s % 10 == 0:
            data["val-core/sums/reward/mean@1"] = 0.3 + s / 331
        rl.append(json.dumps({"step": s, "data": data}) + "\n")
        loss = {"train/loss": 2.0 / s} | ({"val/loss": 2.5 / s} if s % 10 == 0 else {})
        sft.append(json.dumps({"step": s, "data": loss}) + "\n")
    for name, lines in (("grpo", rl), ("sft", sft)):
        (root / name).mkdir(parents=True)
        (root / name / "metrics.jsonl").write_text("".join(lines))


def serve_when_ingested(root: Path, state: Path, expected: set[str]) -> Iterator[Collector]:
    """A real collector over `root`, yielded once it lists every `expected` run with points; stopped after."""
    running = start_collector(state / "runwatch.duckdb", [root], state / "collector.log")

    def all_ingested() -> bool:
        runs = {r["id"]: r for r in client.get("/api/runs")}
        return expected <= set(runs) and all(runs[r].get("last_step") for r in expected)

    try:
        client = running.client()
        wait_for(
            all_ingested, "the collector lists every run with its points", INGEST_LIMIT_S, proc=running.proc
        )
        yield running
    finally:
        stop_process(running.proc)


def env_for(collector: Collector, monkeypatch: pytest.MonkeyPatch) -> Collector:
    """Point the dashboard's settings at `collector` (AppTest runs the script in this process)."""
    monkeypatch.setenv("RUNWATCH_DB", str(collector.db))
    monkeypatch.setenv("RUNWATCH_ROOTS", str(collector.root))
    monkeypatch.setenv("RUNWATCH_REFRESH", "2")
    return collector


@pytest.fixture(scope="session")
def real_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A watched root holding copies of the real runs under `real/`."""
    root = tmp_path_factory.mktemp("real-root")
    copy_real_runs(root)
    return root


@pytest.fixture(scope="session")
def app_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A watched root: copies of the real runs under `real/`, and a real CPU verl smoke run under `smoke/`."""
    root = tmp_path_factory.mktemp("app-root")
    copy_real_runs(root)
    prebuilt = os.environ.get("RUNWATCH_TEST_SMOKE_RUN")
    if prebuilt:
        # A finished smoke run directory from an earlier `trainer.launch --preset smoke` (saves ~40 s per session).
        shutil.copytree(prebuilt, root / SMOKE_RUN)
        return root
    if not (REPO / "data" / "build" / ".done").exists():
        pytest.fail("data/build is missing: run `make data` (python -m data.build --out data/build) first")
    out = subprocess.run(
        [sys.executable, "-m", "trainer.launch", "--preset", "smoke", "--out", str(root / SMOKE_RUN)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "WANDB_MODE": "offline"},
    )
    if out.returncode != 0:
        pytest.fail(
            f"the smoke training run failed (exit {out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
        )
    return root


@pytest.fixture(scope="session")
def real_collector(real_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Collector]:
    """A real collector over the real runs only (no training needed)."""
    yield from serve_when_ingested(real_root, tmp_path_factory.mktemp("real-db"), set(real_run_ids()))


@pytest.fixture(scope="session")
def collector(app_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Collector]:
    """A real collector over the real runs and the verl smoke run (tests using it are `slow`)."""
    yield from serve_when_ingested(
        app_root, tmp_path_factory.mktemp("app-db"), set(real_run_ids()) | {SMOKE_RUN}
    )


@pytest.fixture
def app_env(real_collector: Collector, monkeypatch: pytest.MonkeyPatch) -> Collector:
    """The dashboard pointed at the collector of the real runs."""
    return env_for(real_collector, monkeypatch)


@pytest.fixture
def smoke_env(collector: Collector, monkeypatch: pytest.MonkeyPatch) -> Collector:
    """The dashboard pointed at the collector that also holds the verl smoke run."""
    return env_for(collector, monkeypatch)


@contextlib.contextmanager
def remote_beside_local(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    write: Callable[[Path, int, int], None],
    steps: tuple[int, int],
    db: Path,
    remote_status: dict | None = None,
) -> Iterator[tuple[object, str, Path, Collector]]:
    """A real sshd on 127.0.0.1 serving `gpu-box/gpu-run` (steps[0] steps) and a local `laptop/laptop-run`
    (steps[1]), written by `write(path, first, last)`, and a collector on both roots once it lists both:
    yields (server, the remote root's URL, the remote folder, collector); stops both after."""
    from tests.sshd_support import SshServer, sshd_missing

    missing = sshd_missing()
    if missing:
        pytest.fail(missing)
    server = SshServer(tmp_path / "ssh").start()
    monkeypatch.setenv("HOME", str(server.home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    remote, local = tmp_path / "gpu-box", tmp_path / "laptop"
    for folder, last in ((remote / "gpu-run", steps[0]), (local / "laptop-run", steps[1])):
        folder.mkdir(parents=True)
        write(folder / "metrics.jsonl", 1, last)
    if remote_status is not None:
        (remote / "gpu-run" / "status.json").write_text(json.dumps(remote_status))
    url = server.url(remote)
    db.parent.mkdir(parents=True, exist_ok=True)
    collector = start_collector(db, [url, local], tmp_path / "collector.log")
    try:
        client = collector.client()
        wait_for(
            lambda: (
                {(r["id"], r["last_step"]) for r in client.get("/api/runs")}
                == {("gpu-run", steps[0]), ("laptop-run", steps[1])}
            ),
            "both runs listed",
            START_LIMIT_S,
            proc=collector.proc,
        )
        yield server, url, remote, collector
    finally:
        stop_process(collector.proc)
        server.stop()
