"""Checks shared by the parser tests (helpers only: no tests of its own)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from collector.core.model import ParseResult


def points_as_tuples(result: ParseResult) -> list[tuple]:
    p = result.points
    assert len(p.step) == len(p.metric) == len(p.value) == len(p.wall_time), "Points columns differ in length"
    return list(zip(p.step, p.metric, p.value, p.wall_time, strict=True))


def comparable(rows: list[tuple]) -> list[tuple]:
    """Rows with NaN replaced by a marker, so that equal results compare equal."""
    return [tuple("NaN" if isinstance(x, float) and math.isnan(x) else x for x in row) for row in rows]


def feed_in_pieces(parse: Callable[..., ParseResult], data: bytes, cuts: list[int], **kwargs) -> tuple:
    """Feed `data` to `parse` the way the tailer does: the file grows to each cut in turn, and each call
    gets the bytes from the stored offset to the current end. Returns (points, bad lines, offset, lines)."""
    offset, line, rows, bad = 0, 1, [], []
    for end in [*cuts, len(data)]:
        result = parse(data[offset:end], line, **kwargs)
        assert 0 <= result.consumed <= end - offset
        rows.extend(points_as_tuples(result))
        bad.extend((b.line, b.reason) for b in result.bad)
        offset += result.consumed
        line += result.lines
        if "state" in kwargs or result.state is not None:
            kwargs["state"] = result.state
    return comparable(rows), bad, offset, line


def assert_split_anywhere_equals_one_shot(parse: Callable[..., ParseResult], data: bytes, **kwargs) -> None:
    """Cut `data` at every byte position (and at every pair of line ends): the union of the pieces' results
    must equal one call over the whole file."""
    whole = feed_in_pieces(parse, data, [], **dict(kwargs))
    assert whole[2] == len(data), "a complete file must be consumed to its end"
    for cut in range(len(data) + 1):
        assert feed_in_pieces(parse, data, [cut], **dict(kwargs)) == whole, f"differs when cut at byte {cut}"
    ends = [i + 1 for i, b in enumerate(data) if b == ord("\n")]
    for i, a in enumerate(ends):
        for b in ends[i:]:
            assert feed_in_pieces(parse, data, [max(a - 3, 0), a, b], **dict(kwargs)) == whole, (
                f"cuts {a - 3},{a},{b}"
            )


@dataclass(frozen=True)
class FuzzSample:
    """A well-formed file of one format, which `test_parsers_garbage` damages at random (each format's own
    test module declares its samples as `FUZZ = {format name: FuzzSample(...)}`).

    `data`: the bytes, or a function of a scratch folder that writes them (a framing its own library writes).
    `path`: the file's path, for a format that reads a metric's name from it. `quiet`: the format ignores
    text that is not one of its records, by design (a console log is mostly other output), so damage need
    not be reported. `counts_lines`: every consumed `\\n` is one of the parser's `lines`."""

    data: bytes | Callable[[Path], bytes]
    path: str = ""
    quiet: bool = False
    counts_lines: bool = False
