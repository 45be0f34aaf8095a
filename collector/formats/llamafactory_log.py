"""LLaMA-Factory's `trainer_log.jsonl`: one JSON object per logging step, written by its LogCallback.

`{"current_steps": 10, "total_steps": 750, "loss": 1.2, "lr": 1e-05, "epoch": 0.1, "percentage": 1.33,
"elapsed_time": "0:01:02", "remaining_time": "1:15:00"}`. Newer versions name the learning rate
`learning_rate` and write `null` for keys they have no value for (`eval_loss`, `predict_loss`, `reward`);
records of a run without loss values carry only the progress keys.
"""

from __future__ import annotations

import json

from collector.core.model import BadLine, Format, ParseResult, RunInfo
from collector.formats._common import as_step, as_value, bad_text, complete_lines

# Progress keys: facts about the run's position, never points.
PROGRESS_KEYS = ("current_steps", "total_steps", "percentage", "elapsed_time", "remaining_time")
# LLaMA-Factory copies the HF Trainer's `learning_rate` into `lr`: the HF name, so the run's
# trainer_state.json beside it gives the same series.
RENAMED = {"lr": "learning_rate"}


def parse(data: bytes, first_line: int = 1, *, path: str = "", state: object = None) -> ParseResult:
    """Points from the complete lines of `data`: every numeric key of a record except the progress keys, at
    the record's `current_steps` (`lr` stored as `learning_rate`); `null` values are skipped.

    `info` holds the progress of the last record read: `total_steps`, `current_step`, `percentage` and
    `elapsed_time` (as written). A line that is not a JSON object, or has no whole-number `current_steps`, is
    reported in `bad`. `path` and `state` are unused (the format needs no state between reads).
    """
    lines, consumed = complete_lines(data)
    result = ParseResult(consumed=consumed, lines=len(lines))
    points = result.points
    line_no = first_line - 1
    last: dict | None = None
    for raw in lines:
        line_no += 1
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
            result.bad.append(BadLine(line_no, f"invalid JSON: {err}", bad_text(raw)))
            continue
        if type(record) is not dict:
            result.bad.append(BadLine(line_no, "not a JSON object", bad_text(raw)))
            continue
        step = as_step(record.get("current_steps"))
        if step is None:
            reason = f"current_steps is not a whole number: {record.get('current_steps')!r}"
            result.bad.append(BadLine(line_no, reason, bad_text(raw)))
            continue
        for key, value in record.items():
            if key in PROGRESS_KEYS:
                continue
            number = as_value(value)
            if number is not None:
                points.add(step, RENAMED.get(key, key), number)
        last = record
    if last is not None:
        total = as_step(last.get("total_steps"))
        result.info = {
            "total_steps": total,
            "current_step": as_step(last.get("current_steps")),
            "percentage": as_value(last.get("percentage")),
            "elapsed_time": last.get("elapsed_time"),
        }
    return result


def sniff(head: bytes) -> bool:
    """Whether a JSONL file's first line is a LLaMA-Factory record (a `current_steps` and `total_steps` key)."""
    first = head.split(b"\n", 1)[0]
    return b'"current_steps"' in first and b'"total_steps"' in first


def run_info(info: dict) -> RunInfo:
    """The run's planned total steps; `completed` as the end the log shows once a record reached them
    (LLaMA-Factory writes its last record at the last step; a status file beside it keeps the last word)."""
    total, current = info.get("total_steps"), info.get("current_step")
    done = isinstance(total, int) and isinstance(current, int) and total > 0 and current >= total
    return RunInfo(ended="completed" if done else None, total_steps=total)


FORMAT = Format(
    name="llamafactory_log",
    parse=parse,
    names=("trainer_log.jsonl",),
    sniffed=("*.jsonl",),
    sniff=sniff,
    run_info=run_info,
)
