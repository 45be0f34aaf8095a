"""runwatch's `status.json` (`running|completed|failed`, current and total steps, pid, host, updated_at).

Replaced atomically by the trainer; read whole on every change. Its step is a fact about the run, not a point.
"""

from __future__ import annotations

from collector.core.model import ParseResult
from collector.formats._common import parse_json_document


def parse(data: bytes, first_line: int = 1) -> ParseResult:
    """The status object in `info` (no points), `whole_file=True`; a bad document gives one BadLine and
    `consumed=0`. `first_line` is accepted for the common signature and unused."""
    return parse_json_document(data, "status.json")
