"""Hugging Face Trainer `trainer_state.json`: the run's history in `log_history`, plus its best checkpoint.

A whole document, rewritten at every save: the caller re-reads it from offset 0 when it changes, and points for
a (run, metric, step) it already has are replaced.
"""

from __future__ import annotations

import json
import re

from collector.core.model import BadLine, Format, ParseResult, RunInfo
from collector.formats._common import as_step, bad_name, bad_text, flatten_numbers, short_repr, total_steps_of

# Whole-file facts kept in `info` (None when the file lacks them).
INFO_KEYS = (
    "best_model_checkpoint",
    "best_metric",
    "global_step",
    "max_steps",
    "num_train_epochs",
    "eval_steps",
    "save_steps",
    "logging_steps",
)
# Kept in `info` only when the file has them (newer transformers versions write them).
OPTIONAL_INFO_KEYS = ("metric_for_best_model", "best_global_step", "epoch")
_CHECKPOINT_STEP = re.compile(r"checkpoint-(\d+)/*$")


def parse(data: bytes, first_line: int = 1, *, path: str = "", state: object = None) -> ParseResult:
    """Points from every numeric key of every `log_history` entry, named as Hugging Face names them
    (`loss`, `grad_norm`, `learning_rate`, `epoch`, `eval_loss`, `train_runtime`, ...), at the entry's `step`.

    Promises: on a complete document, `consumed` is all of `data`, `lines` its line count,
    and `info` holds `INFO_KEYS` (plus `OPTIONAL_INFO_KEYS` when present) and `best_checkpoint_step`, the N of
    `best_model_checkpoint`'s trailing `checkpoint-N` (the path is from the machine that trained). Bare
    `NaN`/`Infinity` are read as non-finite floats. An entry without a whole-number `step` is reported in
    `bad` (its `line` is the entry's 1-based position in `log_history`). A document that is not valid JSON
    (for example, caught half-written) gives one BadLine and `consumed=0`, so the caller reads it again
    after its next change; it never raises. `first_line`, `path` and `state` are unused (the common
    signature).
    """
    result = ParseResult()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        result.bad.append(
            BadLine(line, f"non-UTF-8 bytes at byte {err.start}", bad_text(data[err.start :][:80]))
        )
        return result
    try:
        state = json.loads(text)
    except (ValueError, RecursionError) as err:
        if isinstance(err, json.JSONDecodeError):
            line, reason = err.lineno, f"invalid JSON (incomplete write?): {err.msg} at column {err.colno}"
        elif isinstance(err, ValueError):  # a number Python will not convert (an integer of 4,300+ digits)
            line, reason = 1, f"unreadable JSON: {err}"
        else:
            line, reason = 1, "invalid JSON: nested too deeply"
        lines = text.splitlines()
        result.bad.append(BadLine(line, reason, bad_text(lines[line - 1] if line <= len(lines) else "")))
        return result
    if type(state) is not dict or type(state.get("log_history")) is not list:
        result.bad.append(BadLine(1, "not a trainer_state.json: no log_history list", bad_text(text[:200])))
        return result

    result.consumed = len(data)
    result.lines = data.count(b"\n")
    points = result.points
    test_entries = 0
    for position, entry in enumerate(state["log_history"], start=1):
        if type(entry) is not dict:
            reason = f"log_history entry {position} is not an object"
            result.bad.append(BadLine(position, reason, bad_text(json.dumps(entry))))
            continue
        step = as_step(entry.get("step"))
        if step is None and "step" not in entry and any(k.startswith(_TEST_PREFIXES) for k in entry):
            test_entries += 1  # trainer.predict()'s test-set results: no step to put them at
            continue
        if step is None:
            reason = f"log_history entry {position} has no whole-number step: {short_repr(entry.get('step'))}"
            if type(entry.get("step")) is int:
                reason = f"log_history entry {position} has a step beyond the 64-bit range"
            result.bad.append(BadLine(position, reason, bad_text(json.dumps(entry))))
            continue
        names: list[str] = []
        values: list[float] = []
        flatten_numbers(entry, "", names, values, skip=("step",))
        if (reason := bad_name(names)) is not None:
            result.bad.append(
                BadLine(position, f"log_history entry {position}: {reason}", bad_text(repr(entry)))
            )
            continue
        points.step.extend([step] * len(names))
        points.metric.extend(names)
        points.value.extend(values)
        points.wall_time.extend([None] * len(names))

    info = result.info
    if test_entries:
        info["entries_not_read"] = (
            f"{test_entries} predict_* entr{'y' if test_entries == 1 else 'ies'} without a step "
            f"{'was' if test_entries == 1 else 'were'} not read (test-set results)"
        )
    for key in INFO_KEYS:
        info[key] = state.get(key)
    for key in OPTIONAL_INFO_KEYS:
        if key in state:
            info[key] = state[key]
    best = state.get("best_model_checkpoint")
    match = _CHECKPOINT_STEP.search(best) if isinstance(best, str) else None
    info["best_checkpoint_step"] = int(match.group(1)) if match else None
    return result


_TEST_PREFIXES = ("predict_", "test_")


def run_info(info: dict) -> RunInfo:
    """The run facts of a trainer state: `info` merged into the run's config (beside a run.json that
    `trainer.hf.RunwatchCallback` wrote: its lr, schedule and vocabulary size stay), `max_steps` its length."""
    return RunInfo(config_part=info, total_steps=total_steps_of(info))


def has_log_history(head: bytes) -> bool:
    """Whether a `.json` file's first bytes name a `log_history` (a renamed trainer_state.json)."""
    return b'"log_history"' in head


FORMAT = Format(
    name="hf_trainer_state",
    parse=parse,
    names=("trainer_state.json",),
    sniffed=("*.json",),
    sniff=has_log_history,
    whole_document=True,
    run_info=run_info,
)
