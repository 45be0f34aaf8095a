"""MLflow's file store: `params/<name>` and `tags/<name>` of a run folder, one value per file (its configuration).

See `mlflow_metric` for the metrics beside them.
"""

from __future__ import annotations

from pathlib import PurePath

from collector.core.model import BadLine, Format, ParseResult, RunInfo
from collector.formats._common import bad_text
from collector.formats.mlflow_metric import name_under


def parse(data: bytes, first_line: int = 1, *, path: str = "", state: object = None) -> ParseResult:
    """A param or tag file: `info` is `{"params": {name: value}}` or `{"tags": {name: value}}` (the text,
    stripped), no points. Not UTF-8 gives one BadLine."""
    result = ParseResult(consumed=len(data), lines=data.count(b"\n"))
    kind = "params" if name_under(path, "params") is not None else "tags"
    name = name_under(path, kind) or PurePath(path).name
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError as err:
        result.bad.append(
            BadLine(1, f"{kind[:-1]} {name}: non-UTF-8 bytes at byte {err.start}", bad_text(data))
        )
        return result
    result.info = {kind: {name: text}}
    return result


def entry_info(info: dict) -> RunInfo:
    """A param or tag as a piece of the run's configuration (`params.<name>` / `tags.<name>`)."""
    config = {f"{kind}.{name}": value for kind, entries in info.items() for name, value in entries.items()}
    return RunInfo(config_part=config)


FORMAT = Format(
    name="mlflow_entry",
    parse=parse,
    names=("params/*", "tags/*"),
    whole_document=True,
    role="meta",
    run_info=entry_info,
)
