"""Processes for the benchmarks: a measured subprocess, and a real collector daemon reached over HTTP."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import gen
from rusage import read_result, wrapped


@dataclass
class Measured:
    """A finished subprocess: exit code, wall seconds, the kernel's peak RSS for it, and its output."""

    rc: int
    wall_s: float
    peak_rss_mb: float
    output: str


def measured_run(cmd: list[str], env: dict[str, str] | None = None, cwd: Path = gen.REPO) -> Measured:
    """Run `cmd` to completion and measure it: wall time from fork to exit, and its peak RSS.

    Peak RSS comes from wait4() on this very child (ru_maxrss of it and the children it waited for), so
    several measurements in one benchmark never share a high-water mark.
    """
    full_env = dict(os.environ) | (env or {})
    with tempfile.NamedTemporaryFile(prefix="bench-rusage-") as res:
        proc = subprocess.run(
            wrapped(cmd, Path(res.name)),
            cwd=cwd,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        found = read_result(Path(res.name))
    out = proc.stdout.decode(errors="replace")
    if found is None:
        return Measured(proc.returncode or 1, float("nan"), float("nan"), out)
    return Measured(found[0], found[1], found[2], out)


def turn_arguments(ap: argparse.ArgumentParser, turns: int) -> None:
    """`--turns`, `--before PATH` (another checkout, measured in turns with this one) and the hidden `--child`
    (the measuring process `in_checkout` starts)."""
    ap.add_argument("--turns", type=int, default=turns, help=f"turns of each checkout (default {turns})")
    ap.add_argument("--before", type=Path, help="another checkout, measured in turns with this one")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)


def checkouts(before: Path | None) -> dict[str, Path]:
    """The checkouts to measure in turns: this one, and `before` when given."""
    return {"this": gen.REPO} | ({"before": before.resolve()} if before else {})


def in_checkout(tree: Path, script: str, args: list[str]) -> dict:
    """`script --child ARGS` in a fresh interpreter whose `collector` is `tree`'s (this checkout or another):
    its last line of output, read as JSON."""
    cmd = [sys.executable, str(Path(script).resolve()), "--child", *args]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def collector_cmd(*args: str) -> list[str]:
    """`python -m collector ARGS` with the interpreter running the benchmark."""
    return [sys.executable, "-m", "collector", *args]


def collector_json(*args: str) -> object:
    """Run a collector command with --json and parse its output; raise with the output when it fails."""
    res = subprocess.run(collector_cmd(*args, "--json"), cwd=gen.REPO, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(
            f"python -m collector {' '.join(args)} --json exited {res.returncode}: {res.stderr[-800:]}"
        )
    return json.loads(res.stdout)


class Daemon:
    """A real `python -m collector serve` over a root, found through DB.collector.json and DB.token.

    Use as a context manager; the daemon gets SIGTERM (then SIGKILL) on exit and its log is kept in
    `log_path` for the report when something goes wrong.
    """

    def __init__(self, db: Path, roots: list[Path], extra: tuple[str, ...] = ()):
        self.db, self.roots, self.extra = db, roots, extra
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.token = ""
        self.log_path = Path(tempfile.mkstemp(prefix="bench-daemon-", suffix=".log")[1])

    def __enter__(self) -> Daemon:
        cmd = collector_cmd("serve", "--db", str(self.db), *map(str, self.roots), "--port", "0", *self.extra)
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, cwd=gen.REPO, stdout=self._log, stderr=subprocess.STDOUT)
        info_path = Path(str(self.db) + ".collector.json")
        token_path = Path(str(self.db) + ".token")
        deadline = time.monotonic() + 120  # start-up on a loaded 2-core machine; not a measured figure
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"collector serve exited {self.proc.returncode}: {self.log_tail()}")
            try:
                info = json.loads(info_path.read_text())
                if info.get("pid") == self.proc.pid and info.get("port") and token_path.exists():
                    self.port, self.token = int(info["port"]), token_path.read_text().strip()
                    if self.get("/api/health").get("ok"):
                        return self
            except (OSError, ValueError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"collector serve did not come up in 120 s: {self.log_tail()}")
            time.sleep(0.1)

    def __exit__(self, *exc) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()

    def log_tail(self, n: int = 2000) -> str:
        return self.log_path.read_text(errors="replace")[-n:]

    def url(self, path: str, params: dict | list | None = None) -> str:
        query = ("?" + urllib.parse.urlencode(params, doseq=True)) if params else ""
        return f"http://127.0.0.1:{self.port}{path}{query}"

    def get(self, path: str, params: dict | list | None = None, timeout: float = 30) -> object:
        """GET an API path with the token and return the parsed JSON."""
        req = urllib.request.Request(
            self.url(path, params), headers={"Authorization": f"Bearer {self.token}"}
        )
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())

    def post(self, path: str, body: dict, timeout: float = 30) -> object:
        """POST a JSON body to an API path with the token and return the parsed JSON."""
        req = urllib.request.Request(
            self.url(path),
            data=json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_idle(pid: int, window_s: float = 3.0, below: float = 0.1, cap_s: float = 900.0) -> bool:
    """Block until process `pid` uses under `below` of a core over a `window_s` window (True), or `cap_s`
    passed (False). Used to wait out work the API does not report, such as judging a backlog."""
    deadline = time.monotonic() + cap_s
    while time.monotonic() < deadline:
        c0 = cpu_seconds(pid)
        time.sleep(window_s)
        if (cpu_seconds(pid) - c0) / window_s < below:
            return True
    return False
