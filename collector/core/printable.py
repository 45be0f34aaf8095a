"""Text from run files and folder names made safe to print on a terminal.

A run id is a folder name and a message quotes a log line: either may hold ESC sequences (colours, an OSC
window title, cursor moves), carriage returns or newlines (a fake table row). Everything printed for
people goes through `printable`; `--json` output is JSON-escaped already.
"""

from __future__ import annotations

import logging
import re
from pathlib import PurePath

# C0 and C1 controls, DEL, and the bidirectional overrides that reorder what a line shows.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_CONTROL_BUT_NEWLINE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\x1b": "\\e"}


def _escape(match: re.Match) -> str:
    c = match.group()
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def printable(text: object, newlines: bool = False) -> str:
    """`text` with every control character shown as an escape (`\\e`, `\\n`, `\\x07`, `\\u202e`), so it
    prints as the characters it holds; with `newlines`, line breaks stay (a message of several lines)."""
    return (_CONTROL_BUT_NEWLINE if newlines else _CONTROL).sub(_escape, str(text))


def middle(text: str, size: int) -> str:
    """`text` in at most `size` characters, its middle replaced by an ellipsis when too long (runs of one sweep
    differ at both ends: the start names the project, the end the run). For the CLI's tables and the dashboard."""
    if len(text) <= size:
        return text
    if size <= 1:
        return text[:size]
    tail = (size - 1) // 2
    return text[: size - 1 - tail] + "…" + text[len(text) - tail :]


class PrintableFormatter(logging.Formatter):
    """A log formatter whose messages (which quote run ids and paths) print escaped; tracebacks stay. The
    values put into a message (`%s` arguments: run ids, paths) have their newlines escaped too, so a folder
    name cannot start a fake log line; the message's own line breaks stay."""

    def format(self, record: logging.LogRecord) -> str:
        if isinstance(record.args, tuple) and record.args:
            record.args = tuple(printable(a) if isinstance(a, str | PurePath) else a for a in record.args)
        return super().format(record)

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        record.message = printable(record.message, newlines=True)
        return super().formatMessage(record)


def log_escaped(stream) -> None:
    """Log INFO and above to `stream`, each message escaped by `printable` (tracebacks as they are)."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(PrintableFormatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
