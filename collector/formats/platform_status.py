"""The training platform's `{job_id}_status.json`, written by its trainer callback beside `{job_id}_metrics.jsonl`.

`{"job_id": "j-1", "status": "running", "current_step": 120, "total_steps": 1000, "anomaly_detected": false,
"anomaly_reason": null, "updated_at": "2026-11-24T07:00:00Z"}`. The same facts as runwatch's `status.json`
under other names: read into the same shape (`state`, `current_step`, `total_steps`, `updated_at` in seconds
since the epoch), with the platform's own keys kept beside them.
"""

from __future__ import annotations

from collector.core.model import Format, ParseResult, RunInfo
from collector.formats._common import as_step, iso_seconds, parse_json_document

# The platform's status words, in runwatch's (running / completed / failed); others are kept as written.
STATES = {
    "running": "running",
    "training": "running",
    "completed": "completed",
    "succeeded": "completed",
    "success": "completed",
    "finished": "completed",
    "failed": "failed",
    "error": "failed",
    "crashed": "failed",
}


def parse(data: bytes, first_line: int = 1, *, path: str = "", state: object = None) -> ParseResult:
    """The status document in `info` (no points): every key as written, plus `state` (the `status` word in
    runwatch's terms, lower case), `current_step` and `total_steps` when whole numbers, and `updated_at` as
    seconds since the epoch (from an ISO 8601 string or a number; the string kept as `updated_at_iso`).
    A document that is not a JSON object gives one BadLine and `consumed=0` (read again after its next change).
    """
    result = parse_json_document(data, "status file")
    if result.bad:
        return result
    info = dict(result.info)
    word = info.get("status")
    if isinstance(word, str):
        info["state"] = STATES.get(word.strip().lower(), word.strip().lower())
    for key in ("current_step", "total_steps"):
        info[key] = as_step(info.get(key))
    updated = info.get("updated_at")
    if isinstance(updated, str):
        info["updated_at_iso"] = updated
        info["updated_at"] = iso_seconds(updated)
    result.info = info
    return result


def sniff(head: bytes) -> bool:
    """Whether a `*_status.json` is the platform's: a `job_id` and a `status` key."""
    return b'"job_id"' in head and b'"status"' in head


def run_info(info: dict) -> RunInfo:
    """Status, total steps, and the whole document as the run's status facts."""
    state = info.get("state")
    return RunInfo(
        status=state if state in ("running", "completed", "failed") else None,
        status_info=info,
        total_steps=info.get("total_steps"),
    )


FORMAT = Format(
    name="platform_status",
    parse=parse,
    sniffed=("*_status.json",),
    sniff=sniff,
    whole_document=True,
    role="meta",
    run_info=run_info,
)
