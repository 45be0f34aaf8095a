"""runwatch's `run.json`: the resolved training config, start time and versions of a run."""

from __future__ import annotations

from collector.core.model import Format, ParseResult, RunInfo
from collector.formats._common import parse_json_document, total_steps_of


def parse(data: bytes, first_line: int = 1, *, path: str = "", state: object = None) -> ParseResult:
    """The config object in `info` (no points); a bad document gives one BadLine and `consumed=0`.
    `first_line`, `path` and `state` are unused (the common signature)."""
    return parse_json_document(data, "run.json")


def run_info(info: dict) -> RunInfo:
    """run.json is (part of) the run's config, merged into what its other files say (a Trainer's
    trainer_state.json beside it); its `total_steps` (or `max_steps`) the run's length."""
    return RunInfo(config_part=info, total_steps=total_steps_of(info))


FORMAT = Format(
    name="run_config", parse=parse, names=("run.json",), whole_document=True, role="meta", run_info=run_info
)
