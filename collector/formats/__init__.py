"""Input formats: one module per format, each declaring one `Format` descriptor, registered once here.

How to add a format (the whole contract):
1. Write `collector/formats/<name>.py` with a pure parser (no I/O, no clock, no database):
   `parse(data: bytes, first_line: int = 1, *, path: str = "", state: object = None) -> ParseResult`.
   `data` is the file's bytes from the stored offset (from 0 for a whole document); `path` is the file's
   path (an MLflow metric's name is in it); `state` is the `ParseResult.state` the previous read of this file
   returned (None on a read from offset 0). Consume only complete records (`consumed`, `lines`); report
   every unreadable record as a `BadLine` with its 1-based line (record) number and never raise.
2. In that module declare `FORMAT = Format(name=..., parse=parse, ...)` (`collector.core.model.Format`):
   the file name patterns that are the format by name (`names`), the patterns that need a look at the first
   64 KiB (`sniffed` with `sniff(head) -> bool`), `whole_document` (re-read from 0 on every change),
   `role` ("metrics" or "meta"), `run_info(info) -> RunInfo` when its `info` says something about the run,
   `lines=False` for a binary framing (records that are not newline-ended lines), and `lives` when the
   trainer starts a new file of the log each time it starts or resumes (`log_<time>.txt`).
3. Add the module's name to `MODULES` below: the order is the precedence when files of one run log the same
   (metric, step): a run's files are read in the reverse of this order (and, within a format, oldest
   modification first), so the later-read value wins. A format with `copy=True` (console logs, CSV
   exports) is read only when its run has no other metrics file. A name without a wildcard beats a pattern,
   and a positive sniff beats a pattern name match (`trainer_log.jsonl` content in a `*.jsonl`).
4. Tests: `tests/collector/test_parsers_<name>.py` (a real or self-written sample; split-anywhere reads
   equal one read; `FUZZ`, the sample `tests/collector/test_parsers_garbage.py` damages: the fuzz covers
   every registered format and fails until its test module declares one).
Nothing else changes: discovery, the incremental reader, the store and the daemon read only descriptors.
"""

from __future__ import annotations

import fnmatch
import functools
import importlib
import re
from collections.abc import Callable
from pathlib import PurePath

from collector.core.model import Format, ParseResult

# Format modules, metrics formats first in the order they win over one another, then the meta formats.
MODULES = (
    "hf_trainer_state",
    "hf_tensorboard",
    "tensorboard_events",
    "jsonl",
    "wandb_offline",
    "mlflow_metric",
    "llamafactory_log",
    "torchtune_log",
    "csv_history",
    "console",
    "hf_console",
    "torchtune_console",
    "status",
    "platform_status",
    "run_config",
    "checkpoint_marker",
    "mlflow_entry",
    "mlflow_meta",
)


@functools.cache
def registry() -> dict[str, Format]:
    """Every registered format by name, in `MODULES` order."""
    found: dict[str, Format] = {}
    for module_name in MODULES:
        fmt = importlib.import_module(f"collector.formats.{module_name}").FORMAT
        if fmt.name in found:
            raise ValueError(f"format {fmt.name!r} is declared by two modules")
        found[fmt.name] = fmt
    return found


def names() -> tuple[str, ...]:
    """The names of every registered format."""
    return tuple(registry())


def get(name: str) -> Format:
    """The format called `name`; KeyError for a name no module declares."""
    return registry()[name]


def parser_for(name: str) -> Callable[..., ParseResult]:
    """The `parse` function of format `name`; KeyError for a name no module declares."""
    return get(name).parse


def by_name(path: PurePath) -> tuple[Format | None, list[Format]]:
    """The format `path` is by its name alone (None if none), and the formats it may be after a sniff
    (none when the name is an exact one, such as `trainer_state.json`: nothing overrides it).

    A rotated log (`metrics.jsonl.1`, `train.log.2`: an appended format's name plus `.N`) is its base
    name's format: the earlier life of that log, read like it."""
    named, sniffed = _by_own_name(path)
    base = unrotated(path)
    if named is None and not sniffed and base != path:
        named, sniffed = _by_own_name(base)
        if named is not None and named.whole_document:
            return None, []
        sniffed = [f for f in sniffed if not f.whole_document]
    return named, sniffed


def is_life(path: PurePath, name: str) -> bool:
    """Whether `path` is named as one life of format `name`'s log (`Format.lives`): one of the files the
    trainer starts anew each time it runs in the same folder."""
    return any(_matches(path, p) for p in get(name).lives)


def unrotated(path: PurePath) -> PurePath:
    """`metrics.jsonl.1` -> `metrics.jsonl`; any other name is itself."""
    match = _ROTATED.match(path.name)
    return path.with_name(match.group(1)) if match else path


def _by_own_name(path: PurePath) -> tuple[Format | None, list[Format]]:
    exact = [f for f in registry().values() if any("*" not in p and _matches(path, p) for p in f.names)]
    if exact:
        return exact[0], []
    named = next((f for f in registry().values() if any(_matches(path, p) for p in f.names)), None)
    sniffed = [f for f in registry().values() if f is not named and any(_matches(path, p) for p in f.sniffed)]
    return named, sniffed


_ROTATED = re.compile(r"^(.+\.[A-Za-z]\w*)\.(\d{1,3})$")  # a log's name with an extension, then `.N`


def rank(name: str) -> int:
    """The precedence of format `name` (0 first): a run's files are read from the highest rank down."""
    order = list(registry())
    return order.index(name) if name in order else len(order)


def _matches(path: PurePath, pattern: str) -> bool:
    if "/" in pattern:
        tail = "/".join(path.parts[-(pattern.count("/") + 1) :])
        return fnmatch.fnmatchcase(tail, pattern)
    if pattern.startswith("*.") and "*" not in pattern[1:]:
        return path.name.lower().endswith(pattern[1:].lower())
    return fnmatch.fnmatchcase(path.name, pattern)
