"""The DuckDB fast path for big CSV history backlogs: `CsvBulkReader`, made with a store and a scratch folder.

The rows after the stored offset are copied to a temp file, up to `bulk_bytes`, in pieces checked on the way
(one byte translation and a few counts; numpy finds the first row that is not plain, when there is one): a row is taken only when it has the header's number of fields and holds nothing but numbers
(digits, `.`, `e`, signs, `nan`, `inf`) and empty cells. The first row that is anything else (text, a short
or long row, a quote, a blank line, a header written again or changed) ends the chunk before it; a chunk
that would start there is not read here, and the caller's CSV parser reads it and quarantines what is bad
with its line number. DuckDB's rows and non-empty cells are checked against the counts in the bytes; any
difference and nothing is stored (None: the parser reads the chunk). What counts as a number was checked
against Python's `float` (which the parser uses) over every short string of those bytes: where they differ
(`+-1`) the row is left to the parser.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time

import duckdb
import numpy as np

from collector.formats import csv_history
from collector.ingest.bulk import BULK_BYTES, PIECE_BYTES, BulkRead
from collector.ingest.fs import Files
from collector.ingest.segments import SIG_BYTES, read_range
from collector.store import csv_wide
from collector.store.db import SourceState, Store
from collector.store.points import BulkMismatch

_COMMA, _CR, _NEWLINE = ord(","), ord("\r"), ord("\n")
_PLAIN_BYTES = b"0123456789.eE+-nNaAiIfFtTyY,\r\n"  # the bytes of rows DuckDB reads as the parser would
_PLAIN = np.zeros(256, dtype=bool)
_PLAIN[np.frombuffer(_PLAIN_BYTES, np.uint8)] = True
# One translation for the checks: separators to `,`, signs to `s`, other number bytes to `x`, anything else to
# `!`. A non-empty field then starts `,x` or `,s` (or is first), and a sign pair is `ss`.
_CLASSES = bytes(
    _COMMA if b in b",\r\n" else ord("s") if b in b"+-" else ord("x") if b in _PLAIN_BYTES else ord("!")
    for b in range(256)
)
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

    def __init__(self, store: Store, scratch: str, bulk_bytes: int = BULK_BYTES) -> None:
        self.store = store
        self.scratch = scratch
        self.bulk_bytes = bulk_bytes

    def read(self, s: SourceState, st: os.stat_result, after_step: int) -> BulkRead | None:
        """Read the plain rows of `s` (a file as `st` saw it) from its offset in one transaction with the new
        offset and the header in force. `after_step` is the run's highest stored step. None when nothing was
        stored (no header yet, or the first row is not plain, or DuckDB's counts differ): the caller parses."""
        header = self._header(s)
        if header is None:
            return None
        names, start, header_lines, before = header
        step, wall, metrics = csv_history.column_roles(names)
        if step is None or len(names) < 2 or len({m for _, m in metrics}) != len(metrics):
            return None  # (a metric named twice: the parser's merge decides which value stays)
        tmp = os.path.join(self.scratch, f"{s.id}-{start}.csv")
        try:
            rows = copy_plain_rows(s.path, start, min(st.st_size - start, self.bulk_bytes), len(names), tmp)
            if rows.rows == 0:
                return None
            new = dataclasses.replace(s)
            with self.store.transaction() as cur:
                count, high = csv_wide.bulk_csv(
                    cur, new, tmp, len(names), (step, wall, metrics), after_step, rows.rows, rows.cells
                )
                new.offset = start + rows.end
                new.lines = s.lines + header_lines + rows.rows
                new.tail_sig = (before + rows.tail)[-SIG_BYTES:]
                new.parser_state = json.dumps(names)  # as the parser keeps it
                new.size, new.mtime = st.st_size, st.st_mtime
                self.store.save_source(cur, new)
                if count:
                    self.store.update_run_info(cur, s.run_id, last_step=high, last_point_at=time.time())
                    self.store.mark_detection_behind(cur, s.run_id, after_step)
        except (BulkMismatch, duckdb.Error):
            return None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
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


def copy_plain_rows(path: str, start: int, size: int, width: int, out_path: str) -> PlainRows:
    """Copy the leading plain rows of `path[start:start+size]` (complete lines of `width` fields, only
    number bytes, no `+-` pair, `\\r` only before `\\n`) to `out_path`, counting rows and non-empty fields;
    stops before the first row that is not plain."""
    found = PlainRows()
    carry = b""  # the start of a row cut by the piece's end
    with Files.open(path) as src, open(out_path, "wb") as out:
        src.seek(start)
        left = size
        while left > 0:
            piece = src.read(min(PIECE_BYTES, left))
            if not piece:
                break
            left -= len(piece)
            data = carry + piece
            raw = np.frombuffer(data, np.uint8)
            ends = np.flatnonzero(raw == _NEWLINE)
            if not len(ends):
                carry = data
                continue
            end = int(ends[-1]) + 1
            classes = data[:end].translate(_CLASSES)
            rows = len(ends) if _all_plain(data[:end], classes, len(ends), width) else 0
            if not rows:  # something in there is not plain: find the first row that is not
                rows, end = _plain_prefix(raw, ends, width)
                classes = classes[:end]
            if rows:
                out.write(memoryview(data)[:end])
                found.rows += rows
                found.cells += classes.count(b",x") + classes.count(b",s") + (classes[0] != _COMMA)
                found.end += end
                found.tail = (found.tail + data[max(0, end - SIG_BYTES) : end])[-SIG_BYTES:]
            if rows < len(ends):
                break  # a row that is not plain: the parser reads from there
            carry = data[end:]
    return found


def _all_plain(rows: bytes, classes: bytes, lines: int, width: int) -> bool:
    """Whether complete lines (`classes`: their `_CLASSES` translation) are all plain rows, checked at C
    speed (the usual case)."""
    return (
        b"!" not in classes
        and rows.count(b",") == lines * (width - 1)  # a short row and a long one: DuckDB stops at either
        and rows.count(b"\r") == rows.count(b"\r\n")
        and b"ss" not in classes
    )


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
