"""One parser module per file format, all with the contract in `collector/model.py` and docs/architecture.md.

`parser_for(format)` gives the `parse(data, first_line)` function for a format name of
`collector.formats.discover.FORMATS`. The CSV parser also takes `header=` (see `csv_history.parse`): the caller keeps
`info["header"]` between calls. Modules are imported on first use (the TensorBoard one pulls in protobuf).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from collector.core.model import ParseResult

MODULE_OF_FORMAT = {
    "jsonl": "jsonl",
    "console": "console",
    "csv": "csv_history",
    "hf_trainer_state": "hf_trainer_state",
    "tensorboard": "tensorboard_events",
    "status": "status",
    "run_config": "run_config",
    "checkpoint_marker": "checkpoint_marker",
}


def parser_for(fmt: str) -> Callable[..., ParseResult]:
    """The `parse` function for format `fmt`; KeyError for a name not in `MODULE_OF_FORMAT`."""
    module = importlib.import_module(f"collector.formats.{MODULE_OF_FORMAT[fmt]}")
    return module.parse
