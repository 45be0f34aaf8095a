"""runwatch's `status.json` (`running|completed|failed`, current and total steps, pid, host, updated_at).

Replaced atomically by the trainer; read whole on every change. Its step is a fact about the run, not a point.
"""

from __future__ import annotations

from collector.core.model import Format, ParseResult, RunInfo
from collector.formats._common import parse_json_document, total_steps_of


def parse(data: bytes, first_line: int = 1, *, path: str = "", state: object = None) -> ParseResult:
    """The status object in `info` (no points); a bad document gives one BadLine and `consumed=0`.
    `first_line`, `path` and `state` are unused (the common signature)."""
    return parse_json_document(data, "status.json")


def run_info(info: dict) -> RunInfo:
    """The run's state (`status`, or `state` as older writers name it), its total steps, and the whole
    document for the progress the API shows."""
    status = info.get("status", info.get("state"))
    return RunInfo(
        status=status if isinstance(status, str) else None,
        status_info=info,
        total_steps=total_steps_of(info),
    )


FORMAT = Format(
    name="status", parse=parse, names=("status.json",), whole_document=True, role="meta", run_info=run_info
)
