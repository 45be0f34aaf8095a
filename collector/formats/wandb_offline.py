"""W&B offline run files (`wandb/offline-run-*/run-*.wandb`): the history a run logged, read as it grows.

The framing is `collector.formats.wandb_records`; each record is a protobuf `Record` (wandb ships the
classes, `wandb.proto.wandb_internal_pb2`). `history` records are one `log` call each: its items (keys
joined with `/` when nested) at its `_step`, or at the step metric a `metric` record names for all keys
(`define_metric("*", step_metric=...)`: the Hugging Face Trainer's `train/global_step`, where `_step` only
counts `log` calls), `_timestamp` the wall time; `config` and `run` records give the
run's configuration, `exit` its exit code, `output_raw` the console output (read only for the error a failed
run's output ends with, as in a console log). Other records (system stats, files) are skipped.
"""

from __future__ import annotations

import json
import math

from collector.core.model import BadLine, Format, ParseResult, RunInfo
from collector.formats._common import as_step, as_value
from collector.formats._printed import may_be_error, note_error, reported
from collector.formats.wandb_records import frame_records

HEAD = b":W&B"


def parse(data: bytes, first_line: int = 1, *, path: str = "", state: object = None) -> ParseResult:
    """Points of the whole records in `data`, the file's bytes from the stored offset (`state` carries that
    offset, since the framing counts 32 KiB blocks from the file's start; None means offset 0).

    `lines` and BadLine numbers count chunks (`first_line` is the next chunk's number). A record still being
    written is left for the next read; one that does not decode is a BadLine. Items whose value is not a
    number are skipped (`_step`, `_runtime`, `_timestamp` are never points). `info`: `config` (the `run`
    and `config` records' items, decoded), `exit_code` once the run has ended, `project` and `run_name`.
    """
    state = state if isinstance(state, dict) else {}
    offset = state.get("offset", 0)
    framed = frame_records(data, offset, first_line)
    result = ParseResult(consumed=framed.consumed, lines=framed.chunks, bad=list(framed.bad))
    # the step axis: the step metric (None: `_step`) and its last value, kept across reads
    axis = {"step_metric": state.get("step_metric"), "axis_step": state.get("axis_step")}
    # the console: its lines so far and the error it ends with (a logged history record clears it)
    console = {"console_lines": state.get("console_lines", 0), "error": state.get("error")}
    result.state = _state(offset + framed.consumed, axis, console)
    if not framed.records:
        return result
    # protobuf classes: loaded only when a W&B file is read
    from google.protobuf.message import DecodeError
    from wandb.proto import wandb_internal_pb2

    info: dict = {}
    for number, payload in enumerate(framed.records, start=1):
        record = wandb_internal_pb2.Record()
        try:
            record.ParseFromString(payload)
        except DecodeError as err:
            result.bad.append(BadLine(first_line, f"record {number} of this read does not decode: {err}", ""))
            continue
        kind = record.WhichOneof("record_type")
        if kind == "history":
            _history(record.history, result, axis)
            console["error"] = None
        elif kind == "output_raw":
            _console(record.output_raw.line, console)
        elif kind == "metric" and record.metric.glob_name == "*" and record.metric.step_metric:
            axis["step_metric"] = record.metric.step_metric
        elif kind in ("config", "run"):
            items = record.config.update if kind == "config" else record.run.config.update
            config = info.setdefault("config", {})
            for item in items:
                key = _key(item)
                if not key.startswith("_"):
                    config[key] = _decoded(item.value_json)
            if kind == "run":
                info["project"] = record.run.project or None
                info["run_name"] = record.run.display_name or record.run.run_id or None
        elif kind == "exit":
            info["exit_code"] = record.exit.exit_code
    error = reported(console["error"], f"{path} (its console output)")
    if error is not None:
        info["error"] = error
    result.info = info
    result.state = _state(offset + framed.consumed, axis, console)
    return result


def _state(offset: int, axis: dict, console: dict) -> dict:
    return {"offset": offset, **{k: v for k, v in {**axis, **console}.items() if v is not None}}


def _console(text: str, console: dict) -> None:
    """Take one `output_raw` record's text (a line, several, or a tqdm redraw) into the console's error."""
    for line in text.replace("\r", "\n").split("\n"):
        if not line.strip():
            continue
        console["console_lines"] += 1
        if may_be_error(line.encode()):
            console["error"] = note_error(line, console["console_lines"], console["error"])


def _history(history, result: ParseResult, axis: dict) -> None:
    values: dict[str, object] = {}
    for item in history.item:
        values[_key(item)] = _decoded(item.value_json)
    step_metric = axis["step_metric"]
    step = as_step(values.get(step_metric)) if step_metric else None
    if step is not None:
        axis["axis_step"] = step
    elif step_metric:
        step = axis["axis_step"]  # a log without it: W&B's step_sync carries its last value
    if step is None:
        step = as_step(values.get("_step"))
    if step is None:
        step = history.step.num
    wall_time = as_value(values.get("_timestamp"))
    for name, value in values.items():
        number = as_value(value)
        if number is not None and not name.startswith("_") and name != step_metric:
            result.points.add(step, name, number, wall_time)


def _key(item) -> str:
    return item.key or "/".join(item.nested_key)


def _decoded(text: str) -> object:
    if not text:
        return None
    try:
        return json.loads(text)  # reads W&B's bare NaN / Infinity
    except ValueError:
        return math.nan if text.strip('"') == "NaN" else None


def sniff(head: bytes) -> bool:
    """Whether a file starts with the W&B run file header."""
    return head.startswith(HEAD)


def run_info(info: dict) -> RunInfo:
    """The configuration; `completed` (exit code 0) or `failed` once the run wrote its exit record; the error
    its console output ends with (`error`, as a console log's), unless it exited with 0."""
    code = info.get("exit_code")
    status = None if code is None else "completed" if code == 0 else "failed"
    config = info.get("config")
    facts = {"exit_code": code} if code is not None else {}
    if info.get("error") and code != 0:
        facts["error"] = info["error"]
    return RunInfo(status=status, status_info=facts or None, config=config or None)


FORMAT = Format(
    name="wandb_offline",
    parse=parse,
    names=("offline-run-*/run-*.wandb", "run-*/run-*.wandb"),
    run_info=run_info,
    lines=False,
)
