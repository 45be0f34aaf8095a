"""Team mode in the daemon: a collector's publishing thread, and a reader serving the whole team's lake.

`serve --store ducklake:postgres:... --data-path DIR --collector NAME ROOT...` runs the usual collector on its
own file and a `TeamPublishing` thread beside it: one batch into the lake (`collector.store.lake.LakePublisher`)
soon after each ingest commit that stored new rows, at least one every `publish_interval_s`, then the stop
requests asked anywhere for its runs become their stop files. `serve --store ... --data-path DIR` without roots
serves the API over the lake (`serve_lake_reader`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from collector.core.runtime import API_STOP_S, Settings, ensure_token, remove_marker, write_marker
from collector.core.stop_request import (
    ALREADY_THERE,
    StopFileLink,
    check_inside,
    ended,
    single_file,
    write_stop_request,
)
from collector.store import alerts as store_alerts
from collector.store import lake, lake_reader
from collector.store import read as store_read
from collector.store.db import Store

log = logging.getLogger("collector")

COMPACT_EVERY_S = 30.0  # merge the batches' small Parquet files this often (store/lake.py: compact)
LAKE_AWAITED_S = 1.0  # a reader started before any collector looks for the lake's catalog this often


class TeamPublishing:
    """Publishes the collector's file into the lake in batches, on a thread of its own."""

    def __init__(self, store: Store, settings: Settings, run_dirs: dict, run_files: dict) -> None:
        spec = lake.LakeSpec.parse(settings.store, settings.data_path)
        self.publisher = lake.LakePublisher(store, spec, settings.collector_name or socket.gethostname())
        self.interval = settings.publish_interval_s
        self.soon = settings.publish_soon_s
        self.run_dirs = run_dirs  # run -> its folder (the ingestor's, live)
        self.run_files = run_files  # run -> its file, for a run that is one file by itself (the ingestor's)
        self._stop = threading.Event()
        self._stored = threading.Event()  # the ingest loop committed new rows since the last batch began
        self._thread = threading.Thread(target=self._loop, name="lake", daemon=True)
        self._failing_since: float | None = None
        self._failing_why = (
            ""  # the failure last said, its numbers aside (a heartbeat's age changes each time)
        )

    def start(self) -> None:
        self._thread.start()

    def stored(self) -> None:
        """The ingest loop committed new rows: the next batch starts as soon as `_wait` allows."""
        self._stored.set()

    def close(self) -> None:
        """Stop the thread, then one last batch (what the final commit stored goes out too), unless the thread
        is still in a batch after 60 s (a name or lake lock held elsewhere): two batches never share a cursor."""
        self._stop.set()
        self._stored.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)
        if self._thread.is_alive():  # a batch still waits on a lock: a last one would share its cursor
            log.warning(
                "team lake: the publishing thread is still in a batch after 60 s; no last batch: what it "
                "did not publish stays in this collector's file and goes out at its next start"
            )
            return
        self.once()

    def once(self) -> bool:
        """One batch and the stops asked; False when the lake could not be reached (retried next time)."""
        try:
            written = self.publisher.publish()
            stops, alert_changes = self.publisher.asked  # read in the batch's own transaction
            self._carry_out_stops(stops)
            self._carry_out_alert_changes(alert_changes)
        except Exception as e:  # Postgres restarting, a network drop: the file keeps everything meanwhile
            why = lake.masked(str(e))
            said, self._failing_why = self._failing_why, re.sub(r"\d+", "N", why)
            if self._failing_since is None:
                self._failing_since = time.monotonic()
                log.warning(
                    "team lake: publishing failed (%s); the collector keeps its file and retries", why
                )
            elif self._failing_why != said:  # another reason (a name lost, then refused): said too
                log.warning("team lake: publishing still fails, now: %s", why)
            return False
        if self._failing_since is not None:
            log.info("team lake: publishing again after %.0f s", time.monotonic() - self._failing_since)
            self._failing_since, self._failing_why = None, ""
        if written["points"] or written["rows"] or written["deleted"]:
            log.debug("team lake: published %s", written)
        return True

    def _carry_out_stops(self, stops: list[tuple[str, str, float]]) -> None:
        for run, reason, asked_at in stops:
            outcome = self._refusal(run)
            if outcome is None:
                try:
                    _, written = write_stop_request(
                        self.run_dirs[run], reason or "stop requested from runwatch", by="person"
                    )
                    outcome = "written" if written else ALREADY_THERE
                except StopFileLink as e:  # refused, as the API refuses it alone
                    outcome = str(e)
                except OSError as e:  # (raised, it failed every batch and hid the acks asked after it)
                    outcome = f"the stop request could not be written ({e})"
            self.publisher.stop_done(run, asked_at, outcome)  # the asker reads why in team_stops.outcome
            log.info("team lake: stop of %s asked through the lake: %s", run, outcome)

    def _refusal(self, run: str) -> str | None:
        """Why no stop file is written for `run` (the API's refusals, `core/stop_request.py`), else None. The reader
        refuses these too, but a request from an older reader, or a run that ended after it was asked, reaches
        the owner: a single file's folder is the watched root (every sibling's stop file), and a stop file left
        in an ended run's folder would stop it again once resumed."""
        shown = f"{self.publisher.name}/{run}"  # (named as the asker knows it, as the reader's refusals do)
        file = self.run_files.get(run)
        if file is not None:
            return single_file(shown, file)
        folder = self.run_dirs.get(run)
        if folder is None or not folder.is_dir():
            return f"run {shown!r} has no folder this collector can write to"
        found = store_read.runs(self.publisher.store, run)
        if not found:
            return None
        if found[0].get("root"):  # a folder on the way swapped for a link since the run was found
            try:
                check_inside(folder, found[0]["root"])
            except StopFileLink as e:
                return str(e)
        return ended(shown, store_read.parse_json(found[0]["status_info"]))

    def _carry_out_alert_changes(self, changes: list[tuple[int, str, str | None, float]]) -> None:
        for local_id, state, note, asked_at in changes:
            try:
                store_alerts.set_state(self.publisher.store, local_id, state, note)
                outcome = state  # the next batch carries the alert's new state and history into the lake
            except (store_alerts.AlertNotFound, ValueError) as e:
                outcome = str(e)
            self.publisher.alert_change_done(local_id, asked_at, outcome)
            log.info("team lake: alert %d set to %s through the lake: %s", local_id, state, outcome)

    def _loop(self) -> None:
        last_compacted = started = ended = time.monotonic()
        while not self._wait(started, ended):
            self._stored.clear()  # (a commit from here on is in this batch, or starts the next one)
            started = time.monotonic()
            published = self.once()
            ended = time.monotonic()
            if published and ended - last_compacted >= COMPACT_EVERY_S:
                last_compacted = ended
                try:
                    if not self.publisher.compact(COMPACT_EVERY_S):
                        log.debug("team lake: compacted by another collector within %.0f s", COMPACT_EVERY_S)
                except Exception as e:  # another collector compacting at the same moment: next time
                    why = lake.masked(str(e).splitlines()[0])[:200]
                    log.info("team lake: compaction left for later (%s)", why)

    def _wait(self, started: float, ended: float) -> bool:
        """Wait for the next batch; True when the thread is to stop. New rows go out `soon` after the last batch
        began (not on a clock: a batch waited up to a second after they were stored), or after the rest below;
        with nothing new, a batch `interval` after the last one ended."""
        # The thread rests as long as its last batch took, up to `soon`: on a starved machine back-to-back
        # batches each pay a batch's fixed cost (~10 lake statements) and take the ingest loop's share of the cores.
        rest = min(ended - started, self.soon)
        if self._stop.wait(max(0.0, max(started + self.soon, ended + rest) - time.monotonic())):
            return True
        self._stored.wait(max(0.0, ended + self.interval - time.monotonic()))
        return self._stop.is_set()


def serve_lake_reader(settings: Settings, make_app: Callable[..., Any]) -> int:
    """`serve --store ... --data-path ...` without roots: the API `make_app` builds (the CLI's
    `create_app`) over every collector's runs in the lake, until SIGTERM/SIGINT. Stops asked here are written
    to the lake for the owning collector. Started before any collector created the lake, it answers as an
    empty store and attaches the lake once one has (`lake_reader.LakeReader`)."""
    import signal

    import uvicorn

    spec = lake.LakeSpec.parse(settings.store, settings.data_path)
    reader = lake_reader.LakeReader(spec, settings.memory_mb)
    store = Store.on_lake(reader, settings.db)
    token = ensure_token(settings.db)
    app = make_app(store, settings.db, [], token)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((settings.host, settings.port))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False))
    api = threading.Thread(target=asyncio.run, args=(server.serve(sockets=[sock]),), name="api", daemon=True)
    api.start()
    while not server.started:
        if not api.is_alive():
            raise RuntimeError(f"the API server on {settings.host} failed to start")
        time.sleep(0.02)
    port = sock.getsockname()[1]
    marker = {"pid": os.getpid(), "host": settings.host, "port": port, "started_at": time.time(), "roots": [],
              "db": str(settings.db), "lake": spec.shown}  # fmt: skip
    # (its role may only read: the marker says so, for the dashboard)
    write_marker(settings.db, marker | {"lake_read_only": reader.read_only})
    log.info(
        "team lake reader pid %d serving %s on http://%s:%d", os.getpid(), spec.shown, settings.host, port
    )
    if not reader.attached:
        log.info("team lake: no collector has created the lake yet: answering as an empty store meanwhile")
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    try:
        while not done.wait(None if reader.attached else LAKE_AWAITED_S):
            if reader.wait_for_lake():
                write_marker(settings.db, marker | {"lake_read_only": reader.read_only})
    finally:
        server.should_exit = True
        api.join(timeout=API_STOP_S)  # its requests end first: one can take seconds under load
        remove_marker(settings.db, os.getpid())
    # A reader holds nothing to close: its database is in memory and what it asked of the lake is committed.
    # The interpreter's own shutdown destroyed DuckDB's connections under the API pool's threads, which keep
    # their cursors ('terminate called without an active exception', exit -6: seen once, a reader stopped in
    # CI on a loaded machine), so it exits at once, as a collector does when its API outlives API_STOP_S.
    logging.shutdown()
    os._exit(0)
