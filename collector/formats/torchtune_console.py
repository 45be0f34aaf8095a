"""torchtune's console output (`tune run ... > train.log`): with `metric_logger` set to torchtune's
StdoutLogger, the `Step N | name:value ...` records of its DiskLogger file are printed among the rest of a
recipe's output (the resolved config, `INFO:torchtune...` lines, memory stats, tqdm's `1|12|Loss: 2.26` bars).

Lines without a record are ignored, not bad: a console log is mostly other text. A record is read as in the
DiskLogger's file (`torchtune_log`), so its values, its damage and its line numbers are told the same way.
"""

from __future__ import annotations

import re

from collector.core.model import BadLine, Format, ParseResult
from collector.formats._common import bad_text, complete_lines
from collector.formats.torchtune_log import read_record

# A record where a line starts or after a bar's `]`, a prefix's `:` or a space (tqdm writes its bar to
# stderr without a newline, so `2>&1` puts the next record right after it); at least one `name:` item, so
# a script's own `Step 3 | warming up` is other text.
_RECORD = re.compile(r"(?:^|(?<=[\s\]\)>:]))Step\s+(\d+)\s*\|(?=\s*[^\s:|]+:)(.*)$")
_HEAD_RECORD = re.compile(rb"(?m)(?:^|[\s\])>:])Step\s+\d+\s*\|\s*[^\s:|]+:")
# Colors and cursor moves (ESC [ ... letter) that terminals put around text.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def parse(data: bytes, first_line: int = 1, *, path: str = "", state: object = None) -> ParseResult:
    """Points from the `Step N | name:value ...` records among the complete lines of `data`.

    A carriage return splits a line into the pieces a terminal would show (a progress bar redrawn), each
    read on its own, and ANSI color codes are removed first. A record is read as `torchtune_log` reads it:
    a step beyond the 64-bit range or text after `|` that is not `name:value` items makes its line bad, a
    value that is not a number is reported with its line and the line's other values kept. A line holding a
    record that is not UTF-8 is bad; every other line is ignored. `path` and `state` are unused.
    """
    lines, consumed = complete_lines(data)
    result = ParseResult(consumed=consumed, lines=len(lines))
    line_no = first_line - 1
    for raw in lines:
        line_no += 1
        if b"Step" not in raw:
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            if _RECORD.search(raw.decode("utf-8", errors="replace")) is not None:
                result.bad.append(BadLine(line_no, f"not UTF-8 text (byte {err.start})", bad_text(raw)))
            continue
        if "\x1b" in text:
            text = _ANSI.sub("", text)
        for piece in text.split("\r"):
            record = _RECORD.search(piece.rstrip())
            if record is not None:
                read_record(record, line_no, piece, result)
    return result


def sniff(head: bytes) -> bool:
    """Whether a console log's head (its first and last 64 KiB) holds a torchtune `Step N | name:value`
    record."""
    return _HEAD_RECORD.search(head) is not None


FORMAT = Format(
    name="torchtune_console",
    parse=parse,
    sniffed=("*.log", "*.out", "*.txt"),
    sniff=sniff,
    copy=True,
)
