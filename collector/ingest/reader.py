"""From files to stored points: offsets, segments, batching, quarantine.

`Ingestor.ingest(paths)` reads what is new in each file (from its stored offset, in bounded chunks), parses it
with the format's parser, and commits the points together with the new offset in one transaction: a crash at
any moment loses and repeats nothing. A file that shrank (truncated), was replaced (new inode: rotation) or was
rewritten in place starts a new segment from offset 0; what was ingested from the old life stays.

Large backlogs of verl JSONL and CSV histories are read by DuckDB's own readers (`ingest.bulk`, `bulk_csv`); a
chunk they cannot read as plain records goes through the Python parser so its bad lines are quarantined with
their numbers. What a format is (whole document or lines, its state, its run facts) is its `Format`'s word.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from collector import formats
from collector.core.model import BEFORE_ALL_STEPS, Format, Points, RunInfo
from collector.formats import discover
from collector.ingest import segments
from collector.ingest.attribution import Moved, clear_left_behind, leave_run, place_source
from collector.ingest.bulk import BULK_BYTES, BULK_MIN_BYTES, BulkReader, scratch_dir
from collector.ingest.bulk_csv import CsvBulkReader
from collector.ingest.chunk import Cycle, read_chunk
from collector.ingest.failures import Failures
from collector.ingest.fs import Files, path_of, root_path
from collector.ingest.segments import Event
from collector.store import points as store_points
from collector.store import read as store_read
from collector.store.damage import damage_met
from collector.store.db import SourceState, Store

log = logging.getLogger("collector.ingest.reader")

CHUNK_BYTES = 8 << 20  # one Python read of a file; bounds memory while a backlog is parsed in Python
TXN_BYTES = 16 << 20  # bytes one shared transaction takes in before it commits

PointsCallback = Callable[[str, Points], None]


class Ingestor:
    """Reads the sources of the runs under `roots` into `store`. Not thread-safe: one ingest thread."""

    def __init__(
        self,
        store: Store,
        roots: Iterable[str | Path],
        *,
        on_points: PointsCallback | None = None,
        on_run_info: Callable[[str, RunInfo], None] | None = None,
        on_backlog: Callable[[str], None] | None = None,
        on_run_removed: Callable[[str], None] | None = None,
        chunk_bytes: int = CHUNK_BYTES,
        bulk_bytes: int = BULK_BYTES,
        txn_bytes: int = TXN_BYTES,
        bulk: bool = True,
    ) -> None:
        self.store = store
        self.roots = [root_path(r) for r in roots]  # local folders, or `ssh://` ones (a RemotePath)
        self.on_points = on_points
        self.on_run_info = on_run_info
        # Points that DuckDB read in bulk never become Python objects here: detection is told the run has
        # a stored backlog and reads it from the store at its own pace.
        self.on_backlog = on_backlog
        self.on_run_removed = on_run_removed  # a run found to be another's files, gone from the store
        self.chunk_bytes = chunk_bytes
        self._registered: dict[str, tuple] = {}  # run id -> what was last registered for it
        self.txn_bytes = txn_bytes
        self.bulk = bulk
        self.sources: dict[str, SourceState] = store.sources()
        self.roles: dict[str, str] = {}  # path -> "metrics" | "meta" | "ignored"
        self.run_dirs: dict[str, Path] = {}
        self.run_files: dict[str, Path] = {}  # runs that are one file by itself (no folder of their own)
        self.hf_own_state: dict[str, Path | None] = {}  # runs of reused HF output folders -> own state
        self.contexts: dict[str, dict | None] = {}  # path -> what its neighbours say (`Source.context`)
        self.max_step: dict[str, int] = store.max_steps()
        self.events: list[Event] = []  # recent notable events, newest last (bounded)
        self.failures = Failures(store)  # files whose reads fail as a whole: retried, kept in the store
        self.bulk_reader = BulkReader(store, scratch_dir(store.path), bulk_bytes)
        # format -> DuckDB's reader of its big backlogs (the JSONL reader owns the scratch folder)
        csv = CsvBulkReader(store, self.bulk_reader.scratch, bulk_bytes)
        self.bulk_readers = {"jsonl": self.bulk_reader, "csv": csv}
        self._formats: dict[str, Format | None] = {}
        self._cleared = False  # the points earlier collectors left in runs not theirs are taken out

    def close(self) -> None:
        self.bulk_reader.close()

    # ---- discovery --------------------------------------------------------------------------------

    def discover(self) -> list[str]:
        """Register every run and source under the roots; returns the paths of all readable sources."""
        runs = discover.find_runs(self.roots, unlisted := [])  # (+ the folders that could not be listed)
        with self.store.transaction():  # one commit for all new runs, not one per run
            for run in runs:
                self._register(run)
            self.failures.note_unlisted(unlisted)
        if not self._cleared:  # once a process: what an earlier collector left (`clear_left_behind`)
            self._cleared = True
            for moved in clear_left_behind(self.store):
                self._moved(
                    moved,
                    f"is read into run {moved.to}: its points left run {moved.run_id} (left there before)",
                )
        return [p for p, role in self.roles.items() if role != "ignored"]

    def note_path(self, path: str | Path) -> str | None:
        """A file changed: register its run if new. Returns the path to read, or None when no run reads it."""
        key = str(path)
        if key in self.roles:
            return key if self.roles[key] != "ignored" else None
        try:
            run = discover.run_for_path(path_of(str(path)), self.roots)
        except OSError:
            return None
        if run is None:
            return None
        self._register(run)
        role = self.roles.get(key)
        return key if role and role != "ignored" else None

    def _register(self, run: discover.Run) -> None:
        known = (
            str(run.root),
            str(run.path),
            run.format,
            tuple((str(x.path), x.format, x.role, str(x.context)) for x in run.sources),
            tuple((str(path), reason) for path, reason in run.skipped),
        )
        if self._registered.get(run.id) == known:
            return  # the periodic rescan sees the same run: nothing to write
        self._registered[run.id] = known
        self.run_dirs[run.id] = run.dir
        if run.file is not None:
            self.run_files[run.id] = run.file
        else:
            self.run_files.pop(run.id, None)
        self.store.upsert_run(run.id, str(run.root), str(run.path), run.format)
        self.store.set_skipped_files(run.id, [(str(p), why, segments.size_of(p)) for p, why in run.skipped])
        self.hf_own_state.pop(run.id, None)
        if run.reused:  # one of the runs of a reused HF output folder: which checkpoints are its own
            self.hf_own_state[run.id] = run.own_state
        for source in run.sources:
            key = str(source.path)
            self.roles[key] = source.role
            self.contexts[key] = source.context
            known = self.sources.get(key)
            if source.role != "ignored":  # (same file, new understanding of it: see `attribution`)
                self.sources[key], moved = place_source(self.store, known, run.id, key, source.format)
                if moved is not None:
                    self._moved(
                        moved, f"belongs to run {run.id}: its points left run {moved.run_id}, read again"
                    )
            elif known is not None:  # read before the run's better file came (into this run, or its own)
                del self.sources[key]
                why = (
                    f"is a copy run {run.id} does not read: its points left run {known.run_id}, read no more"
                )
                self._moved(leave_run(self.store, known), why)

    def _moved(self, moved: Moved, why: str) -> None:
        """A file's points left `moved.run_id`: say so, and forget that run if it was removed with them."""
        if moved.removed is None:
            self.max_step[moved.run_id] = moved.last_step if moved.last_step is not None else BEFORE_ALL_STEPS
        else:
            why += f"; run {moved.run_id} had no other file and no point left: removed"
            why += f" with its {moved.removed} alert(s)" if moved.removed else ""
            self.max_step.pop(moved.run_id, None)
            self._registered.pop(moved.run_id, None)
            self.run_dirs.pop(moved.run_id, None)
            self.run_files.pop(moved.run_id, None)
            self.hf_own_state.pop(moved.run_id, None)
            self.store.alerts_changed(moved.run_id)  # (caches of its alerts read again: none are left)
            if self.on_run_removed is not None:
                self.on_run_removed(moved.run_id)
        self._event(moved.path, why)

    # ---- reading ----------------------------------------------------------------------------------

    def ingest(self, paths: Iterable[str]) -> set[str]:
        """Read what is new in `paths` (registered sources); returns the paths that still have more to read.

        Small reads share one transaction; a big verl JSONL backlog is read chunk by chunk, each chunk its
        own transaction. A file whose read fails is named in an event with the reason, left as it was, and
        tried again with backoff (`failures`); the other files and runs go on.
        """
        pending: set[str] = set()
        shared: list[str] = []
        now = time.monotonic()
        busy: set[str] = set()  # runs with a source that this call will not read to its end
        ordered = self._in_precedence_order(paths)
        for path in ordered:  # a name holding another file: first the old one's rest, under its new name
            s = self.sources.get(path)
            if s and not self._whole(s) and not self.failures.waiting(path, now) and self.changed(s):
                self.moved(path, segments.renamed_to(s))
        Files.prefetch(segments.remote_starts(ordered, self.sources, self._whole))  # a round trip a host
        for path in ordered:
            s = self.sources.get(path)
            if s is None or self.failures.waiting(path, now) or not self.changed(s):
                continue
            if s.run_id in busy:
                pending.add(path)  # a later-ranked file of the run waits until the earlier one is read
                continue
            if segments.backlog(s) > self.chunk_bytes and not self._whole(s):
                busy.add(s.run_id)
            if (
                self.bulk
                and s.format in self.bulk_readers
                and not segments.inside_line(s)
                and segments.backlog(s) >= BULK_MIN_BYTES
            ):
                if self._guarded(lambda s=s: self._bulk_chunk(s), [path]):
                    pending.add(path)
            else:
                self.bulk_reader.forget(path)  # (a piece copied ahead that the parser reads instead)
                shared.append(path)
        budget_paths: list[str] = []
        used = 0
        for path in shared:
            budget_paths.append(path)
            used += min(segments.backlog(self.sources[path]), self.chunk_bytes)
            if used >= self.txn_bytes:
                pending |= self._shared_txn(budget_paths)
                budget_paths, used = [], 0
        if budget_paths:
            pending |= self._shared_txn(budget_paths)
        return pending

    def _in_precedence_order(self, paths: Iterable[str]) -> list[str]:
        """`paths` in the order their values should be written: by run, the lowest-precedence format first
        (see `formats.MODULES`), and within a format the least recently modified file first, so that when
        files of a run log the same (metric, step) the later-written (or better) value is the one kept."""

        def key(path: str) -> tuple:
            s = self.sources.get(path)
            if s is None:
                return ("", 0, 0.0, path)
            return (s.run_id, -formats.rank(s.format), segments.mtime_of(path), path)

        return sorted(dict.fromkeys(paths), key=key)

    def ingest_all(self, paths: Iterable[str] | None = None) -> None:
        """Read every source (or `paths`) to its current end."""
        pending = set(self.discover() if paths is None else paths)
        while pending:
            pending = self.ingest(sorted(pending))

    def changed(self, s: SourceState) -> bool:
        """Whether the file differs from what was ingested (cheap: one stat)."""
        fmt = self._format(s.format)
        return segments.changed(s, fmt is not None and fmt.whole_document)

    def moved(self, src: str, dest: str | None) -> None:
        """A source was renamed (rotation: `metrics.jsonl` -> `metrics.jsonl.1`): read what is left of its old
        life from the new name first, so the lines written just before the rotation are not lost."""
        s = self.sources.get(src)
        if s is None or dest is None or self._whole(s):
            return
        try:
            st = Files.stat(dest)
        except OSError:
            return
        known = self.sources.get(dest)  # a rotated name is a source of its own (`metrics.jsonl.1`)
        if (st.st_ino, st.st_dev) != (s.inode, s.device) or (known is not None and known.offset > 0):
            return
        self.sources[dest] = dataclasses.replace(s, path=dest)
        try:
            pending = {dest}
            while pending:
                pending = self.ingest(pending)
        finally:
            caught_up = self.sources.pop(dest)
            self.sources[src] = dataclasses.replace(caught_up, path=src)
            if known is not None:  # the renamed file goes on from where its old life stopped, never from 0
                self.sources[dest] = dataclasses.replace(caught_up, id=known.id, path=dest)
                with self.store.transaction() as cur:
                    self.store.save_source(cur, self.sources[dest])
        if (read := caught_up.offset - s.offset) > 0:
            self._event(src, f"was renamed to {dest}: its last {read} bytes were read there first")

    def _bulk_chunk(self, s0: SourceState) -> bool:
        """Ingest one chunk of a big verl JSONL or CSV backlog in its own transaction; True when more waits."""
        s = dataclasses.replace(s0)
        with self.store.transaction() as cur:
            st = self._identity(cur, s)
            if st is None or st.st_size == s.offset:
                self.sources[s.path] = s
                return False
        done = self.bulk_readers[s.format].read(s, st, self.max_step.get(s.run_id, BEFORE_ALL_STEPS))
        if done is None:
            # Not plain records or rows (a bad line there): the Python parser finds and quarantines them.
            pending: set[str] = set()
            self.sources[s.path] = s
            self._read_many([s.path], pending)
            return bool(pending)
        self.sources[s.path] = done.source
        if done.points:
            self.max_step[s.run_id] = max(self.max_step.get(s.run_id, done.last_step), done.last_step)
            self._notify(self.on_backlog, s.run_id)
        return done.more

    def _shared_txn(self, paths: list[str]) -> set[str]:
        """One transaction for many small reads; on failure, each path alone so one bad file stays alone."""
        pending: set[str] = set()
        if self._guarded(lambda: self._read_many(paths, pending), paths, quiet=True):
            return pending
        pending.clear()
        for path in paths:
            self._guarded(lambda path=path: self._read_many([path], pending), [path])
        return pending

    def _guarded(self, work: Callable[[], bool | None], paths: list[str], quiet: bool = False) -> bool:
        """Run `work` (reads of `paths` in one transaction); any failure rolls back to the sources as they
        were. Unless `quiet` (a shared transaction, whose paths are then tried one by one), a failure marks
        the one path failing, with a retry after a backoff; a success clears the mark."""
        # Sources are updated on copies and only put back after a commit, so a rollback leaves them right.
        before = {p: self.sources[p] for p in paths}
        try:
            result = work()
        except Exception as e:  # anything at all: one file must never stop the cycle or another run
            # (a commit or a scratch copy that failed for a full disk: /api/health says it)
            disk_full = self.store.disk.failed(e, paths[0])
            for p, s in before.items():
                self.sources[p] = s
            if damage_met(self.store.path, e, "") is not None:
                raise  # the database's fault, not the file's: the command or the daemon stops, saying so
            if not quiet:
                self._failed(paths[0], f"{type(e).__name__}: {e}", disk_full)
            return False
        for path in paths:
            self.store.disk.stored(path)
        self.failures.succeeded(paths)
        return True if quiet else result is not False

    def _failed(self, path: str, reason: str, disk_full: bool = False) -> None:
        run = getattr(self.sources.get(path), "run_id", None)
        failing = self.failures.failed(path, reason, run, soon=disk_full)
        self._event(
            path,
            f"could not be ingested ({reason}); nothing of it was stored this time, the other files go on; "
            f"failure {failing.attempts} in a row, tried again in {failing.retry_at - time.monotonic():.0f} s",
        )

    def _read_many(self, paths: list[str], pending: set[str]) -> None:
        """One transaction for the sources' new lines; plain appends of all sources go in as one insert
        (a live cycle over a hundred runs costs a handful of statements, not a hundred times that)."""
        new_states: dict[str, SourceState] = {}
        cycle = Cycle()
        with self.store.transaction() as cur:
            for path in paths:
                new_states[path] = s = dataclasses.replace(self.sources[path])
                if self._read_one(cur, s, cycle):
                    pending.add(path)
            store_points.add_points_many(cur, cycle.plain)
            self.store.save_sources(cur, cycle.saves)
            self.store.set_runs_progress(cur, cycle.last_steps, cycle.written_at)
        self.sources.update(new_states)
        self._after_commit(cycle)

    def _after_commit(self, cycle: Cycle) -> None:
        """Tell detection what the commit added; a failure there is logged and never undoes the ingest.

        A run's settings go first: the file that brings points may also bring the settings they are judged
        with (a trainer_state.json's max_steps); its status and checkpoints follow the points."""
        # the config as stored: every file's part merged (run.json and trainer_state.json alike), so the live
        # path judges with what a restart reads back
        for run_id in dict.fromkeys(
            r for r, facts in cycle.infos if facts.config is not None or facts.config_part
        ):
            merged = store_read.run_config(self.store, run_id)
            if merged is not None:
                self._notify(self.on_run_info, run_id, RunInfo(config=merged))
        for run_id, pts in cycle.fresh.items():
            if pts:
                self.max_step[run_id] = max(self.max_step.get(run_id, pts.step[0]), max(pts.step))
                self._notify(self.on_points, run_id, pts)
        for run_id, facts in cycle.infos:
            rest = dataclasses.replace(facts, config=None)  # the config went first
            if rest != RunInfo():
                self._notify(self.on_run_info, run_id, rest)

    def _notify(self, callback: Callable | None, run_id: str, *args: object) -> None:
        if callback is None:
            return
        try:
            callback(run_id, *args)
        except Exception:
            log.exception(
                "run %s: detection failed on new points; the points are stored, ingest goes on", run_id
            )

    def _read_one(self, cur, s: SourceState, cycle: Cycle) -> bool:
        """Read one chunk of one source into the open transaction; returns True when more is waiting."""
        st = self._identity(cur, s)
        fmt = self._format(s.format)
        if st is None or fmt is None:
            return False
        # Points of this run already read in this transaction count as stored (one value per step).
        after = max(
            self.max_step.get(s.run_id, BEFORE_ALL_STEPS), cycle.last_steps.get(s.run_id, BEFORE_ALL_STEPS)
        )
        context = self.contexts.get(s.path)
        return read_chunk(cur, self.store, fmt, s, st, cycle, after, self.chunk_bytes, self._event, context)

    def _identity(self, cur, s: SourceState) -> os.stat_result | None:
        """Stat the file and start a new segment when it is no longer the file the offset belongs to."""
        return segments.identity(self.store, cur, s, self._whole(s), self._event)

    def _format(self, name: str) -> Format | None:
        if name not in self._formats:
            try:
                self._formats[name] = formats.get(name)
            except (ImportError, KeyError) as e:
                self._formats[name] = None
                log.warning("no parser for format %r (%s): its files are registered but not read", name, e)
        return self._formats[name]

    def _whole(self, s: SourceState) -> bool:
        fmt = self._format(s.format)
        return fmt is not None and fmt.whole_document

    def _event(self, path: str, message: str) -> None:
        log.warning("%s: %s", path, message)
        self.events.append(Event(path, message))
        del self.events[:-200]
