"""The DuckDB fast path for big verl JSONL backlogs (a mixin of `Ingestor`).

A file that is all complete lines is read by DuckDB in place, in one statement, while a thread counts its
lines and values; otherwise its backlog is copied in bounded pieces to a temp file, 64 MiB at a time. Every
bulk read is checked against what was counted in the bytes and falls back to the Python parser (which
quarantines bad lines with their numbers) when anything does not add up.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import threading
import time

import duckdb
import numpy as np
import orjson

from collector.store.db import SourceState
from collector.store.points import BulkMismatch

# A complete file up to DIRECT_BYTES is read by DuckDB in place; a bigger one (or the rest of a file read
# before) in BULK_BYTES pieces copied to a temp file. DuckDB stages what it reads as a wide table in memory
# (~50 MB a million lines), so these two bound the collector's peak memory whatever the file's size.
DIRECT_BYTES = 192 << 20
BULK_MIN_BYTES = 1 << 20  # a backlog below this goes to the parser: DuckDB's reader costs more than it saves
BULK_BYTES = 64 << 20
PIECE_BYTES = 4 << 20
SIG_BYTES = 32  # bytes before the offset remembered to notice a file rewritten in place
_QUOTE, _COLON, _NEWLINE = ord('"'), ord(":"), ord("\n")


class BulkReads:
    """The bulk half of `collector.ingest.reader.Ingestor` (uses its store, sources, offsets and callbacks)."""

    def _bulk_chunk(self, s0: SourceState) -> bool:
        """Ingest one chunk of a big verl JSONL backlog in its own transaction; True when more is waiting."""
        s = dataclasses.replace(s0)
        with self.store.transaction() as cur:
            st = self._identity(cur, s)
            if st is None or st.st_size == s.offset:
                self.sources[s.path] = s
                return False
        if s.offset == 0 and st.st_size <= DIRECT_BYTES and _ends_with_newline(s.path, st.st_size):
            # The whole file is complete lines: DuckDB reads it in place, in one statement (no copy, no
            # chunks), while a thread counts its lines and values (DuckDB releases the GIL); the commit
            # checks the counts and that the file did not change meanwhile, else the chunked path runs.
            head = _read_range(s.path, 0, PIECE_BYTES)
            head = head[: head.rfind(b"\n") + 1]
            whole = _Chunk(s.path, direct=True)
            counter = threading.Thread(
                target=self._copy_complete_lines, args=(s.path, 0, st.st_size, False, whole), daemon=True
            )
            counter.start()
            try:
                if head and self._bulk_commit(s, st, whole, counter=counter, head=head):
                    return False
            finally:
                counter.join()
        copied = self._next_piece(s, st)
        if copied is not None:
            self._copy_ahead(s, st, copied)  # the piece after this one, copied while DuckDB reads this one
            try:
                if self._bulk_commit(s, st, copied):
                    return s.offset < st.st_size
            finally:
                _unlink(copied)
            self._drop_ahead(s.path)
        # Not plain verl records (or a bad line in there): the Python parser finds and quarantines them.
        pending: set[str] = set()
        self.sources[s.path] = s
        self._read_many([s.path], pending)
        return bool(pending)

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
        return self._copy_complete_lines(
            s.path, s.offset, min(st.st_size - s.offset, self.bulk_bytes), name=name
        )

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

    def _drop_ahead(self, path: str) -> None:
        ahead = self._ahead.pop(path, None)
        if ahead is not None and ahead.thread is not None:
            ahead.thread.join()
            _unlink(ahead.chunk)

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
        tmp = os.path.join(self._tmpdir, name)
        chunk = chunk or _Chunk(tmp if copy else path, direct=not copy)
        buf = bytearray(PIECE_BYTES)  # one buffer read into again and again: no 4 MiB allocation a piece
        with open(path, "rb") as src, open(tmp if copy else os.devnull, "wb") as out:
            src.seek(start)
            left = size
            recent = b""  # the last bytes copied before this piece
            while left > 0:
                n = src.readinto(memoryview(buf)[: min(PIECE_BYTES, left)])
                if not n:
                    break
                left -= n
                if recent.endswith(b'"') and buf[0] == _COLON:
                    chunk.partial_colons += 1  # a `":` split between two pieces
                # numpy counts ~3x faster than bytes.count, and this runs beside DuckDB's two threads.
                raw = np.frombuffer(buf, np.uint8, count=n)
                pairs = _name_ends(raw)
                last_nl = buf.rfind(b"\n", 0, n)
                if last_nl >= 0:
                    before = int(np.searchsorted(pairs, last_nl))
                    chunk.end = chunk.copied + last_nl + 1
                    chunk.lines += int(np.count_nonzero(raw == _NEWLINE))
                    chunk.colons += chunk.partial_colons + before
                    chunk.partial_colons = len(pairs) - before
                    lines_end = last_nl + 1
                    chunk.tail = (recent + bytes(buf[max(0, lines_end - SIG_BYTES) : lines_end]))[-SIG_BYTES:]
                else:
                    chunk.partial_colons += len(pairs)
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

    def _bulk_commit(
        self,
        s: SourceState,
        st: os.stat_result,
        chunk: _Chunk,
        counter: threading.Thread | None = None,
        head: bytes | None = None,
    ) -> bool:
        """Insert the chunk with DuckDB's reader in one transaction with the new offset; False (nothing
        changed) when the chunk is not plainly verl. `counter`, when given, is still counting `chunk`;
        `head`, when given, is the complete lines of the chunk's first piece (else read when needed)."""
        after = self.max_step.get(s.run_id, -(2**62))
        keys = self._keys.get(s.path)
        if keys is None:
            if head is None:
                head = _read_range(chunk.path, 0, min(PIECE_BYTES, chunk.end))
                head = head[: head.rfind(b"\n") + 1]
            first = _keys_of(head.split(b"\n", 1)[0])
            if first is None:
                return False
            # Metrics logged now and then (validation) are rarely on the first line: learn the keys of the
            # first piece up front, since a miss here costs another read of the whole chunk.
            keys = sorted(set(first) | _keys_in(head))

        def expected() -> int:
            if counter is not None:
                counter.join()
                if chunk.end != st.st_size:
                    raise _FileChanged("the file does not end with a complete line")
            return chunk.colons - 2 * chunk.lines

        for attempt in range(2):
            new = dataclasses.replace(s)
            try:
                with self.store.transaction() as cur:
                    count, high = self.store.bulk_ndjson(cur, new, chunk.path, after, keys, expected)
                    if chunk.direct and _identity_of(s.path) != (st.st_ino, st.st_size, st.st_mtime_ns):
                        raise _FileChanged("the file changed while DuckDB read it")
                    new.offset += chunk.end
                    new.lines += chunk.lines
                    new.tail_sig = chunk.tail
                    new.size, new.mtime = st.st_size, st.st_mtime
                    self.store.save_source(cur, new)
                    if count:
                        self.store.update_run_info(cur, s.run_id, last_step=high, last_point_at=time.time())
                        self.store.mark_detection_behind(cur, s.run_id, after)
                break
            except _FileChanged:
                return False
            except BulkMismatch:
                if attempt:
                    return False
                try:  # a metric first seen in this chunk (the first validation): learn the keys, once
                    keys = self.store.ndjson_keys(chunk.path)
                except duckdb.Error:
                    return False
            except duckdb.Error:
                return False
        self._keys[s.path] = keys
        s.offset, s.lines, s.tail_sig, s.size, s.mtime = (
            new.offset,
            new.lines,
            new.tail_sig,
            new.size,
            new.mtime,
        )
        self.sources[s.path] = s
        if count:
            self.max_step[s.run_id] = max(after, high)
            self._notify(self.on_backlog, s.run_id)
        return True


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
    tail: bytes = b""
    direct: bool = False  # DuckDB reads the source file itself (the whole file is complete lines)


def _unlink(chunk: _Chunk | None) -> None:
    if chunk is not None and not chunk.direct:
        with contextlib.suppress(OSError):
            os.unlink(chunk.path)


def _ends_with_newline(path: str, size: int) -> bool:
    return size > 0 and _read_range(path, size - 1, 1) == b"\n"


def _identity_of(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _keys_of(line: bytes) -> list[str] | None:
    """The metric names of one verl line, or None when it is not one."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    data = record.get("data") if isinstance(record, dict) else None
    return sorted(data) if isinstance(data, dict) and data else None


_JSON_KEY = re.compile(rb'"([^"]*)":')


def _name_ends(raw: np.ndarray) -> np.ndarray:
    """The positions i (ascending) of every `":` in the bytes: the end of a JSON name."""
    colons = np.flatnonzero(raw[1:] == _COLON)  # a ':' at byte i + 1
    return colons[raw[colons] == _QUOTE]


def _keys_in(data: bytes) -> set[str]:
    """The metric names under "data" in lines of verl records, from every `"name":` of the first line and
    of each line whose count of them differs from the line before (another kind of record: validation, a
    save step's timing), ~1 ms a MiB. A wrong name (an escaped quote, a string value) only adds a column
    that stays empty; a name missed (one metric swapped for another) makes the bulk read's count fail,
    and then DuckDB learns them."""
    raw = np.frombuffer(data, np.uint8)
    ends = np.flatnonzero(raw == _NEWLINE)
    pairs = _name_ends(raw)
    per_line = np.diff(np.searchsorted(pairs, ends), prepend=0)
    starts = np.concatenate(([0], ends[:-1] + 1))
    changed = np.flatnonzero(np.diff(per_line, prepend=-1))  # the first line, and each change of shape
    found = set()
    for i in changed.tolist():
        found.update(_JSON_KEY.findall(data, int(starts[i]), int(ends[i])))
    return {k.decode("utf-8", "replace") for k in found} - {"step", "data"}


def _read_range(path: str, start: int, size: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(size)
