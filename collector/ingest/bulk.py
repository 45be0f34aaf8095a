"""The DuckDB fast path for big verl JSONL backlogs: `BulkReader`, made with a store and a scratch folder.

A file that is all complete lines is read by DuckDB in place, in one statement, while a thread counts its
lines and values; otherwise its backlog is copied in bounded pieces to a temp file, 64 MiB at a time. Every
bulk read is checked against what was counted in the bytes; when anything does not add up it returns None
and the caller reads the chunk with the Python parser (which quarantines bad lines with their numbers).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
import threading
import time

import duckdb
import numpy as np

from collector.core.runtime import pid_alive, scratch_path
from collector.formats import jsonl
from collector.ingest.fs import Files
from collector.ingest.segments import SIG_BYTES, read_range, written_at
from collector.store import points as store_points
from collector.store.damage import damage_met
from collector.store.db import SourceState, Store
from collector.store.points import BulkMismatch, NotPlainVerl

# A complete file up to DIRECT_BYTES is read by DuckDB in place; a bigger one (or the rest of a file read
# before) in BULK_BYTES pieces copied to a temp file. DuckDB stages what it reads as a wide table in memory
# (~50 MB a million lines), so these two bound the collector's peak memory whatever the file's size.
DIRECT_BYTES = 192 << 20
BULK_MIN_BYTES = 1 << 20  # a backlog below this goes to the parser: DuckDB's reader costs more than it saves
BULK_BYTES = 64 << 20
PIECE_BYTES = 4 << 20
REMOTE_FIRST_BYTES = 16 << 20
_QUOTE, _COLON, _NEWLINE = ord('"'), ord(":"), ord("\n")


@dataclasses.dataclass(slots=True)
class BulkRead:
    """What one bulk read committed: the source's new position, the points stored and the highest step."""

    source: SourceState
    points: int
    last_step: int
    more: bool  # the file has more past the new offset


class BulkReader:
    """Reads chunks of big verl JSONL backlogs into `store` with DuckDB, staging pieces in `scratch`."""

    def __init__(self, store: Store, scratch: str, bulk_bytes: int = BULK_BYTES) -> None:
        self.store = store
        self.scratch = scratch
        self.bulk_bytes = bulk_bytes
        self._keys: dict[str, list[str]] = {}  # path -> metric names seen under the records' metrics object
        self._ahead: dict[str, Ahead] = {}  # path -> its next bulk piece, being copied

    def close(self) -> None:
        """Wait for pieces being copied ahead and remove the scratch folder."""
        for path in list(self._ahead):
            self.forget(path)
        shutil.rmtree(self.scratch, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(self.scratch))  # when no other process's folder is left there

    def forget(self, path: str) -> None:
        """Drop the piece copied ahead for `path` (its next read goes another way)."""
        ahead = self._ahead.pop(path, None)
        if ahead is not None and ahead.thread is not None:
            ahead.thread.join()
            _unlink(ahead.chunk)

    def read(self, s: SourceState, st: os.stat_result, after_step: int) -> BulkRead | None:
        """Read the next chunk of `s` (a file as `st` saw it, past its offset) in its own transaction with
        the new offset. `after_step` is the run's highest stored step. None when the chunk is not plain
        verl records (nothing was stored): the caller parses it instead."""
        local = s.path.startswith("/")  # DuckDB reads a local file in place; a remote one comes in pieces
        if local and s.offset == 0 and st.st_size <= DIRECT_BYTES and ends_with_newline(s.path, st.st_size):
            # The whole file is complete lines: DuckDB reads it in place, in one statement (no copy, no
            # chunks), while a thread counts its lines and values (DuckDB releases the GIL); the commit
            # checks the counts and that the file did not change meanwhile, else the chunked path runs.
            head = read_range(s.path, 0, PIECE_BYTES)
            head = head[: head.rfind(b"\n") + 1]
            whole = _Chunk(s.path, direct=True)
            counter = threading.Thread(
                target=self._copy_complete_lines, args=(s.path, 0, st.st_size, False, whole), daemon=True
            )
            counter.start()
            try:
                done = self._commit(s, st, whole, after_step, counter=counter, head=head) if head else None
            finally:
                counter.join()
            if done is not None:
                return done
        copied = self._next_piece(s, st)
        if copied is None:
            return None
        self._copy_ahead(s, st, copied)  # the piece after this one, copied while DuckDB reads this one
        try:
            done = self._commit(s, st, copied, after_step)
        finally:
            _unlink(copied)
        if done is None:
            self.forget(s.path)
        return done

    def _next_piece(self, s: SourceState, st: os.stat_result) -> _Chunk | None:
        """The complete lines from the source's offset (up to `bulk_bytes`) in a temp file: the copy made
        ahead when it starts there in the same file, else one made now."""
        ahead = self._ahead.pop(s.path, None)
        if ahead is not None:
            ahead.thread.join()
            if ahead.start == s.offset and ahead.inode == st.st_ino and ahead.chunk is not None:
                return ahead.chunk
            _unlink(ahead.chunk)
        name = f"{s.id}-{s.offset}.jsonl"
        # A remote backlog's first piece is small: DuckDB starts on it while the next comes over the link.
        size = self.bulk_bytes if s.path.startswith("/") else min(self.bulk_bytes, REMOTE_FIRST_BYTES)
        return self._copy_complete_lines(s.path, s.offset, min(st.st_size - s.offset, size), name=name)

    def _copy_ahead(self, s: SourceState, st: os.stat_result, chunk: _Chunk) -> None:
        """Start copying the piece after `chunk` (the file as `st` saw it) in a thread: DuckDB releases the
        GIL while it reads `chunk`, and numpy's counting and the file copy do too."""
        start = s.offset + chunk.end
        if st.st_size - start < BULK_MIN_BYTES:
            return
        ahead = Ahead(start, st.st_ino)

        def copy() -> None:
            size = min(st.st_size - start, self.bulk_bytes)
            with contextlib.suppress(OSError):  # (gone meanwhile: the next read finds out and says so)
                ahead.chunk = self._copy_complete_lines(s.path, start, size, name=f"{s.id}-{start}.jsonl")

        ahead.thread = threading.Thread(target=copy, name="bulk-copy", daemon=True)
        ahead.thread.start()
        self._ahead[s.path] = ahead

    def _copy_complete_lines(
        self,
        path: str,
        start: int,
        size: int,
        copy: bool = True,
        chunk: _Chunk | None = None,
        name: str = "chunk.jsonl",
    ) -> _Chunk | None:
        """Copy the complete lines of `path[start:start+size]` to the temp file `name` in bounded pieces,
        counting lines and `":` (each verl line has one for "step", one for "data", one per value). With
        `copy=False` only count, into `chunk` (DuckDB then reads `path` itself)."""
        tmp = os.path.join(self.scratch, name)
        chunk = chunk or _Chunk(tmp if copy else path, direct=not copy)
        buf = bytearray(PIECE_BYTES)  # one buffer read into again and again: no 4 MiB allocation a piece
        with open(tmp if copy else os.devnull, "wb") as out:
            recent = b""  # the last bytes copied before this piece
            # (a remote file streams: the next pieces come over the link while this one is counted)
            for n in Files.fill(path, start, size, buf):
                if recent.endswith(b'"') and buf[0] == _COLON:
                    chunk.partial_colons += 1  # a `":` split between two pieces
                # numpy counts ~3x faster than bytes.count, and this runs beside DuckDB's two threads.
                raw = np.frombuffer(buf, np.uint8, count=n)
                pairs = jsonl.json_name_ends(raw)
                quotes = int(np.count_nonzero(raw == _QUOTE))
                last_nl = buf.rfind(b"\n", 0, n)
                if last_nl >= 0:
                    before = int(np.searchsorted(pairs, last_nl))
                    chunk.end = chunk.copied + last_nl + 1
                    chunk.lines += int(np.count_nonzero(raw == _NEWLINE))
                    chunk.colons += chunk.partial_colons + before
                    chunk.partial_colons = len(pairs) - before
                    after_nl = int(np.count_nonzero(raw[last_nl + 1 :] == _QUOTE))
                    chunk.quotes += chunk.partial_quotes + quotes - after_nl
                    chunk.partial_quotes = after_nl
                    lines_end = last_nl + 1
                    chunk.tail = (recent + bytes(buf[max(0, lines_end - SIG_BYTES) : lines_end]))[-SIG_BYTES:]
                else:
                    chunk.partial_colons += len(pairs)
                    chunk.partial_quotes += quotes
                if copy:
                    out.write(memoryview(buf)[:n])
                chunk.copied += n
                recent = (recent + bytes(buf[max(0, n - SIG_BYTES) : n]))[-SIG_BYTES:]
                del raw  # the buffer is read into again
            if copy:
                out.truncate(chunk.end)
        if chunk.end > 0:
            return chunk
        _unlink(chunk)
        return None

    def _commit(
        self,
        s: SourceState,
        st: os.stat_result,
        chunk: _Chunk,
        after: int,
        counter: threading.Thread | None = None,
        head: bytes | None = None,
    ) -> BulkRead | None:
        """Insert the chunk with DuckDB's reader in one transaction with the new offset; None (nothing
        changed) when the chunk is not plainly verl. `counter`, when given, is still counting `chunk`;
        `head`, when given, is the complete lines of the chunk's first piece (else read when needed)."""
        keys = self._keys.get(s.path)
        if keys is None:
            if head is None:
                head = read_range(chunk.path, 0, min(PIECE_BYTES, chunk.end))
                head = head[: head.rfind(b"\n") + 1]
            first = jsonl.verl_names_of_line(head.split(b"\n", 1)[0])
            if first is None:
                return None
            # Metrics logged now and then (validation) are rarely on the first line: learn the keys of the
            # first piece up front, since a miss here costs another read of the whole chunk.
            keys = sorted(set(first) | jsonl.verl_names_in(head))

        def expected() -> int:
            if counter is not None:
                counter.join()
                if chunk.end != st.st_size:
                    raise _FileChanged("the file does not end with a complete line")
            if not jsonl.verl_quotes_are_names(chunk.quotes, chunk.colons):
                # A string where a number belongs ("1.5"): DuckDB would cast it, the parser skips it and
                # says so. The parser decides what a value is, so the chunk goes to it.
                raise NotPlainVerl("a quoted value (a string) in the chunk")
            return jsonl.verl_values_in(chunk.colons, chunk.lines)

        for attempt in range(2):
            new = dataclasses.replace(s)
            try:
                with self.store.transaction() as cur:
                    count, high = store_points.bulk_ndjson(cur, new, chunk.path, after, keys, expected)
                    if chunk.direct and identity_of(s.path) != (st.st_ino, st.st_size, st.st_mtime_ns):
                        raise _FileChanged("the file changed while DuckDB read it")
                    new.offset += chunk.end
                    new.lines += chunk.lines
                    new.tail_sig = chunk.tail
                    new.size, new.mtime = st.st_size, st.st_mtime
                    new.points += count
                    self.store.save_source(cur, new)
                    if count:
                        self.store.update_run_info(
                            cur, s.run_id, last_step=high, last_point_at=written_at(st.st_mtime, time.time())
                        )
                        self.store.mark_detection_behind(cur, s.run_id, after)
                break
            except (_FileChanged, NotPlainVerl):
                return None
            except BulkMismatch:
                if attempt:
                    return None
                try:  # a metric first seen in this chunk (the first validation): learn the keys, once
                    keys = store_points.ndjson_keys(self.store.cursor(), chunk.path)
                except duckdb.Error:
                    return None
            except duckdb.Error as e:
                if damage_met(self.store.path, e, "") is not None:
                    raise  # the database's fault: the parser would meet it too (and say it less plainly)
                return None
        self._keys[s.path] = keys
        return BulkRead(new, count, max(after, high) if count else after, new.offset < st.st_size)


@dataclasses.dataclass(slots=True)
class Ahead:
    """The next bulk piece of a file, copied by a thread while DuckDB reads the current one."""

    start: int  # the offset it starts at
    inode: int
    thread: threading.Thread | None = None
    chunk: _Chunk | None = None  # set by the thread; None when no complete line was there


class _FileChanged(BulkMismatch):
    """The file moved on under a direct read: another reading of the same bytes cannot help."""


@dataclasses.dataclass(slots=True)
class _Chunk:
    """A run of complete lines copied to a temp file for DuckDB, with what was counted on the way."""

    path: str
    copied: int = 0
    end: int = 0  # bytes of complete lines
    lines: int = 0
    colons: int = 0
    partial_colons: int = 0
    quotes: int = 0  # `"` in the complete lines: two per JSON name when no value is a string
    partial_quotes: int = 0
    tail: bytes = b""
    direct: bool = False  # DuckDB reads the source file itself (the whole file is complete lines)


def _unlink(chunk: _Chunk | None) -> None:
    if chunk is not None and not chunk.direct:
        with contextlib.suppress(OSError):
            os.unlink(chunk.path)


def ends_with_newline(path: str, size: int) -> bool:
    """Whether the file's last byte (of `size`) is a newline: it holds complete lines only."""
    return size > 0 and read_range(path, size - 1, 1) == b"\n"


def identity_of(path: str) -> tuple[int, int, int] | None:
    """(inode, size, mtime in ns) of a local file, None when it is gone: unchanged means not written to."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def scratch_dir(db) -> str:
    """A scratch folder of this process beside the database (`DB.ingest/pid-N-*`). Folders of processes
    no longer alive (a collector killed mid-backfill leaves up to two pieces there) are removed first."""
    parent = scratch_path(db)
    parent.mkdir(exist_ok=True)
    for old in parent.glob("pid-*"):
        pid = old.name.split("-")[1]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"pid-{os.getpid()}-", dir=parent)
