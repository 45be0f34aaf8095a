"""CSV histories (`training_history.csv`, `validation_history.csv`, or any CSV with a step or epoch column).

The header is line 1 of the file, but the tailer reads later bytes from an offset: it keeps the header this
parser returns as its `state` and passes it back as `state=` on every later call.
"""

from __future__ import annotations

import csv
import math

from collector.core.model import BadLine, Format, ParseResult
from collector.formats._common import WALL_TIME_KEYS, as_step, bad_text, complete_lines, step_problem

# The step column, by preference (W&B exports name it `_step` or `trainer/global_step`, Megatron-style logs
# `iteration`/`iter`, DeepSpeed-style ones `opt_step` before `micro_step`); "epoch" only when none exists.
STEP_COLUMNS = (
    "step",
    "global_step",
    "trainer/global_step",
    "_step",
    "opt_step",
    "iteration",
    "iter",
    "micro_step",
)
EPOCH_COLUMN = "epoch"
_STEP_NAMES = {*STEP_COLUMNS, EPOCH_COLUMN}


def parse(data: bytes, first_line: int = 1, *, path: str = "", state: list[str] | None = None) -> ParseResult:
    """Points from the complete rows of `data`, a CSV history read from some offset.

    `state`: the header (column names) the caller kept from an earlier call; when None, the first complete
    line of `data` is read as the header (so pass None only when `data` starts at the file's beginning). The
    header in force after this call is always returned as `state` (None if no complete line was seen yet).
    Every numeric column except the step and wall-time columns is a metric named by its header. The step
    comes from the first of `STEP_COLUMNS` present, else `epoch`; in the last case the epoch (a whole number) is also
    a metric `epoch`. Empty cells and text are skipped; `nan`, `inf` are kept. A row with a different number
    of fields than the header, no step, or bad bytes is reported in `bad`. A row of names only, one of them a
    step column (wherever it is), starts a new header in force (a writer that restarted, perhaps with other
    columns). A header's bytes that are not UTF-8 are read with replacement characters. `path` is
    unused.
    """
    lines, consumed = complete_lines(data)
    result = ParseResult(consumed=consumed, lines=len(lines))
    layout = _Layout(state) if state is not None else None
    points = result.points
    line_no = first_line - 1
    for raw in lines:
        line_no += 1
        undecodable = None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            # A header's names are kept with replacement characters (a latin-1 "°C" must not lose the file);
            # a data row with bad bytes is a bad line.
            undecodable = f"non-UTF-8 bytes at column {err.start + 1}"
            text = raw.decode("utf-8", errors="replace")
        if not text.strip():
            continue
        try:
            row = next(csv.reader([text.rstrip("\r")]))
        except csv.Error as err:
            result.bad.append(BadLine(line_no, f"unreadable CSV row: {err}", bad_text(text)))
            continue
        if layout is not None and undecodable is not None and not _is_header(row):
            result.bad.append(BadLine(line_no, undecodable, bad_text(raw)))
            continue
        if layout is None or _is_header(row):
            layout = _Layout(row)
            if layout.step_index is None:
                reason = f"header has no step column (one of {', '.join((*STEP_COLUMNS, EPOCH_COLUMN))})"
                result.bad.append(BadLine(line_no, reason, bad_text(text)))
            continue
        if len(row) != len(layout.names):
            reason = f"expected {len(layout.names)} fields as in the header, got {len(row)}"
            result.bad.append(BadLine(line_no, reason, bad_text(text)))
            continue
        if layout.step_index is None:
            result.bad.append(BadLine(line_no, "no step column in the header", bad_text(text)))
            continue
        number = _number(row[layout.step_index])
        step = as_step(number) if number is not None else None
        if step is None:
            step_name = layout.names[layout.step_index]
            reason = f"{step_name} is not a whole number: {row[layout.step_index]!r}"
            if number is not None and math.isfinite(number) and number == int(number):
                reason = step_problem(step_name, number)  # whole, but beyond the 64-bit range
            result.bad.append(BadLine(line_no, reason, bad_text(text)))
            continue
        wall_time = _number(row[layout.wall_time_index]) if layout.wall_time_index is not None else None
        for index, name in layout.metric_columns:
            value = _number(row[index])
            if value is not None:
                points.add(step, name, value, wall_time)
    result.state = layout.names if layout is not None else None
    return result


class _Layout:
    """Which column is the step, the wall time, and the metrics, for one header."""

    def __init__(self, names: list[str]) -> None:
        self.names = [name.strip().lstrip("\ufeff") for name in names]
        lowered = [name.lower() for name in self.names]
        step_name = next((c for c in (*STEP_COLUMNS, EPOCH_COLUMN) if c in lowered), None)
        self.step_index = lowered.index(step_name) if step_name is not None else None
        self.step_is_epoch = step_name == EPOCH_COLUMN
        wall_name = next((c for c in WALL_TIME_KEYS if c in lowered), None)
        self.wall_time_index = lowered.index(wall_name) if wall_name is not None else None
        skip = {self.step_index, self.wall_time_index}
        self.metric_columns = [
            (i, name)
            for i, name in enumerate(self.names)
            if name and (i not in skip or self._epoch_is_step(i))
        ]

    def _epoch_is_step(self, index: int) -> bool:
        # With only an epoch column, the epoch is the step and also stays a metric.
        return self.step_is_epoch and index == self.step_index


def _is_header(row: list[str]) -> bool:
    """Whether a row is a header: names only (no cell is a number) and one of them a step column."""
    names = {cell.strip().lstrip("\ufeff").lower() for cell in row}
    return bool(names & _STEP_NAMES) and all(_number(cell) is None for cell in row)


def _number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None


def has_step_column(head: bytes) -> bool:
    """Whether a CSV's first line names a step column (one of `STEP_COLUMNS`, or `epoch`)."""
    first = head.split(b"\n", 1)[0].decode("utf-8", errors="replace").lstrip("\ufeff")
    columns = {c.strip().strip('"').lower() for c in first.split(",")}
    return bool(columns & _STEP_NAMES)


FORMAT = Format(name="csv", parse=parse, sniffed=("*.csv",), sniff=has_step_column, copy=True)


def column_roles(names: list[str]) -> tuple[int | None, int | None, list[tuple[int, str]]]:
    """For a header in force (the `state` `parse` returns): the index of the step column (None: none), of
    the wall-time column (None: none), and the (index, metric name) of every metric column, by the same
    rules `parse` reads rows with; for a reader that reads the rows another way (DuckDB's CSV reader)."""
    layout = _Layout(names)
    return layout.step_index, layout.wall_time_index, list(layout.metric_columns)
