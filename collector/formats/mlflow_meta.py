"""MLflow's file store: a run folder's `meta.yaml` (`mlruns/<experiment>/<run>/meta.yaml`), the run's name,
status and times.

    artifact_uri: file:///home/me/mlruns/0/4f1c2e/artifacts
    end_time: 1732431700000
    experiment_id: '0'
    lifecycle_stage: active
    run_id: 4f1c2e
    run_name: sft-7b
    run_uuid: 4f1c2e
    start_time: 1732431600000
    status: 3
    user_id: me

MLflow writes the status as its `RunStatus` number (1 RUNNING, 2 SCHEDULED, 3 FINISHED, 4 FAILED, 5 KILLED),
the times as milliseconds since the epoch (`end_time: null` while the run runs). Older writers put the name in
`name:` (and in the `mlflow.runName` tag). The file is flat `key: value` YAML, read here without a YAML library.
"""

from __future__ import annotations

import re

from collector.core.model import BadLine, Format, ParseResult, RunInfo
from collector.formats._common import bad_text

# MLflow's RunStatus numbers and words, and the runwatch status each one is (None: no runwatch word).
STATUS_WORDS = {1: "RUNNING", 2: "SCHEDULED", 3: "FINISHED", 4: "FAILED", 5: "KILLED"}
STATES = {"RUNNING": "running", "FINISHED": "completed", "FAILED": "failed", "KILLED": "failed"}
_LINE = re.compile(r"^([A-Za-z_][\w.-]*):(?:\s+(.*?))?\s*$")


def parse(data: bytes, first_line: int = 1, *, path: str = "", state: object = None) -> ParseResult:
    """The run's facts in `info` (no points): `run_id`, `run_name` (or the older `name`), `experiment_id`,
    `mlflow_status` (the word, from MLflow's number or a word as written), `state` (runwatch's word: running,
    completed, failed; KILLED is failed, SCHEDULED none), `start_time`/`end_time` in seconds since the
    epoch, `lifecycle_stage`, `user_id`. A file that is not UTF-8 or holds no `key: value` line gives one
    BadLine and `consumed=0` (read again after its next change)."""
    result = ParseResult(consumed=len(data), lines=data.count(b"\n"))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        return _bad(data, f"meta.yaml: non-UTF-8 bytes at byte {err.start}")
    fields = {}
    for line in text.splitlines():
        match = _LINE.match(line)
        if match:
            fields[match.group(1)] = _scalar(match.group(2) or "")
    if not fields:
        return _bad(data, "meta.yaml: no `key: value` line (incomplete write?)")
    info: dict = {}
    for key in ("run_id", "experiment_id", "lifecycle_stage", "user_id"):
        if fields.get(key) not in (None, ""):
            info[key] = str(fields[key])
    name = fields.get("run_name") or fields.get("name")
    if name not in (None, ""):
        info["run_name"] = str(name)
    word = _status_word(fields.get("status"))
    if word is not None:
        info["mlflow_status"] = word
        if word in STATES:
            info["state"] = STATES[word]
    for key in ("start_time", "end_time"):
        if type(fields.get(key)) is int:
            info[key] = fields[key] / 1000.0
    if "end_time" in info or "start_time" in info:
        info["updated_at"] = info.get("end_time", info.get("start_time"))
    result.info = info
    return result


def _bad(data: bytes, reason: str) -> ParseResult:
    return ParseResult(consumed=0, lines=0, bad=[BadLine(1, reason, bad_text(data))])


def _scalar(text: str) -> object:
    """A flat YAML scalar: a quoted string, null, a whole number, or the text."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1].replace("''", "'") if text[0] == "'" else text[1:-1]
    if text in ("null", "~", ""):
        return None
    if re.fullmatch(r"-?\d{1,19}", text):
        return int(text)
    return text


def _status_word(value: object) -> str | None:
    if type(value) is int:
        return STATUS_WORDS.get(value)
    if isinstance(value, str) and value.strip():
        return value.strip().upper()
    return None


def sniff(head: bytes) -> bool:
    """Whether a `meta.yaml` is an MLflow run's (an experiment's has no run id)."""
    has_run = b"run_uuid:" in head or b"run_id:" in head
    return has_run and any(key in head for key in (b"experiment_id:", b"lifecycle_stage:", b"status:"))


def run_info(info: dict) -> RunInfo:
    """The run's status in runwatch's words, the whole document as its status facts, and its name as
    configuration (`run_name`)."""
    name = info.get("run_name")
    return RunInfo(
        status=info.get("state"),
        status_info=info,
        config_part={"run_name": name} if name else None,
    )


FORMAT = Format(
    name="mlflow_meta",
    parse=parse,
    sniffed=("meta.yaml",),
    sniff=sniff,
    whole_document=True,
    role="meta",
    run_info=run_info,
)
