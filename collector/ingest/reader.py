"""From files to stored points: offsets, segments, batching, quarantine.

`Ingestor.ingest(paths)` reads what is new in each file (from its stored offset, in bounded chunks), parses it
with the format's parser, and commits the points together with the new offset in one transaction: a crash at
any moment loses and repeats nothing. A file that shrank (truncated), was replaced (new inode: rotation) or was
rewritten in place starts a new segment from offset 0; what was ingested from the old life stays.

Large backlogs of verl JSONL are read by DuckDB's own JSON reader (several times faster than Python); a chunk
that it cannot read as plain verl records goes through the Python parser so its bad lines are quarantined
with their line numbers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

import duckdb

from collector import formats as parsers
from collector.core.model import ParseResult, Points
from collector.core.runtime import pid_alive, scratch_path
from collector.formats import discover
from collector.ingest.bulk import BULK_BYTES, BULK_MIN_BYTES, SIG_BYTES, Ahead, BulkReads, _read_range
from collector.store.db import SourceState, Store

log = logging.getLogger("collector.ingest.reader")

CHUNK_BYTES = 8 << 20  # one Python read of a file; bounds memory while a backlog is parsed in Python
TXN_BYTES = 16 << 20  # bytes one shared transaction takes in before it commits
MAX_LINE_BYTES = 64 << 20  # a "line" longer than this is quarantined instead of buffered forever
# Formats whose parser reads the whole document each time it changes.
WHOLE_FILE_FORMATS = {"hf_trainer_state", "status", "run_config", "checkpoint_marker"}

PointsCallback = Callable[[str, Points], None]


@dataclasses.dataclass(slots=True)
class Event:
    """Something the ingest did that a person may want to read (file, line, what was done)."""

    path: str
    message: str


class Ingestor(BulkReads):
    """Reads the sources of the runs under `roots` into `store`. Not thread-safe: one ingest thread."""

    def __init__(
        self,
        store: Store,
        roots: Iterable[str | Path],
        *,
        on_points: PointsCallback | None = None,
        on_run_info: Callable[[str, str, dict], None] | None = None,
        on_backlog: Callable[[str], None] | None = None,
        chunk_bytes: int = CHUNK_BYTES,
        bulk_bytes: int = BULK_BYTES,
        txn_bytes: int = TXN_BYTES,
        bulk: bool = True,
    ) -> None:
        self.store = store
        self.roots = [Path(r).resolve() for r in roots]
        self.on_points = on_points
        self.on_run_info = on_run_info
        # Points that DuckDB read in bulk never become Python objects here: detection is told the run has
        # a stored backlog and reads it from the store at its own pace.
        self.on_backlog = on_backlog
        self.chunk_bytes = chunk_bytes
        self.bulk_bytes = bulk_bytes
        self._keys: dict[str, list[str]] = {}  # verl JSONL path -> metric names seen under "data"
        self._registered: dict[str, tuple] = {}  # run id -> what was last registered for it
        self._ahead: dict[str, Ahead] = {}  # verl JSONL path -> its next bulk piece, being copied
        self.txn_bytes = txn_bytes
        self.bulk = bulk
        self.sources: dict[str, SourceState] = store.sources()
        self.roles: dict[str, str] = {}  # path -> "metrics" | "meta" | "ignored"
        self.run_dirs: dict[str, Path] = {}
        self.max_step: dict[str, int] = store.max_steps()
        self.events: list[Event] = []  # recent notable events, newest last (bounded)
        self._tmpdir = _scratch_dir(store.path)
        self._parsers: dict[str, Callable[..., ParseResult] | None] = {}

    def close(self) -> None:
        for path in list(self._ahead):
            self._drop_ahead(path)
        shutil.rmtree(self._tmpdir, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(self._tmpdir))  # when no other process's folder is left there

    # ---- discovery --------------------------------------------------------------------------------

    def discover(self) -> list[str]:
        """Register every run and source under the roots; returns the paths of all readable sources."""
        runs = discover.find_runs(self.roots)
        with self.store.transaction():  # one commit for all new runs, not one per run
            for run in runs:
                self._register(run)
        return [p for p, role in self.roles.items() if role != "ignored"]

    def note_path(self, path: str | Path) -> str | None:
        """A file changed: register its run if new. Returns the path to read, or None when no run reads it."""
        key = str(path)
        if key in self.roles:
            return key if self.roles[key] != "ignored" else None
        try:
            run = discover.run_for_path(Path(path), self.roots)
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
            tuple((str(x.path), x.format, x.role) for x in run.sources),
        )
        if self._registered.get(run.id) == known:
            return  # the periodic rescan sees the same run: nothing to write
        self._registered[run.id] = known
        self.run_dirs[run.id] = run.dir
        self.store.upsert_run(run.id, str(run.root), str(run.path), run.format)
        for source in run.sources:
            key = str(source.path)
            self.roles[key] = source.role
            if source.role == "ignored":
                continue
            known = self.sources.get(key)
            if known is None:
                self.sources[key] = self.store.add_source(run.id, key, source.format)
            elif known.run_id != run.id or known.format != source.format:
                # Same file, new understanding of it (a run id prefixed after a collision): keep the position.
                fresh = self.store.add_source(run.id, key, source.format)
                self.sources[key] = dataclasses.replace(fresh, **_position(known))

    # ---- reading ----------------------------------------------------------------------------------

    def ingest(self, paths: Iterable[str]) -> set[str]:
        """Read what is new in `paths` (registered sources); returns the paths that still have more to read.

        Small reads share one transaction; a big verl JSONL backlog is read chunk by chunk, each chunk its
        own transaction. A file that fails is logged with the reason and skipped; the others go on.
        """
        pending: set[str] = set()
        shared: list[str] = []
        for path in dict.fromkeys(paths):
            s = self.sources.get(path)
            if s is None or not self.changed(s):
                continue
            if self.bulk and s.format == "jsonl" and self._backlog(s) >= BULK_MIN_BYTES:
                if self._guarded(lambda s=s: self._bulk_chunk(s), [path]):
                    pending.add(path)
            else:
                self._drop_ahead(path)  # (a piece copied ahead that the parser reads instead)
                shared.append(path)
        budget_paths: list[str] = []
        used = 0
        for path in shared:
            budget_paths.append(path)
            used += min(self._backlog(self.sources[path]), self.chunk_bytes)
            if used >= self.txn_bytes:
                pending |= self._shared_txn(budget_paths)
                budget_paths, used = [], 0
        if budget_paths:
            pending |= self._shared_txn(budget_paths)
        return pending

    def ingest_all(self, paths: Iterable[str] | None = None) -> None:
        """Read every source (or `paths`) to its current end."""
        pending = set(self.discover() if paths is None else paths)
        while pending:
            pending = self.ingest(sorted(pending))

    def changed(self, s: SourceState) -> bool:
        """Whether the file differs from what was ingested (cheap: one stat)."""
        try:
            st = os.stat(s.path)
        except OSError:
            return s.state != "deleted"
        if s.state == "deleted" or (st.st_ino, st.st_dev) != (s.inode, s.device):
            return True
        if s.format in WHOLE_FILE_FORMATS:
            return (st.st_size, st.st_mtime) != (s.size, s.mtime)
        return st.st_size != s.offset or st.st_mtime != s.mtime

    def moved(self, src: str, dest: str) -> None:
        """A source was renamed (rotation: `metrics.jsonl` -> `metrics.jsonl.1`): read what is left of its old
        life from the new name first, so the lines written just before the rotation are not lost."""
        s = self.sources.get(src)
        if s is None or s.format in WHOLE_FILE_FORMATS:
            return
        try:
            st = os.stat(dest)
        except OSError:
            return
        if (st.st_ino, st.st_dev) != (s.inode, s.device) or dest in self.sources:
            return
        self.sources[dest] = dataclasses.replace(s, path=dest)
        try:
            pending = {dest}
            while pending:
                pending = self.ingest(pending)
        finally:
            caught_up = self.sources.pop(dest)
            self.sources[src] = dataclasses.replace(caught_up, path=src)

    def _backlog(self, s: SourceState) -> int:
        try:
            st = os.stat(s.path)
        except OSError:
            return 0
        if st.st_ino != s.inode or st.st_size < s.offset:
            return st.st_size
        return st.st_size - s.offset

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
        # Sources are updated on copies and only put back after a commit, so a rollback leaves them right.
        before = {p: self.sources[p] for p in paths}
        try:
            result = work()
        except (duckdb.Error, OSError, ValueError, MemoryError) as e:
            for p, s in before.items():
                self.sources[p] = s
            if not quiet:
                self._event(paths[0], f"could not be ingested ({type(e).__name__}: {e}); skipped, will retry")
            return False
        return result is not False if not quiet else True

    def _read_many(self, paths: list[str], pending: set[str]) -> None:
        """One transaction for the sources' new lines; plain appends of all sources go in as one insert
        (a live cycle over a hundred runs costs a handful of statements, not a hundred times that)."""
        fresh: dict[str, Points] = {}
        new_states: dict[str, SourceState] = {}
        infos: list[tuple[str, str, dict]] = []
        cycle = _Cycle()
        with self.store.transaction() as cur:
            for path in paths:
                s = dataclasses.replace(self.sources[path])
                more = self._read_one(cur, s, fresh, infos, cycle)
                new_states[path] = s
                if more:
                    pending.add(path)
            self.store.add_points_many(cur, cycle.plain)
            self.store.save_sources(cur, cycle.saves)
            self.store.set_runs_progress(cur, cycle.last_steps)
        self.sources.update(new_states)
        self._after_commit(fresh, infos)

    def _after_commit(self, fresh: dict[str, Points], infos: list[tuple[str, str, dict]]) -> None:
        """Tell detection what the commit added; a failure there is logged and never undoes the ingest."""
        for run_id, pts in fresh.items():
            if pts:
                self.max_step[run_id] = max(self.max_step.get(run_id, pts.step[0]), max(pts.step))
                self._notify(self.on_points, run_id, pts)
        for run_id, fmt, info in infos:
            self._notify(self.on_run_info, run_id, fmt, info)

    def _notify(self, callback: Callable | None, run_id: str, *args: object) -> None:
        if callback is None:
            return
        try:
            callback(run_id, *args)
        except Exception:
            log.exception(
                "run %s: detection failed on new points; the points are stored, ingest goes on", run_id
            )

    def _read_one(self, cur, s: SourceState, fresh: dict[str, Points], infos: list, cycle: _Cycle) -> bool:
        """Read one chunk of one source into the open transaction; returns True when more is waiting."""
        st = self._identity(cur, s)
        if st is None:
            return False
        whole = s.format in WHOLE_FILE_FORMATS
        if whole:
            if (st.st_size, st.st_mtime) == (s.size, s.mtime) and s.offset == st.st_size:
                return False
            start, want = 0, st.st_size
        else:
            if st.st_size == s.offset:
                return False
            start, want = s.offset, min(st.st_size - s.offset, self.chunk_bytes)
        data = _read_range(s.path, start, want)
        result = self._parse(s, data, 1 if whole else s.lines + 1)
        if result is None:
            return False
        if not whole and result.consumed == 0 and len(data) >= want and st.st_size - start > want:
            # One line longer than a chunk: read more of it, up to a limit, then quarantine it.
            data = _read_range(s.path, start, min(st.st_size - start, MAX_LINE_BYTES))
            result = self._parse(s, data, s.lines + 1)
            if result is not None and result.consumed == 0 and len(data) >= MAX_LINE_BYTES:
                end = data.find(b"\n")
                self._skip_long_line(cur, s, data, end)
                return True
        if result is None:
            return False
        run = s.run_id
        points = result.points
        overlap = (
            whole
            or not points
            or min(points.step) <= self.max_step.get(run, -(2**62))
            # A resumed run that appended to its file repeats steps within one read: merge them too.
            or len(set(zip(points.metric, points.step, strict=True))) != len(points)
        )
        if overlap:
            self.store.add_points(cur, s, result.points, may_overlap=True)
        else:
            cycle.plain.append((s, result.points))
        self._quarantine(cur, s, result)
        if whole:
            s.offset, s.lines = st.st_size, result.lines
        else:
            s.offset += result.consumed
            s.lines += result.lines
            s.tail_sig = (
                data[max(0, result.consumed - SIG_BYTES) : result.consumed] if result.consumed else s.tail_sig
            )
        s.size, s.mtime = st.st_size, st.st_mtime
        cycle.saves.append(s)
        if result.points:
            cycle.last_steps[run] = max(result.points.step)
            fresh.setdefault(run, Points()).extend(result.points)
        if result.info:
            infos.append((run, s.format, result.info))
            self._store_info(cur, run, s.format, result.info)
        return not whole and s.offset < st.st_size and result.consumed > 0

    def _identity(self, cur, s: SourceState) -> os.stat_result | None:
        """Stat the file and start a new segment when it is no longer the file the offset belongs to."""
        try:
            st = os.stat(s.path)
        except FileNotFoundError:
            if s.state != "deleted":
                s.state = "deleted"
                self.store.save_source(cur, s)
                self._event(s.path, "was deleted; what was ingested from it stays")
            return None
        reason = None
        if s.format in WHOLE_FILE_FORMATS:
            # Replaced atomically on every update (a new inode each time): just read it again.
            s.inode, s.device, s.state = st.st_ino, st.st_dev, "active"
            return st
        if s.state == "deleted":
            reason = "appeared again after being deleted"
        elif s.inode and (st.st_ino, st.st_dev) != (s.inode, s.device):
            reason = "was replaced by a new file (rotation)"
        elif st.st_size < s.offset:
            reason = f"shrank below the ingested offset {s.offset} (truncated)"
        elif s.offset and s.tail_sig and s.format not in WHOLE_FILE_FORMATS:
            before = _read_range(s.path, s.offset - len(s.tail_sig), len(s.tail_sig))
            if before != s.tail_sig:
                reason = "was rewritten in place"
        if reason:
            had = s.offset > 0 or s.state == "deleted"
            s.offset, s.lines, s.tail_sig, s.state, s.parser_state = 0, 0, b"", "active", None
            s.size = s.mtime = 0
            if had:
                s.segment += 1
                self._event(
                    s.path,
                    f"{reason}: reading it again from the start as segment {s.segment}; "
                    "earlier points stay, and steps written again replace them",
                )
        s.inode, s.device = st.st_ino, st.st_dev
        return st

    def _parse(self, s: SourceState, data: bytes, first_line: int) -> ParseResult | None:
        parse = self._parser(s.format)
        if parse is None:
            return None
        if s.format != "csv":
            return parse(data, first_line)
        # A CSV's header is line 1; reads from a later offset need it back (kept with the source).
        header = json.loads(s.parser_state) if s.parser_state and s.offset else None
        result = parse(data, first_line, header=header)
        if result.info.get("header") is not None:
            s.parser_state = json.dumps(result.info["header"])
        result.info = {}
        return result

    def _parser(self, fmt: str) -> Callable[..., ParseResult] | None:
        if fmt not in self._parsers:
            try:
                self._parsers[fmt] = parsers.parser_for(fmt)
            except (ImportError, KeyError) as e:
                self._parsers[fmt] = None
                log.warning("no parser for format %r (%s): its files are registered but not read", fmt, e)
        return self._parsers[fmt]

    def _quarantine(self, cur, s: SourceState, result: ParseResult) -> None:
        if not result.bad:
            return
        self.store.quarantine(cur, s, result.bad)
        first = result.bad[0]
        more = f" (and {len(result.bad) - 1} more bad lines)" if len(result.bad) > 1 else ""
        self._event(s.path, f"line {first.line}: {first.reason}; line quarantined, the rest ingested{more}")

    def _skip_long_line(self, cur, s: SourceState, data: bytes, end: int) -> None:
        from collector.core.model import BadLine

        skip = end + 1 if end >= 0 else len(data)
        bad = [
            BadLine(
                s.lines + 1, f"line longer than {MAX_LINE_BYTES} bytes", data[:200].decode("utf-8", "replace")
            )
        ]
        self.store.quarantine(cur, s, bad)
        s.offset += skip
        s.lines += 1 if end >= 0 else 0
        s.tail_sig = data[max(0, skip - SIG_BYTES) : skip]
        self.store.save_source(cur, s)
        self._event(s.path, f"line {s.lines}: longer than {MAX_LINE_BYTES} bytes; quarantined")

    def _store_info(self, cur, run: str, fmt: str, info: dict) -> None:
        status = info.get("status", info.get("state")) if fmt == "status" else None
        total = info.get("total_steps", info.get("max_steps"))
        self.store.update_run_info(
            cur,
            run,
            status=status if isinstance(status, str) else None,
            total_steps=total if isinstance(total, int) and not isinstance(total, bool) else None,
            config=json.dumps(info, default=str) if fmt in ("run_config", "hf_trainer_state") else None,
            status_info=json.dumps(info, default=str) if fmt == "status" else None,
        )

    def _event(self, path: str, message: str) -> None:
        log.warning("%s: %s", path, message)
        self.events.append(Event(path, message))
        del self.events[:-200]


@dataclasses.dataclass(slots=True)
class _Cycle:
    """What one shared transaction collects to write in a few statements at its end."""

    plain: list[tuple[SourceState, Points]] = dataclasses.field(default_factory=list)
    saves: list[SourceState] = dataclasses.field(default_factory=list)
    last_steps: dict[str, int] = dataclasses.field(default_factory=dict)


def _position(s: SourceState) -> dict:
    return {
        k: getattr(s, k)
        for k in ("inode", "device", "size", "mtime", "offset", "lines", "segment", "state", "tail_sig")
    }


def _scratch_dir(db: Path) -> str:
    """A scratch folder of this process beside the database (`DB.ingest/pid-N-*`). Folders of processes
    no longer alive (a collector killed mid-backfill leaves up to two pieces there) are removed first."""
    parent = scratch_path(db)
    parent.mkdir(exist_ok=True)
    for old in parent.glob("pid-*"):
        pid = old.name.split("-")[1]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"pid-{os.getpid()}-", dir=parent)
