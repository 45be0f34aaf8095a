"""The DuckDB fast path for big CSV history backlogs: `CsvBulkReader`, made with a store and a scratch folder.

A whole file of complete lines (up to `DIRECT_BYTES`, read from its start) is read by DuckDB in place, in one
statement, while a thread checks and counts its rows in the bytes (DuckDB releases the GIL): nothing is copied.
The rest of a file read before, or a file that is too big, is copied to a temp file in pieces of up to
`bulk_bytes`, checked on the way. Either way the check is the same (one byte translation and a few counts;
numpy finds the first row that is not plain, when there is one): a row is taken only when it has the header's
number of fields and holds nothing but numbers (digits, `.`, `e`, signs, `nan`, `inf`) and empty cells. The
first row that is anything else (text, a short or long row, a quote, a blank line, a header written again or
changed) ends the chunk before it; a direct read that meets one is rolled back and the file goes the copied
way, which stops before that row, and the caller's CSV parser reads from there and quarantines what is bad with
its line number. DuckDB's rows and non-empty cells are checked against the counts in the bytes; any difference
and nothing is stored (None: the parser reads the chunk). What counts as a number was checked against Python's
`float` (which the parser uses) over every short string of those bytes: where they differ (`+-1`) the row is
left to the parser.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import threading
import time
from collections.abc import Callable

import duckdb
import numpy as np

from collector.formats import csv_history
from collector.ingest.bulk import (
    BULK_BYTES,
    DIRECT_BYTES,
    PIECE_BYTES,
    BulkRead,
    ends_with_newline,
    identity_of,
)
from collector.ingest.fs import Files
from collector.ingest.segments import SIG_BYTES, read_range, written_at
from collector.store import csv_wide
from collector.store.db import SourceState, Store
from collector.store.points import BulkMismatch

_COMMA, _CR, _NEWLINE, _PLUS, _MINUS = ord(","), ord("\r"), ord("\n"), ord("+"), ord("-")
_PLAIN_BYTES = b"0123456789.eE+-nNaAiIfFtTyY,\r\n"  # the bytes of rows DuckDB reads as the parser would
_PLAIN = np.zeros(256, dtype=bool)
_PLAIN[np.frombuffer(_PLAIN_BYTES, np.uint8)] = True
_SIGN = np.zeros(256, dtype=bool)
_SIGN[[ord("+"), ord("-")]] = True


@dataclasses.dataclass(slots=True)
class PlainRows:
    """The plain rows copied for DuckDB: bytes of complete rows, rows, non-empty fields."""

    end: int = 0
    rows: int = 0
    cells: int = 0
    tail: bytes = b""  # the last bytes copied (as they were read: what the next read checks is unchanged)


class CsvBulkReader:
    """Reads chunks of big CSV history backlogs into `store` with DuckDB, staging them in `scratch`."""

    def __init__(
        self, store: Store, scratch: str, bulk_bytes: int = BULK_BYTES, direct_bytes: int = DIRECT_BYTES
    ) -> None:
        self.store = store
        self.scratch = scratch
        self.bulk_bytes = bulk_bytes
        self.direct_bytes = direct_bytes

    def read(self, s: SourceState, st: os.stat_result, after_step: int) -> BulkRead | None:
        """Read the plain rows of `s` (a file as `st` saw it) from its offset in one transaction with the new
        offset and the header in force. `after_step` is the run's highest stored step. None when nothing was
        stored (no header yet, or the first row is not plain, or DuckDB's counts differ): the caller parses."""
        header = self._header(s)
        if header is None:
            return None
        names, start, header_lines, before = header
        roles = csv_history.column_roles(names)
        step, _, metrics = roles
        if step is None or len(names) < 2 or len({m for _, m in metrics}) != len(metrics):
            return None  # (a metric named twice: the parser's merge decides which value stays)
        local = s.path.startswith("/")  # DuckDB reads a local file in place; a remote one comes in pieces
        if (
            local
            and s.offset == 0
            and st.st_size <= self.direct_bytes
            and ends_with_newline(s.path, st.st_size)
        ):
            done = self._direct(s, st, (names, start, header_lines, before), roles, after_step)
            if done is not None:
                return done
        tmp = os.path.join(self.scratch, f"{s.id}-{start}.csv")
        try:
            size = min(st.st_size - start, self.bulk_bytes)
            rows = plain_rows(s.path, start, size, len(names), tmp)
            if rows.rows == 0:
                return None
            header = (names, start, header_lines, before)
            return self._commit(s, st, tmp, 0, header, roles, after_step, lambda: rows)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def _direct(
        self, s: SourceState, st: os.stat_result, header: tuple, roles: tuple, after_step: int
    ) -> BulkRead | None:
        """The whole file read by DuckDB in place (past its header line) while a thread checks and counts its
        rows; None (nothing stored) when a row is not plain or the file changed meanwhile."""
        names, start, header_lines, _ = header
        if header_lines != 1:
            return None
        counted = PlainRows()

        def count() -> None:
            with contextlib.suppress(
                OSError
            ):  # (gone meanwhile: the count falls short, the copied way says so)
                plain_rows(s.path, start, st.st_size - start, len(names), None, counted)

        counter = threading.Thread(target=count, name="csv-count", daemon=True)
        counter.start()

        def all_rows() -> PlainRows:
            counter.join()
            if start + counted.end != st.st_size:  # a row that is not plain: the copied way stops before it
                raise _NotAllPlain(f"plain rows end at byte {start + counted.end} of {st.st_size}")
            return counted

        try:
            return self._commit(s, st, s.path, header_lines, header, roles, after_step, all_rows)
        finally:
            counter.join()

    def _commit(
        self,
        s: SourceState,
        st: os.stat_result,
        path: str,
        skip: int,
        header: tuple[list[str], int, int, bytes],
        roles: tuple,
        after_step: int,
        counted: Callable[[], PlainRows],
    ) -> BulkRead | None:
        """Insert the rows of `path` (past its first `skip` lines: a direct read of the source) in one
        transaction with the new offset; `counted()` gives what was counted in the bytes (it may wait for a
        counting thread). None when nothing was stored."""
        names, start, header_lines, before = header
        new = dataclasses.replace(s)
        direct = skip > 0
        found = PlainRows()

        def cells() -> tuple[int, int]:
            nonlocal found
            found = counted()
            return found.rows, found.cells

        try:
            with self.store.transaction() as cur:
                count, high = csv_wide.bulk_csv(cur, new, path, len(names), roles, after_step, cells, skip)
                if direct and identity_of(s.path) != (st.st_ino, st.st_size, st.st_mtime_ns):
                    raise BulkMismatch("the file changed while DuckDB read it")
                new.offset = start + found.end
                new.lines = s.lines + header_lines + found.rows
                new.tail_sig = (before + found.tail)[-SIG_BYTES:]
                new.parser_state = json.dumps(names)  # as the parser keeps it
                new.size, new.mtime = st.st_size, st.st_mtime
                new.points = s.points + count
                self.store.save_source(cur, new)
                if count:
                    self.store.update_run_info(
                        cur, s.run_id, last_step=high, last_point_at=written_at(st.st_mtime, time.time())
                    )
                    self.store.mark_detection_behind(cur, s.run_id, after_step)
        except (BulkMismatch, duckdb.Error):
            return None
        return BulkRead(new, count, max(after_step, high) if count else after_step, new.offset < st.st_size)

    def _header(self, s: SourceState) -> tuple[list[str], int, int, bytes] | None:
        """(The header in force, where the rows start, header lines there, the bytes before that): the
        stored state past offset 0, else line 1 of the file read by the CSV parser itself."""
        if s.offset:
            return (json.loads(s.parser_state), s.offset, 0, s.tail_sig) if s.parser_state else None
        head = read_range(s.path, 0, PIECE_BYTES)
        end = head.find(b"\n") + 1
        if end == 0:
            return None
        parsed = csv_history.parse(head[:end], 1)
        if parsed.bad or not parsed.state:
            return None  # (no step column, a blank first line: the parser says so)
        return parsed.state, end, 1, head[:end]


class _NotAllPlain(BulkMismatch):
    """A direct read's file holds a row that is not plain: the copied way reads up to it."""


def plain_rows(
    path: str, start: int, size: int, width: int, out_path: str | None, found: PlainRows | None = None
) -> PlainRows:
    """Count the leading plain rows of `path[start:start+size]` (complete lines of `width` fields, only
    number bytes, no `+-` pair, `\\r` only before `\\n`) and their non-empty fields, copying them to
    `out_path` unless it is None (into `found` when given); stops before the first row that is not plain."""
    found = found if found is not None else PlainRows()
    carry = b""  # the start of a row cut by the piece's end
    with Files.open(path) as src, open(out_path or os.devnull, "wb") as out:
        src.seek(start)
        left = size
        while left > 0:
            piece = src.read(min(PIECE_BYTES, left))
            if not piece:
                break
            left -= len(piece)
            data = carry + piece
            end = data.rfind(b"\n") + 1
            if not end:
                carry = data
                continue
            raw = np.frombuffer(data, np.uint8, count=end)
            lines = int(np.count_nonzero(raw == _NEWLINE))
            rows, cells = lines, _plain_cells(data, raw, lines, width)
            if cells is None:  # something in there is not plain: find the first row that is not
                rows, end = _plain_prefix(raw, np.flatnonzero(raw == _NEWLINE), width)
                cells = _plain_cells(data, raw[:end], rows, width) if rows else 0
            if rows:
                if out_path is not None:
                    out.write(memoryview(data)[:end])
                found.rows += rows
                found.cells += cells
                found.end += end
                found.tail = (found.tail + data[max(0, end - SIG_BYTES) : end])[-SIG_BYTES:]
            if rows < lines:
                break  # a row that is not plain: the parser reads from there
            carry = data[end:]
    return found


def _plain_cells(data: bytes, raw: np.ndarray, lines: int, width: int) -> int | None:
    """The non-empty fields of `raw` (complete lines, the start of `data`) when they are all plain rows, else
    None; a few passes at C speed, most of them numpy's (SIMD, and the GIL released: this runs beside
    DuckDB's reader)."""
    rows = data[: len(raw)]
    if rows.translate(None, _PLAIN_BYTES):
        return None  # a byte that is not a number's
    comma = raw == _COMMA
    if np.count_nonzero(comma) != lines * (width - 1):
        return None  # a short or long row (a short row and a long one: DuckDB stops at either)
    cr = 0
    if b"\r" in rows:
        cr = int(np.count_nonzero(raw == _CR))
        if rows.count(b"\r\n") != cr:
            return None  # a lone carriage return
    sign = raw == _PLUS
    sign |= raw == _MINUS
    if np.count_nonzero(sign[1:] & sign[:-1]):
        return None  # `+-1`: DuckDB reads -1, Python's float refuses it
    # Each row has `width` fields; a field is empty where a separator follows a separator (or starts the
    # bytes), except the `\n` of a `\r\n`.
    sep = comma
    sep |= raw == _NEWLINE
    if cr:
        sep |= raw == _CR
    return lines * width - (int(sep[0]) + int(np.count_nonzero(sep[1:] & sep[:-1])) - cr)


def _plain_prefix(raw: np.ndarray, ends: np.ndarray, width: int) -> tuple[int, int]:
    """How many of the complete lines of `raw` (ending at `ends`) are plain rows before the first that is
    not, and the bytes they cover."""
    bad = ~_PLAIN[raw]
    sign = _SIGN[raw]
    bad[1:] |= sign[1:] & sign[:-1]
    cr = np.flatnonzero(raw == _CR)
    if len(cr):
        after = cr + 1
        lone = after >= len(raw)
        lone[~lone] = raw[after[~lone]] != _NEWLINE
        bad[cr[lone]] = True
    first_bad = np.flatnonzero(bad[: ends[-1] + 1])
    limit = int(np.searchsorted(ends, first_bad[0])) if len(first_bad) else len(ends)
    commas = np.searchsorted(np.flatnonzero(raw == _COMMA), ends[:limit])
    per_row = np.diff(commas, prepend=0)
    ragged = np.flatnonzero(per_row != width - 1)
    rows = int(ragged[0]) if len(ragged) else limit
    return rows, (int(ends[rows - 1]) + 1 if rows else 0)
