"""The collector daemon: one per database. Watches the roots, ingests, detects, serves the API.

Lifecycle: open the database (DuckDB lets only one process hold it), start the API on 127.0.0.1 (port 0 = a
free one), then write `DB.collector.json` (pid, host, port, started_at, roots) so the app and the CLI can find
it. A marker naming a live pid means another collector serves this database: exit with a message. SIGTERM or
SIGINT: stop the observer, make the final commit, remove the marker, exit 0.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collector.core.runtime import (
    API_STOP_S,
    Settings,
    command_of,
    ensure_token,
    keep_private,
    limit_malloc_arenas,
    marker_path,
    marker_state,
    read_marker,
    remove_marker,
    write_marker,
)
from collector.daemon.detection import Detection, default_sinks
from collector.formats import discover
from collector.ingest import fs
from collector.ingest.reader import Ingestor
from collector.store.damage import DamagedDatabase, damage_met
from collector.store.db import Store

if TYPE_CHECKING:
    from collector.ingest.tail import Tailer

log = logging.getLogger("collector")

TICK_INTERVAL_S = 5.0  # time-based rules (stalled) and checkpoint rescans
# The periodic full rescan (for events a filesystem did not deliver) may take at most this share of the
# time: walking a thousand run folders takes ~0.4 s of CPU, so it then comes every ~20 s instead of 5.
RESCAN_SHARE = 0.02
# Builds the HTTP app the daemon serves: (store, db, roots, token, request_ingest=, runs=) -> an ASGI app.
AppFactory = Callable[..., Any]


class AlreadyRunning(RuntimeError):
    """Another live collector serves this database; the message names its pid and port."""


class Collector:
    """Store + ingest + detection for one database; `serve()` adds the watcher and the API."""

    def __init__(self, settings: Settings, sinks: list | None = None) -> None:
        self.settings = settings
        self.db = Path(settings.db).resolve()
        self.roots = [fs.root_path(r) for r in settings.roots]  # local, or ssh:// (RemotePath)
        keep_private(self.db)
        self.store = Store(self.db, settings.memory_mb)
        self.detection = Detection(
            self.store, self.db, default_sinks(self.db, settings.webhook) if sinks is None else sinks
        )
        self.ingestor = Ingestor(
            self.store,
            self.roots,
            on_points=self.detection.points_added,
            on_run_info=self.detection.run_info_changed,
            on_backlog=self.detection.backlog_added,
            on_run_removed=self.detection.forget,
        )
        self.detection.run_dirs = self.ingestor.run_dirs
        self.detection.run_files = self.ingestor.run_files
        self.detection.hf_own_state = self.ingestor.hf_own_state
        self.detection.reachable = self._reachable
        self.team = None
        if settings.store:  # team mode: the file is published into the shared lake (daemon/team.py)
            from collector.daemon.team import TeamPublishing

            self.team = TeamPublishing(self.store, settings, self.ingestor.run_dirs, self.ingestor.run_files)
        self._stop = threading.Event()
        self.api_left_running = (
            False  # the API thread outlived API_STOP_S: the store stays open, exit at once
        )
        self.damage: DamagedDatabase | None = None  # damage met while serving: the daemon stops, saying it
        self._requests: list[Path] = []
        self._requests_lock = threading.Lock()

    # ---- one pass ----------------------------------------------------------------------------------

    def ingest_once(self) -> None:
        """Discover every run under the roots and ingest each to the end of its files."""
        paths = self.ingestor.discover()
        self.detection.warm_up()
        # Checkpoints first, as `serve` does: an alert found while reading names the checkpoint to go back to.
        self._scan_all_checkpoints()
        # Points DuckDB read in bulk (and every stored run, judged again by `warm_up`) are judged in step order
        # before the command ends: `ingest` and `check` say what `serve` says of the same files.
        self.ingestor.ingest_all(paths)
        while self.detection.catch_up():
            pass
        # Time-based rules once: a run whose status says running but whose files were last written hours
        # ago is stalled when first seen (its last point's time is the file's modification time).
        self.detection.tick()

    def close(self) -> None:
        if self.team is not None:
            self.team.close()  # the last batch, after the final commit
        self.detection.close()
        self.ingestor.close()
        if not self.api_left_running:  # (else a request may still read it: DuckDB replays its WAL next start)
            self.store.close()
        for host in self.hosts():
            host.close()

    def hosts(self) -> list:
        """The SSH hosts of the remote roots (one connection each, shared by all their runs)."""
        return list({id(r.host): r.host for r in self.roots if isinstance(r, fs.RemotePath)}.values())

    def _reachable(self, run: str) -> bool:
        run_dir = self.ingestor.run_dirs.get(run)
        return run_dir is None or fs.root_state(run_dir)["state"] != "disconnected"

    def _scan_all_checkpoints(self) -> None:
        for run in list(self.ingestor.run_dirs):
            if not self._reachable(run):
                continue
            try:
                self.detection.scan_checkpoints(run)
            except OSError as e:
                log.warning("run %s: checkpoint folders could not be read (%s); will retry", run, e)

    # ---- the daemon --------------------------------------------------------------------------------

    def serve(self, make_app: AppFactory) -> None:
        """Run until SIGTERM/SIGINT (or `stop()`), serving the API `make_app` builds (the CLI hands over
        `collector.api.app.create_app`: the daemon sits above the API's data, never imports the API). Raises
        AlreadyRunning when another collector holds the DB."""
        # Imported here: one-shot commands (ingest, --once) need neither the web stack, the file watcher
        # nor their memory.
        import anyio.to_thread
        import uvicorn

        from collector.ingest.poll import RemotePoller
        from collector.ingest.tail import Tailer

        token = ensure_token(self.db)
        app = make_app(
            self.store,
            self.db,
            self.roots,
            token,
            request_ingest=self.request_ingest,
            bind_address=self.settings.host,
            runs=self.detection.runs,
        )
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.settings.host, self.settings.port))
        port = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False))

        async def serve_api() -> None:
            # The thread pool the sync routes run in: at most `api_threads` requests at once.
            anyio.to_thread.current_default_thread_limiter().total_tokens = self.settings.api_threads
            await server.serve(sockets=[sock])

        api_thread = threading.Thread(target=asyncio.run, args=(serve_api(),), name="api", daemon=True)
        api_thread.start()
        while not server.started:
            if not api_thread.is_alive():
                raise RuntimeError(f"the API server on {self.settings.host}:{port} failed to start")
            time.sleep(0.02)
        tailer = Tailer([r for r in self.roots if isinstance(r, Path)], polling=self.settings.polling)
        tailer.start()
        pollers = [RemotePoller(host, tailer.changes) for host in self.hosts()]
        for poller in pollers:
            poller.start()
        info = {
            "pid": os.getpid(),
            "host": self.settings.host,
            "port": port,
            "started_at": time.time(),
            "roots": [root_text(r) for r in self.roots],
            "db": str(self.db),
        }
        write_marker(self.db, info)
        if self.team is not None:
            self.team.start()
        log.info(
            "collector pid %d serving %s on http://%s:%d", os.getpid(), self.db, self.settings.host, port
        )
        if self.team is not None:  # the lake and the name its runs go under (the host name when not given)
            pub = self.team.publisher
            log.info(
                "team lake: publishing into %s as collector %r (runs %s/RUN)",
                pub.spec.shown,
                pub.name,
                pub.name,
            )
        try:
            self._loop(tailer)
        finally:
            for poller in pollers:
                poller.stop()
            tailer.stop()
            server.should_exit = True
            api_thread.join(timeout=API_STOP_S)  # its requests end first: one can take seconds under load
            if api_thread.is_alive():
                log.warning("the API did not stop within %d s: exiting without its last requests", API_STOP_S)
                self.api_left_running = True
            remove_marker(self.db, os.getpid())
        if self.damage is not None:
            raise self.damage

    def stop(self) -> None:
        self._stop.set()

    def request_ingest(self, paths: list[Path]) -> None:
        """Queue files or folders (already confined to the roots) for the next ingest cycle."""
        with self._requests_lock:
            self._requests.extend(paths)

    def _loop(self, tailer: Tailer) -> None:
        interval = self.settings.commit_interval_s
        pending: set[str] = set(self.ingestor.discover())
        self.detection.warm_up()
        self._scan_all_checkpoints()
        last_rescan = last_tick = time.monotonic()
        rescan_every = self.settings.rescan_interval_s
        checkpoint_runs: set[str] = set()
        while not self._stop.is_set():
            cycle_start = time.monotonic()
            try:
                stored = bool(pending)
                pending = self.ingestor.ingest(sorted(pending))
                self.store.disk.stored()
                if stored and self.team is not None:
                    self.team.stored()  # its next batch carries these rows into the lake
            except Exception as e:  # one bad cycle must not kill the daemon; the next cycle retries
                if self._damaged(e):
                    break
                if self.store.disk.failed(e):
                    log.error("ingest cycle failed for a full disk (%s); retrying", e)
                else:
                    log.exception("ingest cycle failed; retrying")
                pending = set()
            if pending:
                wait = 0.0  # a backlog: keep reading, the commit per chunk bounds memory
            elif self.detection.behind:
                self._safely(self.detection.catch_up)  # judge a stored backlog, a slice per cycle
                wait = 0.0
            else:
                tailer.changes.wakeup.wait(timeout=max(0.0, min(self.settings.rescan_interval_s, 1.0)))
                # Batch: whatever changed within one commit interval goes into one cycle.
                wait = interval - (time.monotonic() - cycle_start)
            if wait > 0 and self._stop.wait(wait):
                break
            paths, moved, new_dirs = tailer.changes.drain()
            for src, dest in moved:
                self._safely(self.ingestor.moved, src, dest)
            with self._requests_lock:
                requests, self._requests = self._requests, []
            now = time.monotonic()
            if new_dirs or requests or now - last_rescan >= rescan_every:
                pending |= set(self._discover())
                last_rescan, took = time.monotonic(), time.monotonic() - now
                rescan_every = max(self.settings.rescan_interval_s, took / RESCAN_SHARE)
            for path in paths:
                target = self.ingestor.note_path(path)
                if target:
                    pending.add(target)
                run = self._safely(self._checkpoint_run, path)
                if run:
                    checkpoint_runs.add(run)
            if now - last_tick >= TICK_INTERVAL_S:
                last_tick = now
                checkpoint_runs |= set(self.ingestor.run_dirs)
                self._safely(self.detection.tick)
            for run in checkpoint_runs:
                if self._reachable(run):
                    self._safely(self.detection.scan_checkpoints, run)
            checkpoint_runs.clear()
        # Final commit: what is already on disk goes in before exit (not into a damaged file).
        if self.damage is None:
            self._safely(lambda: self.ingestor.ingest(self.ingestor.discover()))

    def _damaged(self, error: BaseException) -> bool:
        """Whether `error` says the database file is damaged (a part not read at start-up); then the daemon
        stops, and `serve` ends with the one message the CLI gives, instead of retrying a cycle that cannot
        succeed."""
        found = damage_met(self.db, error, "The collector stopped")
        if found is None:
            return False
        if self.damage is None:
            self.damage = found
            self._stop.set()
        return True

    def _discover(self) -> list[str]:
        """The rescan's discovery; a failure (a remote host dropping mid-way) is logged and retried later."""
        found = self._safely(self.ingestor.discover)
        return found or []

    def _checkpoint_run(self, path: str) -> str | None:
        """The run whose checkpoint folder `path` is in (a save in progress or finished), if any."""
        p = fs.path_of(path)
        if not any(part.startswith(("global_step_", "checkpoint-")) for part in p.parts):
            return None
        run = discover.run_for_path(p, self.roots)
        return run.id if run else None

    def _safely(self, fn, *args):
        """`fn(*args)`, or None when it raised (logged: one failing step never stops the daemon)."""
        try:
            return fn(*args)
        except ConnectionError as e:  # a remote host out of reach: its state says so; no traceback
            log.warning("%s: %s; the collector goes on", getattr(fn, "__name__", "step"), e)
        except Exception as e:
            if not self._damaged(e):
                log.exception("%s failed; the collector goes on", getattr(fn, "__name__", "step"))
        return None


def root_text(root) -> str:
    """A root as the user wrote it (`ssh://host/path` for a remote one)."""
    return root.url if isinstance(root, fs.RemotePath) else str(root)


_STALE_TOLD: set[tuple[Path, int]] = set()  # stale markers already said to be replaced (database, their pid)


def check_not_running(db: Path) -> None:
    """Raise AlreadyRunning when a live collector's marker names `db`. A marker that is provably stale (its
    pid dead, or what answers on its port is not this database's collector: the pid and port were reused
    after a kill -9) is replaced by this daemon's; one whose process does not answer in time stands."""
    db = Path(db).resolve()
    info = read_marker(db, prove=False)
    if info is None or info.get("pid") == os.getpid():
        return
    where = f"pid {info['pid']}, http://{info.get('host')}:{info['port']}"
    state = marker_state(db, info)
    if state == "stale":
        told = (db, info["pid"])
        if told not in _STALE_TOLD:  # `serve` checks before it starts and as it starts: say it once
            _STALE_TOLD.add(told)
            command = command_of(info["pid"])
            now = (
                f"that process is now `{command}`, not this database's collector"
                if command
                else "it has exited"
            )
            log.warning("replacing the stale marker %s (%s): %s", marker_path(db), where, now)
        return
    if state == "unanswered":
        raise AlreadyRunning(
            f"{marker_path(db)} names a collector serving {db} ({where}) that did not prove itself in time"
            f" (busy, or another program: `{command_of(info['pid']) or 'unknown'}`); if that is not a runwatch"
            " collector, delete the marker and start again"
        )
    raise AlreadyRunning(
        f"a collector is already serving {db} ({where}); "
        f"use it (the CLI and the app find it by themselves) or stop it first"
    )


def run_daemon(settings: Settings, make_app: AppFactory) -> int:
    """`python -m collector serve`, serving the API `make_app` builds: returns the exit code."""
    check_not_running(settings.db)
    limit_malloc_arenas()  # before the daemon starts its threads
    collector = Collector(settings)
    previous = {}

    def on_signal(signum, frame) -> None:
        log.info("signal %d: stopping (final commit, then exit)", signum)
        collector.stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        previous[sig] = signal.signal(sig, on_signal)
    try:
        collector.serve(make_app)
    finally:
        collector.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if collector.api_left_running:  # a thread still inside DuckDB would abort the interpreter's shutdown
        logging.shutdown()
        os._exit(0)
    return 0
