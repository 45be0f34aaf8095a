"""Small pieces every text parser shares: line splitting, step and value rules, flattening, bad-line text.

All pure: bytes and Python objects in, Python objects out.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime

from collector.core.model import BadLine, ParseResult

# Field names that carry the step, in the order they win when a record has more than one.
STEP_KEYS = ("step", "global_step", "_step", "iteration")
# Field names that carry seconds since the epoch for a record (never stored as metrics).
WALL_TIME_KEYS = ("wall_time", "_timestamp", "timestamp")

BAD_TEXT_LIMIT = 300
# How a skipped (non-numeric) value is counted, by its JSON kind.
KIND_OF_VALUE = {str: "a string", list: "a list", type(None): "a null"}
# Steps are stored as 64-bit integers: a step outside this range is a bad line, never an overflow later.
STEP_MIN, STEP_MAX = -(2**63), 2**63 - 1


def complete_lines(data: bytes) -> tuple[list[bytes], int]:
    """Split `data` into its complete lines (without the `\\n`) and the byte count they cover.

    A partial last line (no `\\n` yet) is left out, so the caller hands it back next time.
    """
    end = data.rfind(b"\n") + 1
    if end == 0:
        return [], 0
    lines = data[:end].split(b"\n")
    lines.pop()  # the empty piece after the last "\n"
    return lines, end


def bad_text(raw: bytes | str) -> str:
    """The offending text for a BadLine: decoded leniently and cut to a few hundred characters."""
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    text = text.rstrip("\r\n")
    if len(text) > BAD_TEXT_LIMIT:
        return text[:BAD_TEXT_LIMIT] + "..."
    return text


def as_step(value: object) -> int | None:
    """The step a field value stands for, or None when it is not a whole number.

    Integral floats (`5.0`) count, since some writers store every number as a float; booleans do not.
    A whole number outside the 64-bit range (`STEP_MIN`..`STEP_MAX`) is None too (see `step_problem`).
    """
    t = type(value)
    if t is int:
        return value if STEP_MIN <= value <= STEP_MAX else None  # type: ignore[return-value,operator]
    if t is float and math.isfinite(value) and value == int(value):  # type: ignore[arg-type]
        step = int(value)  # type: ignore[arg-type]
        return step if STEP_MIN <= step <= STEP_MAX else None
    return None


def step_problem(name: str, value: object) -> str:
    """The reason `value` (which `as_step` refused) is not a step: a whole number beyond the 64-bit range,
    or not a whole number at all."""
    t = type(value)
    whole = t is int or (t is float and math.isfinite(value) and value == int(value))  # type: ignore[arg-type]
    if whole:
        return f"{name} {short_repr(value)} is beyond the 64-bit step range"
    return f"{name} is not a whole number: {short_repr(value)}"


def short_repr(value: object) -> str:
    """`repr(value)` cut to a few dozen characters (an integer of thousands of digits stays readable)."""
    if type(value) is int and value.bit_length() > 256:  # type: ignore[union-attr]
        return f"<an integer of about {int(value.bit_length() * 0.30103)} digits>"  # type: ignore[union-attr]
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "..."


def as_value(value: object) -> float | None:
    """A metric value as a float, or None when the value is not a number (strings, lists, null).

    Booleans become 0/1; non-finite floats are kept as they are.
    """
    t = type(value)
    if t is float:
        return value  # type: ignore[return-value]
    if t is int or t is bool:
        try:
            return float(value)  # type: ignore[arg-type]
        except OverflowError:  # an integer beyond float range: keep its sign, lose its size
            return math.inf if value > 0 else -math.inf  # type: ignore[operator]
    return None


def flatten_numbers(
    obj: dict,
    prefix: str,
    metrics: list[str],
    values: list[float],
    skip: tuple = (),
    null_is_nan: bool = False,
    skipped: dict[str, int] | None = None,
) -> None:
    """Append every number in `obj` (nested dicts joined with `/`) to `metrics` and `values`.

    Keys in `skip` are left out at the top level only. With `null_is_nan`, a JSON null is a NaN point
    (for writers known to write non-finite numbers as null) instead of being skipped. A value that is not a
    number (a string, even "1.5"; a list; a null) is left out and counted in `skipped` by its kind.
    """
    for key, value in obj.items():
        if key in skip:
            continue
        name = prefix + key if prefix else str(key)
        if type(value) is dict:
            flatten_numbers(value, name + "/", metrics, values, null_is_nan=null_is_nan, skipped=skipped)
            continue
        number = math.nan if value is None and null_is_nan else as_value(value)
        if number is not None:
            metrics.append(name)
            values.append(number)
        elif skipped is not None:
            kind = KIND_OF_VALUE.get(type(value), "a value of another kind")
            skipped[kind] = skipped.get(kind, 0) + 1


def bad_name(names: list[str]) -> str | None:
    """The reason a metric name cannot be stored (a JSON escape of half a UTF-16 pair, `"\\ud800"`, is not
    text), or None when every name can."""
    for name in names:
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            return f"metric name {name.encode('utf-8', 'backslashreplace').decode()[:80]!r} is not valid text"
    return None


def wall_time_of(record: dict) -> float | None:
    """Seconds since the epoch named by a record's wall-time field: a number, or an ISO 8601 string."""
    for key in WALL_TIME_KEYS:
        value = record.get(key)
        if value is not None and type(value) in (int, float):
            return float(value)
        if type(value) is str:
            return iso_seconds(value)
    return None


def iso_seconds(text: str) -> float | None:
    """Seconds since the epoch of an ISO 8601 time (`2026-11-24T07:00:00Z`, with or without an offset; one
    without is read as UTC), or None when `text` is not one."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def parse_json_document(data: bytes, what: str) -> ParseResult:
    """A whole JSON document whose top level must be an object: the object goes to `info`, no points.

    Invalid JSON (perhaps caught half-written), non-UTF-8 bytes or a top level
    that is not an object give one BadLine and `consumed=0`, so the caller reads the file again after its
    next change. `what` names the file kind in the reason.
    """
    result = ParseResult()
    try:
        document = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        result.bad.append(BadLine(line, f"{what}: non-UTF-8 bytes at byte {err.start}", bad_text(data[:200])))
        return result
    except json.JSONDecodeError as err:
        reason = f"{what}: invalid JSON (incomplete write?): {err.msg} at column {err.colno}"
        result.bad.append(BadLine(err.lineno, reason, bad_text(data[:200])))
        return result
    except ValueError as err:  # a number Python will not convert (an integer of thousands of digits)
        result.bad.append(BadLine(1, f"{what}: unreadable JSON: {err}", bad_text(data[:200])))
        return result
    except RecursionError:
        result.bad.append(BadLine(1, f"{what}: invalid JSON: nested too deeply", bad_text(data[:200])))
        return result
    if type(document) is not dict:
        reason = f"{what}: top level is a {type(document).__name__}, not an object"
        result.bad.append(BadLine(1, reason, bad_text(data[:200])))
        return result
    result.info = document
    result.consumed = len(data)
    result.lines = data.count(b"\n")
    return result


def total_steps_of(info: dict) -> int | None:
    """A run's planned length as a whole-file document states it (`total_steps`, else `max_steps`)."""
    total = info.get("total_steps", info.get("max_steps"))
    return total if isinstance(total, int) and not isinstance(total, bool) else None
