"""JSON-lines metrics: verl's file logger (`{"step": N, "data": {...}}`) and nested JSONL (`{"step": 1, "loss": {...}}`).

The one module that knows verl's record shape: the parser below, and the names the bulk reader
(`collector.ingest.bulk`) and the store's DuckDB read (`collector.store.points`) take from here.

This is the backfill hot path: a finished run can hold millions of points. Each line goes through orjson and,
when it is the plain verl shape with numeric values, straight into the columnar lists without a per-point
Python object. Everything else (bare `NaN`/`Infinity`, which orjson rejects; nested records; other step keys;
bad lines) takes the slower general path, one line at a time.
"""

from __future__ import annotations

import json
import re

import numpy as np
import orjson

from collector.core.model import BadLine, Format, ParseResult, RunInfo
from collector.formats._common import (
    STEP_KEYS,
    STEP_MAX,
    STEP_MIN,
    WALL_TIME_KEYS,
    as_step,
    as_value,
    bad_name,
    bad_text,
    complete_lines,
    flatten_numbers,
    step_problem,
    wall_time_of,
)

# verl's record: {STEP_KEY: int, METRICS_KEY: {name: number, ...}} and nothing else.
STEP_KEY = "step"
METRICS_KEY = "data"
_QUOTE, _COLON, _NEWLINE = ord('"'), ord(":"), ord("\n")
_JSON_NAME = re.compile(rb'"([^"]*)":')
# The Hugging Face Trainer's end-of-training summary (`train_runtime`, `train_loss`, `total_flos`, ...), which
# a flat history written by a callback (`{"step": 778, "train_runtime": 6406.1, ...}`) ends with: the run ended.
SUMMARY_KEY = "train_runtime"

_INT = int
_PLAIN_NUMBER = frozenset((float, int, bool))
_ONLY_FLOAT = {float}


def parse(data: bytes, first_line: int = 1, *, path: str = "", state: object = None) -> ParseResult:
    """Points from the complete lines of `data`, a JSONL metrics file read from some offset.

    Promises: only complete lines are consumed (`consumed` ends just after a `\\n`), and an unterminated last
    line that is already a whole JSON object (a file that ends without a newline); blank lines are skipped;
    a line that is not JSON, not UTF-8, not an object, or has no whole-number step is reported in `bad` with
    its 1-based line number (counted from `first_line`) and never raises. In a verl record (`"data"` holds an
    object) the metrics are the numbers under `data`, and a `null` there is a NaN point (verl writes
    non-finite values through orjson, which turns them into null); otherwise every top-level number except
    the step and wall-time fields is a metric and nulls are skipped. Nested objects are flattened with `/`.
    `NaN`, `Infinity`, `-Infinity` are kept as non-finite floats; strings (even numeric ones, "1.5") and
    lists are skipped and counted in `skipped`; booleans become 0/1. A step outside the 64-bit range, or a
    number Python will not read (an integer of 4,300+ digits), makes its line bad.
    `info["completed"]` is True when a flat record holds the HF Trainer's end-of-training summary
    (`train_runtime`): the training loop returned. `path` and `state` are unused (the common signature).
    """
    lines, consumed = complete_lines(data)
    counted = len(lines)
    if _whole_record(data[consumed:]):
        # A writer that ends its file without a newline leaves its last record unterminated. A JSON object
        # is whole only once its closing brace is written, so it is read now (a record still being written
        # is not valid JSON yet and waits). It is not counted as a line: the newline that may follow it
        # starts the next read as the blank rest of this line, so later line numbers stay right.
        lines.append(data[consumed:])
        consumed = len(data)
    # Values are type-checked once per chunk, not once per value; in the rare chunk holding a value that is
    # not a plain number (a null, a string, a nested object) the lines are read again, checking each one.
    result = _parse_lines(lines, first_line, consumed, check_values=False)
    if result is None:
        result = _parse_lines(lines, first_line, consumed, check_values=True)
    result.lines = counted
    return result


def _whole_record(rest: bytes) -> bool:
    """Whether the bytes after the last newline are one whole JSON object (the file's unterminated last line)."""
    rest = rest.strip()
    if not (rest.startswith(b"{") and rest.endswith(b"}")):
        return False
    try:
        return type(json.loads(rest)) is dict  # the stdlib parser: verl's bare NaN/Infinity included
    except (ValueError, RecursionError):
        return False


def _parse_lines(
    lines: list[bytes], first_line: int, consumed: int, check_values: bool
) -> ParseResult | None:
    """Parse complete lines; None when `check_values` is off and some value turned out not to be a plain
    number (float, int or bool), so the caller must parse again with it on."""
    result = ParseResult(consumed=consumed, lines=len(lines))
    points = result.points
    steps, metrics, values = points.step, points.metric, points.value
    loads = orjson.loads
    line_no = first_line - 1
    for raw in lines:
        line_no += 1
        # Fast path: the verl shape, exactly {"step": int, "data": {name: value, ...}}.
        try:
            record = loads(raw)
            step = record[STEP_KEY]
            fields = record[METRICS_KEY]
            if len(record) != 2 or type(step) is not _INT or type(fields) is not dict:
                raise TypeError
            if not STEP_MIN <= step <= STEP_MAX:
                raise OverflowError
            if check_values:
                for value in fields.values():
                    if type(value) not in _PLAIN_NUMBER:
                        raise TypeError
        except Exception:
            _parse_general(raw, line_no, result)
            continue
        n = len(fields)
        steps += [step] * n
        metrics += fields
        values += fields.values()
    kinds = set(map(type, values))
    if not kinds <= _PLAIN_NUMBER:
        return None
    if kinds != _ONLY_FLOAT:
        try:
            points.value = list(map(float, values))  # ints and booleans as floats, as the contract says
        except OverflowError:  # an integer beyond float range: as_value keeps its sign as an infinity
            points.value = [as_value(v) for v in values]
    # Wall times are filled lazily by the general path: pad them to the other columns' length.
    points.wall_time.extend([None] * (len(steps) - len(points.wall_time)))
    return result


def _parse_general(raw: bytes, line_no: int, result: ParseResult) -> None:
    """Add the points of one line that the fast path did not take, or a BadLine for it."""
    if not raw.strip():
        return
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        result.bad.append(BadLine(line_no, f"non-UTF-8 bytes at column {err.start + 1}", bad_text(raw)))
        return
    try:
        # The stdlib parser accepts bare NaN / Infinity / -Infinity, which verl's json.dumps writes.
        record = json.loads(text)
    except RecursionError:
        result.bad.append(BadLine(line_no, "invalid JSON: nested too deeply", bad_text(text)))
        return
    except ValueError as err:  # beyond JSONDecodeError: a number Python will not convert (4,300+ digits)
        reason = err.msg if isinstance(err, json.JSONDecodeError) else str(err)
        result.bad.append(BadLine(line_no, f"invalid JSON: {reason}", bad_text(text)))
        return
    if type(record) is not dict:
        result.bad.append(BadLine(line_no, f"not a JSON object (a {type(record).__name__})", bad_text(text)))
        return
    step_key = next((key for key in STEP_KEYS if key in record), None)
    if step_key is None:
        result.bad.append(BadLine(line_no, f"missing step (none of {', '.join(STEP_KEYS)})", bad_text(text)))
        return
    step = as_step(record[step_key])
    if step is None:
        result.bad.append(BadLine(line_no, step_problem(step_key, record[step_key]), bad_text(text)))
        return
    names: list[str] = []
    numbers: list[float] = []
    if type(record.get(METRICS_KEY)) is dict:
        # verl's file logger serializes with orjson, which writes NaN and +-Infinity as null: a null there
        # is a non-finite value the run produced, and dropping it would hide exactly what we watch for.
        flatten_numbers(record[METRICS_KEY], "", names, numbers, null_is_nan=True, skipped=result.skipped)
    else:
        flatten_numbers(record, "", names, numbers, skip=(step_key, *WALL_TIME_KEYS), skipped=result.skipped)
        if SUMMARY_KEY in record:
            result.info["completed"] = True
    if not names:
        return
    if (reason := bad_name(names)) is not None:
        result.bad.append(BadLine(line_no, reason, bad_text(text)))
        return
    points = result.points
    wall_time = wall_time_of(record)
    if wall_time is not None or points.wall_time:
        points.wall_time.extend([None] * (len(points.step) - len(points.wall_time)))
        points.wall_time.extend([wall_time] * len(names))
    points.step.extend([step] * len(names))
    points.metric.extend(names)
    points.value.extend(numbers)


def verl_names_of_line(line: bytes) -> list[str] | None:
    """The metric names of one verl line, sorted, or None when it is not a verl record with metrics."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    data = record.get(METRICS_KEY) if isinstance(record, dict) else None
    return sorted(data) if isinstance(data, dict) and data else None


def json_name_ends(raw: np.ndarray) -> np.ndarray:
    """The positions i (ascending) of every `":` in the bytes: the end of a JSON name."""
    colons = np.flatnonzero(raw[1:] == _COLON)  # a ':' at byte i + 1
    return colons[raw[colons] == _QUOTE]


def verl_values_in(name_ends: int, lines: int) -> int:
    """How many metric values `lines` complete verl records hold that have `name_ends` `":` in all: each
    record has one for the step, one for the metrics object, and one per value."""
    return name_ends - 2 * lines


def verl_quotes_are_names(quotes: int, name_ends: int) -> bool:
    """Whether complete verl lines with `quotes` `"` and `name_ends` `":` quote nothing but their names (no
    string value, which the parser skips and DuckDB would cast; an escaped quote in a name also says no)."""
    return quotes == 2 * name_ends


def verl_names_in(data: bytes) -> set[str]:
    """The metric names in complete verl lines, from every `"name":` of the first line and of each line
    whose count of them differs from the line before (another kind of record: validation, a save step's
    timing), ~1 ms a MiB. A wrong name (an escaped quote, a string value) only adds a column that stays
    empty; a name missed (one metric swapped for another) makes the bulk read's count fail, and then
    DuckDB learns them."""
    raw = np.frombuffer(data, np.uint8)
    ends = np.flatnonzero(raw == _NEWLINE)
    pairs = json_name_ends(raw)
    per_line = np.diff(np.searchsorted(pairs, ends), prepend=0)
    starts = np.concatenate(([0], ends[:-1] + 1))
    changed = np.flatnonzero(np.diff(per_line, prepend=-1))  # the first line, and each change of shape
    found = set()
    for i in changed.tolist():
        found.update(_JSON_NAME.findall(data, int(starts[i]), int(ends[i])))
    return {k.decode("utf-8", "replace") for k in found} - {STEP_KEY, METRICS_KEY}


def run_info(info: dict) -> RunInfo:
    """`completed` as the end the log shows once the file held the HF Trainer's end-of-training summary (a
    status file beside it still has the last word: a stopped run logs that summary too); otherwise nothing
    about the run's state (a verl file logger writes no end record)."""
    return RunInfo(ended="completed" if info.get("completed") else None)


FORMAT = Format(name="jsonl", parse=parse, names=("*.jsonl", "*.ndjson"), run_info=run_info)
