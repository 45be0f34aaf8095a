"""runwatch's `run.json`: the resolved training config, start time and versions of a run."""

from __future__ import annotations

from collector.core.model import ParseResult
from collector.formats._common import parse_json_document


def parse(data: bytes, first_line: int = 1) -> ParseResult:
    """The config object in `info` (no points), `whole_file=True`; a bad document gives one BadLine and
    `consumed=0`. `first_line` is accepted for the common signature and unused."""
    return parse_json_document(data, "run.json")
