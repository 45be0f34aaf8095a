"""`python -m collector ...`: the daemon and the commands that read and act on a database.

Every command works against the running collector of `--db` through its API when there is one (DuckDB lets
only one process open the file), else on the database directly. `--json` prints exactly the API's JSON
(the same functions build both); without it a table for people.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import duckdb

from collector.api import alerts as api_alerts
from collector.api import incidents as api_incidents
from collector.api import run_files
from collector.api import runs as api_runs
from collector.api import series as api_series
from collector.api import stop as api_stop
from collector.api.client import ApiError, Client, parse
from collector.cli_check import EXIT_USAGE
from collector.cli_tables import TABLES
from collector.core import runtime
from collector.core.printable import log_escaped, printable
from collector.core.runtime import API_THREADS, MEMORY_MB, Settings, keep_private, read_marker
from collector.formats import unread
from collector.runs.lookup import NotFound
from collector.runs.service import RunService
from collector.store import lake
from collector.store import read as store_read
from collector.store.damage import damage_of, damaged
from collector.store.db import Store, StoreError


class CliError(RuntimeError):
    """A command failed in a way the user can fix; the message says how."""


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors exit 1: its own 2 is `check`'s "an error was found" (a typo in CI)."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _parser(prog: str = "python -m collector") -> argparse.ArgumentParser:
    ap = _Parser(prog=prog, description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    common = _Parser(add_help=False)
    common.add_argument(
        "--db", type=Path, help=f"the DuckDB file (default $RUNWATCH_DB, else {runtime.DEFAULT_DB})"
    )
    common.add_argument("--json", action="store_true", help="print the API's JSON instead of a table")

    serve = sub.add_parser(
        "serve", parents=[common], help="run the collector daemon (watch, ingest, detect, API)"
    )
    serve.add_argument(
        "roots",
        nargs="*",
        help="folders (or files) holding runs; ssh://[user@]host[:port]/path for another machine "
        "(none with --store: serve the team's lake, every collector's runs)",
    )
    serve.add_argument(
        "--store",
        help="team mode: also publish into this shared lake, ducklake:postgres:dbname=... host=... user=... "
        "(needs the team venv: make team-venv)",
    )
    serve.add_argument("--data-path", help="team mode: the lake's shared data folder (Parquet files)")
    serve.add_argument(
        "--collector", help="team mode: this collector's unique name in the lake (default: the host name)"
    )
    serve.add_argument("--port", type=int, default=0, help="API port on 127.0.0.1 (0 = a free one)")
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)"
    )
    serve.add_argument("--polling", action="store_true", help="poll instead of inotify (network filesystems)")
    serve.add_argument("--webhook", help="POST alerts to this URL (Slack-compatible)")
    serve.add_argument("--once", action="store_true", help="ingest what is there now, then exit")
    serve.add_argument(
        "--memory-mb",
        type=int,
        default=int(os.environ.get("RUNWATCH_MEMORY_MB") or MEMORY_MB),
        help=f"DuckDB's memory limit in MB (default $RUNWATCH_MEMORY_MB or {MEMORY_MB}; it spills to disk past it)",
    )
    serve.add_argument(
        "--api-threads",
        type=int,
        default=int(os.environ.get("RUNWATCH_API_THREADS") or API_THREADS),
        help=f"API requests answered at once (default $RUNWATCH_API_THREADS or {API_THREADS})",
    )

    ingest = sub.add_parser("ingest", parents=[common], help="ingest these paths once (twice adds nothing)")
    ingest.add_argument(
        "paths", nargs="+", help="files or folders; ssh://[user@]host[:port]/path for another machine"
    )

    sub.add_parser("runs", parents=[common], help="list runs")
    one = sub.add_parser(
        "run", parents=[common], help="one run: its state, and what became of its last stop request"
    )
    one.add_argument("run")

    metrics = sub.add_parser("metrics", parents=[common], help="one metric of a run")
    metrics.add_argument("--run", required=True)
    metrics.add_argument("--metric", required=True)
    metrics.add_argument(
        "--points", type=int, default=2000, help="at most this many buckets (raw when fewer)"
    )
    metrics.add_argument("--start", type=int)
    metrics.add_argument("--end", type=int)

    for name, what in (
        ("alerts", "list alerts (as incidents, with their alert count; --json: every alert)"),
        ("incidents", "list incidents (alerts grouped by trouble)"),
    ):
        listing = sub.add_parser(name, parents=[common], help=what)
        listing.add_argument("--run")
        listing.add_argument("--rule")
        listing.add_argument("--severity", choices=["info", "warn", "error"])
        listing.add_argument("--state", default="all", choices=["open", "acked", "resolved", "all"])

    for name, what in (("ack", "acknowledge an alert"), ("resolve", "resolve an alert")):
        p = sub.add_parser(name, parents=[common], help=what)
        p.add_argument("alert_id", type=int)
        p.add_argument("--note", help="why (kept in the alert's history)")

    stop = sub.add_parser(
        "stop",
        parents=[common],
        help="ask a run to stop (writes RUN_DIR/runwatch.stop; the trainer polls it)",
    )
    stop.add_argument("run")
    stop.add_argument("--reason", default="", help="why (the trainer records it in status.json)")

    files = sub.add_parser(
        "files",
        parents=[common],
        help="files not read in full: failing, not read, deleted, bad lines, no point",
    )
    files.add_argument("--run", help="only this run's files")

    checkpoints = sub.add_parser(
        "checkpoints", parents=[common], help="checkpoints of a run and which to keep"
    )
    checkpoints.add_argument("--run", required=True)
    checkpoints.add_argument("--metric", help="the evaluation metric that decides (default: the run's own)")
    checkpoints.add_argument("--direction", help="min or max: which way the metric is better")

    check = sub.add_parser(
        "check",
        help="judge a run (or the runs under a path) in one pass: print the verdict; exit 2 on an error,"
        " 3 on warnings only with --fail-on warn",
    )
    check.add_argument("target", help="a run folder or metrics file (read once), or a run id of --db")
    check.add_argument(
        "--db",
        type=Path,
        help="the database of a run id (default $RUNWATCH_DB, else .runwatch/runwatch.duckdb;"
        " for a path: a temporary one)",
    )
    check.add_argument("--json", action="store_true", help="print the verdict as JSON")
    check.add_argument(
        "--fail-on", default="error", choices=["warn", "error"], help="exit 3 on warnings only when warn"
    )
    forget = sub.add_parser(
        "forget",
        help="team mode: delete a retired collector's runs and rows from the lake (one transaction)",
    )
    forget.add_argument("--store", required=True, help="the lake, ducklake:postgres:... (as its collectors')")
    forget.add_argument(
        "--data-path", required=True, help="the lake's data folder or bucket (as its collectors')"
    )
    forget.add_argument(
        "--collector", required=True, help="the name whose rows go (refused while it is live)"
    )
    return ap


# the exit status of a program a closed pipe stopped (128 + SIGPIPE), as a shell reports it
EXIT_CLOSED_PIPE = 141


def main(argv: list[str] | None = None, prog: str = "python -m collector") -> int:
    """Run one command; `prog` is the command's name in usage lines (`runwatch` when called as the tool). A
    reader that closes the output early (`check DIR | head`) ends the command quietly, with status 141."""
    try:
        return _main(argv, prog)
    except BrokenPipeError:
        # the rest of the output goes nowhere, and Python's flush at exit finds no closed pipe to complain of
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_CLOSED_PIPE


def _main(argv: list[str] | None, prog: str) -> int:
    args = _parser(prog).parse_args(argv)
    log_escaped(sys.stderr)
    # httpx logs every request at INFO: noise on stderr for each CLI call, not news for the user.
    for noisy in ("httpx", "httpcore", "asyncssh"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if args.command == "check":
        from collector import cli_check

        try:
            return cli_check.check(args, _ingest, asking_typed)
        except (CliError, StoreError, ApiError, NotFound, ValueError) as e:
            print(f"collector check: {printable(e)}", file=sys.stderr)
            return EXIT_USAGE
    if args.command == "forget":
        return _forget(args)
    args.db = (args.db or runtime.default_db()).expanduser().resolve()
    keep_private(args.db)
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "ingest":
            return _ingest(args)
        result = typed(args, _query(args))
    except (CliError, StoreError, ApiError, NotFound, ValueError) as e:
        print(f"collector {args.command}: {printable(e)}", file=sys.stderr)
        return EXIT_USAGE
    except duckdb.Error as e:  # damage found only when a query reads the damaged part
        what = damage_of(args.db, str(e))
        if what is None:
            raise
        # an ingest met it mid-way: the runs it committed before stay (nothing of the failed read went in)
        done = (
            "The ingest stopped; runs it stored before stay"
            if args.command == "ingest"
            else "Nothing was changed"
        )
        error = damaged(args.db, what, done)
        print(f"collector {args.command}: {printable(error)}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(as_json(result), allow_nan=True, default=str))
    else:
        print(TABLES[args.command](result))
    return 0


def _forget(args: argparse.Namespace) -> int:
    from collector.store.lake_forget import forget_collector

    try:
        deleted = forget_collector(lake.LakeSpec.parse(args.store, args.data_path), args.collector)
    except StoreError as e:
        print(f"collector forget: {printable(lake.masked(str(e)))}", file=sys.stderr)
        return EXIT_USAGE
    rows = ", ".join(f"{table} {count}" for table, count in sorted(deleted.items()))
    print(
        f"forgot collector {args.collector!r}: deleted {sum(deleted.values())} rows from the lake in one "
        f"transaction ({rows}); its data files go when a collector next compacts the lake"
    )
    return 0


def _serve(args: argparse.Namespace) -> int:
    from collector.daemon.service import AlreadyRunning, Collector, check_not_running, run_daemon

    settings = Settings(
        db=args.db,
        roots=list(args.roots),
        host=args.host,
        port=args.port,
        polling=args.polling,
        webhook=args.webhook,
        memory_mb=args.memory_mb,
        api_threads=args.api_threads,
        store=args.store,
        data_path=args.data_path,
        collector_name=args.collector,
    )
    if args.memory_mb < 16 or args.api_threads < 1:
        raise CliError("--memory-mb must be at least 16 and --api-threads at least 1")
    if args.store and lake.has_password(args.store):
        logging.getLogger("collector").warning(
            "--store holds the Postgres password: the process list (ps) shows it to every user of this "
            "machine. Instead, %s",
            lake.PASSWORD_HOW,
        )
    if not args.roots:
        if not args.store:
            raise CliError("serve needs at least one root (or --store, to serve a team's lake)")
        from collector.daemon.team import serve_lake_reader

        check_not_running(args.db)
        from collector.api.app import create_app  # (the web stack only for `serve`)

        return serve_lake_reader(settings, create_app)
    settings.roots = _roots(args.roots, wait=args.once)
    try:
        check_not_running(args.db)
        if args.once:
            collector = Collector(settings)
            try:
                collector.ingest_once()
            finally:
                collector.close()
            return 0
        from collector.api.app import create_app  # (the web stack only for `serve`)

        return run_daemon(settings, create_app)
    except AlreadyRunning as e:
        print(f"collector serve: {printable(e)}", file=sys.stderr)
        return 1


def _roots(texts: list[str], wait: bool) -> list:
    """The roots as the collector takes them (a local Path, or a RemotePath for `ssh://`), each checked: a
    local one must exist; a remote one is connected to once. An unknown host key is always an error (with
    the command that accepts it); an unreachable host is one only when `wait` (a one-shot read), else the
    daemon keeps trying."""
    from collector.ingest import fs
    from collector.ingest.ssh_target import HostKeyUnknown, HostUnreachable

    roots = []
    for text in texts:
        try:
            root = fs.root_path(text)
        except ValueError as e:
            raise CliError(str(e)) from None
        if isinstance(root, fs.RemotePath):
            try:
                if not root.exists():
                    raise CliError(f"{text}: no such folder or file on {root.host.label}")
            except HostKeyUnknown as e:
                raise CliError(str(e)) from None
            except HostUnreachable as e:
                if wait:
                    raise CliError(str(e)) from None
                logging.getLogger("collector").warning("%s; the collector starts and keeps trying", e)
        elif not root.exists():
            raise CliError(f"root {root} does not exist")
        roots.append(root)
    return roots


def _root_text(root) -> str:
    return getattr(root, "url", None) or str(root)


def _ingest(args: argparse.Namespace) -> int:
    client = Client.for_db(args.db)
    paths = _roots(args.paths, wait=client is None)
    if client is not None:
        # The daemon holds the database: ask it (it only takes paths inside its roots).
        from collector.api.models import Queued

        try:
            result = client.post("/api/ingest", {"paths": [_root_text(p) for p in paths]})
        except ApiError as e:
            if e.status != 403:
                raise
            raise CliError(
                f"{e}. The collector serving {args.db} holds the database and reads only its roots: add this"
                " path to its roots (restart `collector serve` with it), or stop it and run ingest again"
            ) from None
        queued = parse(result, Queued).queued
        print(json.dumps(result) if args.json else f"queued for the running collector: {', '.join(queued)}")
        return 0
    from collector.core.runtime import alerts_log_path
    from collector.daemon import sinks
    from collector.daemon.service import Collector

    collector = Collector(
        Settings(db=args.db, roots=paths), sinks=[sinks.JsonlSink(alerts_log_path(args.db))]
    )
    before = store_read.point_count(collector.store)
    started = time.perf_counter()
    try:
        collector.ingest_once()
        after = store_read.point_count(collector.store)
        runs = sorted(collector.ingestor.run_dirs)
        not_read = _not_read(collector.store, set(runs))
        own = [{"path": str(p), "reason": why} for p, why in unread.runwatch_files_beside(args.db, paths)]
    finally:
        collector.close()
    seconds = time.perf_counter() - started
    summary = {"runs": runs, "points_added": after - before, "points": after, "seconds": round(seconds, 3)}
    if args.json:
        print(json.dumps(summary | {"not_read": not_read, "runwatch_files": own}))
        return 0
    # fewer: a file read into a run of its own before was found to be a copy of another run's (logged)
    change = f"{after - before} new points" if after >= before else f"{before - after} fewer points"
    print(f"ingested {len(runs)} run(s): {change} ({after} stored) in {seconds:.2f} s")
    if own:
        print(f"{len(own)} file(s) of runwatch's own beside the database, not read:")
    for f in own:
        print(f"  {printable(f['path'])}: {printable(f['reason'])}")
    for run, files in not_read.items():
        print(f"{printable(run)}: {len(files)} file(s) not read, failing or read without a point")
        for f in files:
            print(f"  {printable(f['path'])}: {printable(f['reason'])}")
    return 0


def _not_read(store, runs: set[str]) -> dict[str, list[dict]]:
    """Per run, the files it does not read (with the reason), those whose read failed (retried by the next
    collector or ingest) and those read that gave no point."""
    from collector.store.failing import failing_files

    out: dict[str, list[dict]] = {}
    for f in failing_files(store):
        if f["run"] in runs:
            reason = f"could not be read ({f['reason']}); nothing of it was stored, the next read tries again"
            out.setdefault(f["run"], []).append({"path": f["path"], "reason": reason})
    for f in store_read.skipped_files(store):
        if f["run"] in runs or f["run"] is None:  # (None: a folder that could not be listed)
            out.setdefault(f["run"] or "(no run)", []).append({"path": f["path"], "reason": f["reason"]})
    for source in store_read.sources(store):
        warning = run_files.source_warning(source)
        if source["run"] in runs and warning:
            out.setdefault(source["run"], []).append({"path": source["path"], "reason": warning})
    for r in store_read.runs(store):
        # entries a file holds that are deliberately not read (HF predict_* test-set results without a step)
        note = (store_read.parse_json(r["config"]) or {}).get("entries_not_read") if r["id"] in runs else None
        if isinstance(note, str):
            out.setdefault(r["id"], []).append({"path": r["path"], "reason": note})
    return dict(sorted(out.items()))


def _query(args: argparse.Namespace) -> Any:
    """The command's JSON: from the running collector's API, else from the database directly."""
    with asking(args.db) as ask:
        return ask(args)


@contextlib.contextmanager
def asking(db: Path) -> Iterator[Callable[[argparse.Namespace], Any]]:
    """What answers commands on `db` (`check` asks several: one a run): the running collector's API, through
    one client, else the database, opened once with one `RunService` for all of them (an opening costs a
    tenth of a second, and each run's advice is built once)."""
    client = Client.for_db(db)
    if client is not None:
        try:
            yield lambda args: _from_collector(client, args)
        finally:
            client.close()
        return
    if not db.exists():
        raise CliError(f"no database at {db} (start `python -m collector serve --db {db} ROOT...`)")
    if read_marker(db) is None and not db.is_file():
        raise CliError(f"{db} is not a file")
    store = Store(db)
    try:
        service = RunService(store)
        yield lambda args: _request(args)[2](service)
    finally:
        store.close()


@contextlib.contextmanager
def asking_typed(db: Path) -> Iterator[Callable[[argparse.Namespace], Any]]:
    """`asking`, each answer read as its type (`typed`): what `check` reads."""
    with asking(db) as ask:
        yield lambda args: typed(args, ask(args))


def _from_collector(client: Client, args: argparse.Namespace) -> Any:
    path, params, _ = _request(args)
    if args.command in ("ack", "resolve"):
        return client.post(path, {"note": args.note})
    if args.command == "stop":
        return client.post(path, {"reason": args.reason})
    result = client.get(path, params=params)
    if args.command == "runs":  # what is listed may be behind: say why
        from collector.api.models import Health

        health = client.get("/api/health", model=Health)
        ingest = health.ingest
        if ingest is not None and ingest.state == "stalled":
            print(f"collector runs: warning: {printable(ingest.message)}", file=sys.stderr)
        lake = health.lake  # a team's lake: why it lists nothing yet
        if lake is not None and lake.error:
            print(f"collector runs: warning: {printable(lake.error)}", file=sys.stderr)
        if not result and lake is not None and lake.message:
            print(f"collector runs: {printable(lake.message)}", file=sys.stderr)
    return result


def typed(args: argparse.Namespace, result: Any) -> Any:
    """The command's answer (`_query`'s JSON data) read as its type (`collector.api.models`, the API's own),
    which the tables and `check` read: an answer of another shape (a collector of another version) is an
    error naming the field, not a table printed wrong. `as_json` gives the JSON data back."""
    from collector.api import models  # (pydantic: only for the commands that print an answer)

    c = args.command
    # `alerts` lists incidents for people; with --json (and for `check`, which asks without it) every alert
    listing = list[models.Alert] if getattr(args, "json", True) else list[models.Incident]
    model = {
        "runs": list[models.RunSummary],
        "run": models.RunDetail,
        "metrics": models.SeriesAnswer,
        "alerts": listing,
        "incidents": list[models.Incident],
        "ack": models.AlertDetail,
        "resolve": models.AlertDetail,
        "stop": models.StopAnswer,
        "files": list[models.ProblemFile],
        "checkpoints": models.Advice,
    }[c]
    try:
        answer = parse(result, model)
    except ValueError as e:
        raise CliError(f"the answer to {c} is not what this command reads: {e}") from None
    return answer.series[0] if c == "metrics" else answer  # (the one metric asked for)


def as_json(answer: Any) -> Any:
    """A typed answer as the JSON data it was read from: fields the model does not name are kept, absent ones
    stay absent, a renamed one (`copy`) has its JSON name."""
    from collector.api.models import Answer

    if isinstance(answer, list):
        return [as_json(a) for a in answer]
    if isinstance(answer, Answer):
        return answer.model_dump(exclude_unset=True, by_alias=True)
    return answer


def _request(args: argparse.Namespace) -> tuple[str, Any, Callable[[RunService], Any]]:
    """The command's API path, its query parameters, and what answers it on an opened database."""
    c = args.command
    if c == "runs":
        return "/api/runs", None, api_runs.runs
    if c == "run":
        return f"/api/runs/{quote(args.run, safe='/')}", None, lambda s: api_runs.run(s, args.run)
    if c == "metrics":
        params = {"metric": args.metric, "points": args.points}
        params |= {k: v for k, v in (("start", args.start), ("end", args.end)) if v is not None}
        return (
            f"/api/runs/{quote(args.run, safe='/')}/metrics",
            params,
            lambda s: api_series.metrics(s.store, args.run, [args.metric], args.points, args.start, args.end),
        )
    if c == "incidents" or (c == "alerts" and not getattr(args, "json", True)):
        # people read incidents: `alerts` prints each with its alert count (`--json` keeps every alert's row)
        rule = getattr(args, "rule", None)
        params = {"state": args.state} | {
            k: v for k, v in (("run", args.run), ("rule", rule), ("severity", args.severity)) if v
        }
        return (
            "/api/incidents",
            params,
            lambda s: api_incidents.incidents(s, args.run, args.severity, args.state, rule),
        )
    if c == "alerts":
        params = {"state": args.state} | {
            k: v for k, v in (("run", args.run), ("rule", args.rule), ("severity", args.severity)) if v
        }
        return (
            "/api/alerts",
            params,
            lambda s: api_alerts.alerts(s, args.run, args.rule, args.severity, args.state),
        )
    if c in ("ack", "resolve"):
        state = "acked" if c == "ack" else "resolved"
        return (
            f"/api/alerts/{args.alert_id}/{c}",
            None,
            lambda s: api_alerts.set_alert_state(s.store, args.alert_id, state, args.note),
        )
    if c == "stop":
        return (
            f"/api/runs/{quote(args.run, safe='/')}/stop",
            None,
            lambda s: api_stop.request_stop(s.store, args.run, args.reason),
        )
    if c == "files":
        params = {"run": args.run} if args.run else None
        return "/api/problem_files", params, lambda s: run_files.problem_files(s.store, args.run)
    if c == "checkpoints":
        return (
            f"/api/runs/{quote(args.run, safe='/')}/checkpoints",
            {k: v for k, v in (("metric", args.metric), ("direction", args.direction)) if v},
            lambda s: s.advice(args.run, args.metric, args.direction),
        )
    raise CliError(f"unknown command {c}")
