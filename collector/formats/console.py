"""verl console logs: `step:N - key:value - key:value` lines among any other output of a training job.

Lines without such a record (model loading, warnings, progress bars) are ignored, not bad: a console log is
mostly other text.
"""

from __future__ import annotations

import re

from collector.core.model import BadLine, Format, ParseResult
from collector.formats._common import bad_text, complete_lines

# A record somewhere in a file's head: what makes a `.txt` file a console log.
_HEAD_RECORD = re.compile(rb"step:\s*\d+\s+-\s+[^\s:]+:")
# Colors and cursor moves (ESC [ ... letter) that terminals, Ray and rich put around text.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# "step:12 - " at the start of the line or after a separator (prefixes like "(TaskRunner pid=1) " are common).
_RECORD = re.compile(r"(?:^|(?<=[\s\]\)|>:]))step:\s*(\d+)\s+-\s+(.*)$")
_ITEM_SEPARATOR = re.compile(r"\s+-\s+")
# A numpy or torch scalar as Python prints it: np.float32(1.5), tensor(2., device='cuda:0').
_WRAPPED = re.compile(r"^[A-Za-z_][\w.]*\(([^(),]+)(?:,.*)?\)$")


def parse(data: bytes, first_line: int = 1, *, path: str = "", state: object = None) -> ParseResult:
    """Points from the `step:N - key:value - ...` records among the complete lines of `data`.

    Promises: only complete lines are consumed; ANSI color codes are removed first; a carriage return
    splits a line into the pieces a terminal would show (progress bars), each read on its own; values in
    e-notation, `nan`, `inf`, `-inf` are read as floats; items whose value is not a number are skipped.
    A line that holds `step:` but is not UTF-8 is reported in `bad`; other undecodable lines are ignored
    like any non-record output. `path` and `state` are unused (the common signature).
    """
    lines, consumed = complete_lines(data)
    result = ParseResult(consumed=consumed, lines=len(lines))
    points = result.points
    line_no = first_line - 1
    for raw in lines:
        line_no += 1
        if b"step:" not in raw:
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            result.bad.append(BadLine(line_no, f"non-UTF-8 bytes at column {err.start + 1}", bad_text(raw)))
            continue
        if "\x1b" in text:
            text = _ANSI.sub("", text)
        for piece in text.split("\r"):
            match = _RECORD.search(piece.rstrip())
            if match is None:
                continue
            step = int(match.group(1))
            for item in _ITEM_SEPARATOR.split(match.group(2)):
                name, sep, raw_value = item.partition(":")
                name = name.strip()
                if not sep or not name:
                    continue
                value = _number(raw_value)
                if value is not None:
                    points.add(step, name, value)
    return result


def _number(text: str) -> float | None:
    """A printed number: `1e-05`, `nan`, `-inf`, or a numpy/torch scalar's repr (`np.float32(1.5)`,
    `tensor(2.)`), which verl prints for values it did not convert to Python floats."""
    try:
        return float(text)
    except ValueError:
        pass
    match = _WRAPPED.match(text.strip())
    if match is None:
        return None
    try:
        return float(match.group(1))
    except ValueError:
        return None


def looks_like_console(head: bytes) -> bool:
    """Whether a file's first bytes hold a `step:N - name:` record."""
    return _HEAD_RECORD.search(head) is not None


FORMAT = Format(
    name="console",
    parse=parse,
    names=("*.log", "*.out"),
    sniffed=("*.txt",),
    sniff=looks_like_console,
    copy=True,
)
