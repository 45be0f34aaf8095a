"""verl's `latest_checkpointed_iteration.txt`: the step of the newest complete checkpoint, as plain text."""

from __future__ import annotations

from collector.core.model import BadLine, ParseResult
from collector.formats._common import bad_text


def parse(data: bytes, first_line: int = 1) -> ParseResult:
    """`info["latest_checkpointed_iteration"]` is the step the file names; `whole_file=True`, no points.

    An empty file (caught between truncate and write) or text that is not a whole number gives one BadLine
    and `consumed=0`. `first_line` is accepted for the common signature and unused.
    """
    result = ParseResult(whole_file=True)
    text = data.decode("utf-8", errors="replace").strip()
    if not (text.isascii() and text.isdigit()):
        reason = "latest_checkpointed_iteration.txt: expected a step number"
        result.bad.append(BadLine(1, reason, bad_text(text)))
        return result
    result.info["latest_checkpointed_iteration"] = int(text)
    result.consumed = len(data)
    result.lines = max(data.count(b"\n"), 1)
    return result
