"""Finding the collector for the configured database, and starting one when none is running.

The collector is the only process that may open the DuckDB file, so the dashboard never opens it: it reads
`DB.collector.json` (pid, port, roots) to find the daemon's API, and when that file is missing or names a
dead process it starts `python -m collector serve --db DB ROOT... --port 0` as a detached process (it
outlives the dashboard) and waits for the file to name the new, live daemon; only for a database clearly a
local collector's (`may_start`), else it says none is running and how to start one.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from collector.core.runtime import marker_path, read_marker

REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 90.0


class CollectorUnavailable(RuntimeError):
    """No collector could be found or started; the message says why and where to look."""


@dataclass(frozen=True)
class Connection:
    """A live collector: its marker file's contents, and whether this dashboard started it."""

    info: dict
    started_here: bool
    log: Path | None = None


def log_path(db: Path) -> Path:
    return Path(f"{db}.collector.log")


def start_collector(db: Path, roots: tuple[Path, ...]) -> subprocess.Popen:
    """Start a detached collector for `db` watching `roots`; its output goes to `DB.collector.log`."""
    db.parent.mkdir(parents=True, exist_ok=True)
    for root in roots:
        if isinstance(root, Path):  # (a remote root is on another machine: the collector checks it)
            root.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "collector", "serve", "--db", str(db), *map(str, roots), "--port", "0"]
    with open(log_path(db), "ab") as log:
        # Its own session: the collector keeps running when the dashboard stops (it serves the CLI too).
        return subprocess.Popen(
            cmd,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_for_marker(db: Path, proc: subprocess.Popen, timeout_s: float = START_TIMEOUT_S) -> dict:
    """Wait until `DB.collector.json` names a live collector; raise if `proc` exits first or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        info = read_marker(db)
        if info is not None and (info.get("pid") == proc.pid or proc.poll() is not None):
            return info  # ours, or another dashboard's that won the race for the database
        if proc.poll() is not None and info is None:
            tail = _log_tail(db)
            raise CollectorUnavailable(
                f"the collector for {db} exited with code {proc.returncode} before it was ready; "
                f"its log {log_path(db)} ends with:\n{tail}"
            )
        time.sleep(0.2)
    raise CollectorUnavailable(
        f"the collector for {db} (pid {proc.pid}) did not write {marker_path(db)} within {timeout_s:.0f} s; "
        f"see {log_path(db)}"
    )


def _log_tail(db: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log_path(db).read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def connect(db: Path, roots: tuple[Path, ...], may_start: bool = True) -> Connection:
    """The running collector for `db`, started (detached) when none is running and `may_start` (the
    settings' `may_start`) or `db` exists (a local collector's file: a team API keeps none); else
    CollectorUnavailable saying none runs and how to start one."""
    info = read_marker(db)
    if info is not None:
        return Connection(info=info, started_here=False)
    if not (may_start or db.exists()):
        raise CollectorUnavailable(none_running(db))
    proc = start_collector(db, roots)
    info = wait_for_marker(db, proc)
    return Connection(info=info, started_here=info.get("pid") == proc.pid, log=log_path(db))


def none_running(db: Path) -> str:
    """No collector or team API answers for `db`, and the dashboard was given no roots to start one for."""
    try:  # the marker a team API left when it was killed names its lake
        lake = json.loads(marker_path(db).read_text()).get("lake")
    except (OSError, ValueError, AttributeError):
        lake = None
    was = f" (the team API of the lake {lake} served it last)" if lake else ""
    return (
        f"nothing is running for {db}{was}, and the dashboard starts a collector only for roots it is given. "
        f"Start the team API (`python -m collector serve --db {db} --store ducklake:postgres:... --data-path "
        f"DIR`, README 'Team mode') or a collector (`python -m collector serve --db {db} ROOT...`), or give "
        f"the dashboard its roots (`python -m app -- --db {db} --root ROOT`)"
    )


def roots_differ(info: dict, roots: tuple[Path, ...]) -> list[str]:
    """The configured roots the running collector does not watch (it was started with other roots)."""
    watched = {r if r.startswith("ssh://") else str(Path(r).resolve()) for r in info.get("roots") or []}
    return [str(r) for r in roots if str(r) not in watched]
