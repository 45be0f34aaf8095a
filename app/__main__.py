"""`python -m app [--host H] [--port P] [-- --db DB --root ROOT ...]`: the dashboard with its server options set.

Streamlit reads `app/.streamlit/config.toml` wherever it is started (127.0.0.1, no usage statistics), and
this launcher passes the same options as flags, so no other config file can open the dashboard to the
network by accident. Binding another address is an explicit choice: the dashboard then asks for a password
(`RUNWATCH_DASHBOARD_PASSWORD`, else the API token in `DB.token`).

Stopping (Ctrl-C, or SIGTERM): the dashboard stops, then the collector it started for the database, if it
started one (`--keep-collector` leaves it serving the CLI, and says how to stop it); a collector that was
running before is left running, and it says so. Signals that come while it stops are ignored.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from app.door import PASSWORD_ENV, is_loopback
from app.settings import SettingsError, read_settings
from collector.core.runtime import DASHBOARD_ENV, pid_alive, read_marker

SCRIPT = Path(__file__).resolve().parent / "streamlit_app.py"


def command(argv: list[str]) -> list[str]:
    """The `streamlit run` command line for these launcher arguments (the rest goes to the app)."""
    ap = argparse.ArgumentParser(prog="python -m app", description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on (default: this machine only)")
    ap.add_argument("--port", type=int, default=8501)
    ap.add_argument(
        "--keep-collector",
        action="store_true",
        help="leave the collector this dashboard starts running when it stops (it serves the CLI too)",
    )
    own, rest = ap.parse_known_args(argv)
    if rest[:1] == ["--"]:
        rest = rest[1:]
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(SCRIPT),
        "--server.address",
        own.host,
        "--server.port",
        str(own.port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--",
        *rest,
    ]


def main(argv: list[str] | None = None, started_collector: int | None = None) -> int:
    """Serve the dashboard until it stops, then stop what it started; `started_collector`: the pid of a
    collector the caller started for this dashboard (`runwatch ui`), stopped the same way."""
    argv = sys.argv[1:] if argv is None else argv
    cmd = command(argv)
    host = cmd[cmd.index("--server.address") + 1]
    if not is_loopback(host):
        print(
            f"runwatch: listening on {host}: the dashboard will ask for a password "
            f"({PASSWORD_ENV} if set, else the token in DB.token).",
            file=sys.stderr,
        )
    try:
        db = read_settings(cmd[cmd.index("--") + 1 :], os.environ, Path.cwd()).db
    except SettingsError:
        db = None  # the dashboard says what is wrong with the setting
    before = read_marker(db) if db else None
    # A collector the dashboard starts records this pid in its marker (`dashboard_pid`): only that one, or
    # `started_collector`, is stopped at the end, never one started or restarted meanwhile by someone else.
    dashboard = subprocess.Popen(cmd, env=os.environ | {DASHBOARD_ENV: str(os.getpid())})

    def stop_dashboard(*_) -> None:
        if dashboard.poll() is None:
            dashboard.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGINT, stop_dashboard)
    signal.signal(signal.SIGTERM, stop_dashboard)
    code = dashboard.wait()
    # Stopping now: a second Ctrl-C (or make's forwarded SIGTERM) must not cut the cleanup short.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if db is not None:
        stop_collector(db, before, keep="--keep-collector" in argv, started=started_collector)
    return code


def stop_collector(db: Path, before: dict | None, keep: bool, started: int | None = None) -> None:
    """Stop the collector of `db` when this dashboard started it (or it is `started`), unless `keep`; say what
    stays running and how to stop it."""
    now = read_marker(db)
    if now is None:
        return
    pid = now["pid"]
    if pid != started and now.get("dashboard_pid") != os.getpid():
        # (a restarted collector or team API has a new pid: it was not started here either)
        before_pid = before.get("pid") if before else None
        since = (
            "was running before the dashboard" if before_pid == pid else "was not started by this dashboard"
        )
        print(f"runwatch: the collector (pid {pid}) for {db} {since} and keeps running; stop it with "
              f"`kill {pid}`", file=sys.stderr)  # fmt: skip
        return
    if keep:
        print(f"runwatch: the collector this dashboard started (pid {pid}) for {db} keeps running; stop it "
              f"with `kill {pid}`", file=sys.stderr)  # fmt: skip
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while not _exited(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if not _exited(pid):
        print(
            f"runwatch: the collector (pid {pid}) did not stop within 30 s; `kill -9 {pid}`", file=sys.stderr
        )
    else:
        print(f"runwatch: stopped the collector this dashboard started (pid {pid})", file=sys.stderr)


def _exited(pid: int) -> bool:
    """Whether `pid` has exited (a zombie waiting for its reaper has: the collector outlived its parent)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True
    except OSError:  # no /proc: ask the kernel
        return not pid_alive(pid)


if __name__ == "__main__":
    sys.exit(main())
