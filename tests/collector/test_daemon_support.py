"""Helpers for the tests that run the real collector as a subprocess, or its detection with `Told`, a sink
that keeps what it is told (no tests here).

Waiting uses generous deadlines as failure guards only: nothing asserts how fast something happened.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from collector.api.client import Client
from collector.core.runtime import marker_path
from tests.waiting import DEADLINE_S, wait_for

REPO = Path(__file__).resolve().parents[2]


def cli(db: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`python -m collector ARGS --db DB` as a real subprocess."""
    out = subprocess.run(
        [sys.executable, "-m", "collector", *args, "--db", str(db)], cwd=REPO, capture_output=True, text=True
    )
    if check and out.returncode != 0:
        raise AssertionError(f"collector {' '.join(args)} exited {out.returncode}: {out.stderr}")
    return out


def cli_json(db: Path, *args: str) -> object:
    return json.loads(cli(db, *args, "--json").stdout)


class Daemon:
    """`python -m collector serve` in its own process group, its output in a log file."""

    def __init__(self, db: Path, roots: list[Path], *extra: str, prefix: tuple[str, ...] = ()) -> None:
        self.db = db
        self.roots = roots
        self.extra = extra
        self.prefix = prefix  # a command the daemon runs under (e.g. setpriv, to run as another user)
        self.proc: subprocess.Popen | None = None
        self.log = Path(f"{db}.test.log")

    def start(self, wait: bool = True) -> Daemon:
        cmd = [
            sys.executable,
            "-m",
            "collector",
            "serve",
            "--db",
            str(self.db),
            *map(str, self.roots),
            "--port",
            "0",
        ]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [*self.prefix, *cmd, *self.extra],
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        if wait:
            wait_for(self._ready, f"the collector to write {marker_path(self.db)}")
        return self

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(
                f"the collector exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}"
            )
        try:
            return json.loads(marker_path(self.db).read_text()).get("pid") == self.proc.pid
        except (OSError, ValueError):
            return False

    def client(self) -> Client:
        client = Client.for_db(self.db)
        assert client is not None, "no live collector found for the database"
        return client

    def stop(self) -> int:
        """SIGTERM and wait: the exit code."""
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=DEADLINE_S)
        if code != 0:  # what the collector said, shown with the failing assertion
            print(f"collector exited {code}; the end of its log:\n{self.log.read_text()[-4000:]}")
        return code

    def kill9(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=DEADLINE_S)

    def ensure_stopped(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.kill9()


class Told(list):
    """A sink that keeps what it is told."""

    def send(self, alert: dict) -> None:
        self.append(alert)

    def close(self) -> None:
        pass
