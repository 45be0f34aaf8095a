"""verl's `latest_checkpointed_iteration.txt`: the step of the newest complete checkpoint, as plain text."""

from __future__ import annotations

from collector.core.model import BadLine, Format, ParseResult, RunInfo
from collector.formats._common import STEP_MAX, bad_text


def parse(data: bytes, first_line: int = 1, *, path: str = "", state: object = None) -> ParseResult:
    """`info["latest_checkpointed_iteration"]` is the step the file names; no points.

    An empty file (caught between truncate and write) or text that is not a whole number gives one BadLine
    and `consumed=0`. `first_line`, `path` and `state` are unused (the common signature).
    """
    result = ParseResult()
    text = data.decode("utf-8", errors="replace").strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 19 or int(text) > STEP_MAX:
        reason = "latest_checkpointed_iteration.txt: expected a step number"
        result.bad.append(BadLine(1, reason, bad_text(text)))
        return result
    result.info["latest_checkpointed_iteration"] = int(text)
    result.consumed = len(data)
    result.lines = max(data.count(b"\n"), 1)
    return result


def run_info(info: dict) -> RunInfo:
    """The marker names the newest complete checkpoint's step."""
    return RunInfo(checkpoint_marker=info.get("latest_checkpointed_iteration"))


FORMAT = Format(
    name="checkpoint_marker",
    parse=parse,
    names=("latest_checkpointed_iteration.txt",),
    whole_document=True,
    role="meta",
    run_info=run_info,
)
