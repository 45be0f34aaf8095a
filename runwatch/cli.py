"""`runwatch COMMAND ...`: the monitor as one command, in the habits of `tensorboard --logdir`.

`runwatch ui [ROOT...]` starts (or finds) the collector of the database for those roots and serves the
dashboard; `runwatch mcp` serves the Model Context Protocol over stdio for coding agents; every other
command is `python -m collector COMMAND` (serve, ingest, check, runs, alerts, checkpoints, files, stop, ...).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from collector.cli import main as collector_main

COLLECTOR_COMMANDS = {
    "serve": "run the collector daemon on roots (watch, ingest, detect, the HTTP API)",
    "ingest": "read these paths once into the database (twice adds nothing)",
    "check": "judge a run or the runs under a path in one pass; exit 2 on an error alert",
    "runs": "list the database's runs",
    "run": "one run: its state, and what became of its last stop request",
    "alerts": "list alerts",
    "incidents": "list incidents (alerts grouped by trouble)",
    "ack": "acknowledge an alert",
    "resolve": "resolve an alert",
    "checkpoints": "a run's checkpoints and which to keep",
    "metrics": "one metric of a run",
    "files": "files not read in full",
    "stop": "ask a run to stop (RUN_DIR/runwatch.stop; the trainer polls it)",
    "forget": "team mode: delete a retired collector's runs and rows from the lake",
}


def _help() -> str:
    width = max(len(c) for c in COLLECTOR_COMMANDS) + 2
    lines = [
        "usage: runwatch COMMAND [ARGS...]   (runwatch COMMAND --help for its options)",
        "",
        __doc__.split("\n\n")[0].split(": ", 1)[1],
        "",
        "commands:",
        f"  {'ui':<{width}}the dashboard on 127.0.0.1:8501 for ROOT... (starts a collector when none runs)",
        f"  {'mcp':<{width}}a Model Context Protocol server on stdio (runs, incidents, advice, metrics, stop)",
        *(f"  {name:<{width}}{what}" for name, what in COLLECTOR_COMMANDS.items()),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_help())
        return 0 if argv else 1
    command, rest = argv[0], argv[1:]
    if command == "ui":
        return ui(rest)
    if command == "mcp":
        from runwatch.mcp_server import main as mcp_main

        return mcp_main(rest)
    if command in COLLECTOR_COMMANDS:
        return collector_main(argv, prog="runwatch")
    print(f"runwatch: unknown command {command!r}\n\n{_help()}", file=sys.stderr)
    return 1


def ui(argv: list[str]) -> int:
    """Find or start the collector for the database and roots, then serve the dashboard on it."""
    from app.connection import CollectorUnavailable, connect, roots_differ
    from app.settings import SettingsError, read_settings

    ap = argparse.ArgumentParser(
        prog="runwatch ui", description="the dashboard for the runs under ROOT... (default: runs/)"
    )
    ap.add_argument("roots", nargs="*", metavar="ROOT", help="folders of runs, or ssh://[user@]host/path")
    ap.add_argument("--db", help="the DuckDB file (default $RUNWATCH_DB or .runwatch/runwatch.duckdb)")
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on (default: this machine only)")
    ap.add_argument("--port", type=int, default=8501, help="the dashboard's port (default 8501)")
    ap.add_argument("--refresh", help="seconds between live updates (default 5)")
    args = ap.parse_args(argv)
    app_args = [
        *(["--db", args.db] if args.db else []),
        *(["--refresh", args.refresh] if args.refresh else []),
    ]
    for root in args.roots:
        app_args += ["--root", root]
    try:
        settings = read_settings(app_args, os.environ, Path.cwd())
        connection = connect(settings.db, settings.roots, settings.may_start)
    except (SettingsError, CollectorUnavailable) as e:
        print(f"runwatch ui: {e}", file=sys.stderr)
        return 1
    info = connection.info
    said = "started" if connection.started_here else "uses the running"
    print(
        f"runwatch: {said} collector (pid {info.get('pid')}, API port {info.get('port')}) for {settings.db}",
        file=sys.stderr,
    )
    missed = roots_differ(info, settings.roots)
    if missed:
        print(
            f"runwatch: that collector does not watch {', '.join(missed)}; it watches "
            f"{', '.join(info.get('roots') or [])} (stop it with Ctrl-C or kill {info.get('pid')} to change roots)",
            file=sys.stderr,
        )
    app_args = ["--db", str(settings.db), *(a for r in settings.roots for a in ("--root", str(r)))]
    if args.refresh:
        app_args += ["--refresh", args.refresh]
    from app.__main__ import main as app_main

    started = info.get("pid") if connection.started_here else None
    return app_main(
        ["--host", args.host, "--port", str(args.port), "--", *app_args], started_collector=started
    )
