"""JSON-lines metrics: verl's file logger (`{"step": N, "data": {...}}`) and nested JSONL (`{"step": 1, "loss": {...}}`).

This is the backfill hot path: a finished run can hold millions of points. Each line goes through orjson and,
when it is the plain verl shape with numeric values, straight into the columnar lists without a per-point
Python object. Everything else (bare `NaN`/`Infinity`, which orjson rejects; nested records; other step keys;
bad lines) takes the slower general path, one line at a time.
"""

from __future__ import annotations

import json

import orjson

from collector.core.model import BadLine, ParseResult
from collector.formats._common import (
    STEP_KEYS,
    WALL_TIME_KEYS,
    as_step,
    bad_text,
    complete_lines,
    flatten_numbers,
    wall_time_of,
)

_INT = int
_PLAIN_NUMBER = frozenset((float, int, bool))
_ONLY_FLOAT = {float}


def parse(data: bytes, first_line: int = 1) -> ParseResult:
    """Points from the complete lines of `data`, a JSONL metrics file read from some offset.

    Promises: only complete lines are consumed (`consumed` ends just after a `\\n`); blank lines are skipped;
    a line that is not JSON, not UTF-8, not an object, or has no whole-number step is reported in `bad` with
    its 1-based line number (counted from `first_line`) and never raises. In a verl record (`"data"` holds an
    object) the metrics are the numbers under `data`, and a `null` there is a NaN point (verl writes
    non-finite values through orjson, which turns them into null); otherwise every top-level number except
    the step and wall-time fields is a metric and nulls are skipped. Nested objects are flattened with `/`.
    `NaN`, `Infinity`, `-Infinity` are kept as non-finite floats; strings are skipped; booleans become 0/1.
    """
    lines, consumed = complete_lines(data)
    # Values are type-checked once per chunk, not once per value; in the rare chunk holding a value that is
    # not a plain number (a null, a string, a nested object) the lines are read again, checking each one.
    result = _parse_lines(lines, first_line, consumed, check_values=False)
    if result is None:
        result = _parse_lines(lines, first_line, consumed, check_values=True)
    return result


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
            step = record["step"]
            fields = record["data"]
            if len(record) != 2 or type(step) is not _INT or type(fields) is not dict:
                raise TypeError
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
        points.value = list(map(float, values))  # ints and booleans as floats, as the contract says
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
    except (json.JSONDecodeError, RecursionError) as err:
        reason = err.msg if isinstance(err, json.JSONDecodeError) else "nested too deeply"
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
        reason = f"{step_key} is not a whole number: {record[step_key]!r}"
        result.bad.append(BadLine(line_no, reason, bad_text(text)))
        return
    names: list[str] = []
    numbers: list[float] = []
    if type(record.get("data")) is dict:
        # verl's file logger serializes with orjson, which writes NaN and +-Infinity as null: a null there
        # is a non-finite value the run produced, and dropping it would hide exactly what we watch for.
        flatten_numbers(record["data"], "", names, numbers, null_is_nan=True)
    else:
        flatten_numbers(record, "", names, numbers, skip=(step_key, *WALL_TIME_KEYS))
    if not names:
        return
    points = result.points
    wall_time = wall_time_of(record)
    if wall_time is not None or points.wall_time:
        points.wall_time.extend([None] * (len(points.step) - len(points.wall_time)))
        points.wall_time.extend([wall_time] * len(names))
    points.step.extend([step] * len(names))
    points.metric.extend(names)
    points.value.extend(numbers)
