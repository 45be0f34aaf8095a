"""In what state a run is, in the overview's words (`running`, `stalled`, `failed`, `stopped`, ...)."""

from __future__ import annotations

from collector.detect.runlevel import stopped_by_person
from collector.store import read as store_read


def run_status(r: dict, stalled: bool, reachable: bool = True) -> str:
    """What the run is doing, in the overview's words: `unreachable` while the host of a remote run that has
    not finished cannot be reached; `stalled` while a stalled alert is not resolved;
    `failed` while its console log ends in an error (`status_info.error`, even after a summary: the script
    raised after training), `stopped` when that error, or a `failed` status file's, is a person's Ctrl-C
    (KeyboardInterrupt, SIGINT: our launcher's "stopped by SIGINT"); else status.json's state (`running`, `completed`, `failed`) or the completion
    its log shows; an HF trainer_state run is `completed` once `global_step` reaches `max_steps`; else
    `unknown`. A dead trainer pid is left to the stalled rule."""
    if not reachable and r["status"] not in ("completed", "failed"):
        return "unreachable"
    if stalled:
        return "stalled"
    error = _error_line(r)
    if r["status"] not in ("failed", "stopped") and error is not None:
        return "stopped" if stopped_by_person(str(error.get("text", ""))) else "failed"
    if r["status"] == "failed" and stopped_by_person(_status_error(r)):
        return "stopped"  # as its run_failed alert says: a warning that the run was stopped
    if r["status"] and r["status"] != "unknown":
        return r["status"]
    if r["format"] == "hf_trainer_state":
        state = store_read.parse_json(r["config"]) or {}
        done, total = state.get("global_step"), state.get("max_steps")
        if isinstance(done, int) and isinstance(total, int) and total > 0 and done >= total:
            return "completed"
    return "unknown"


def _status_error(r: dict) -> str:
    """The error text a status file gave with its `failed` state, or ""."""
    info = store_read.parse_json(r["status_info"]) if r.get("status_info") else None
    error = info.get("error") if isinstance(info, dict) else None
    return error if isinstance(error, str) else ""


def _error_line(r: dict) -> dict | None:
    """The error line a console log ended with (`{"line", "text"}`), as the run's status facts hold it."""
    info = store_read.parse_json(r["status_info"]) if r.get("status_info") else None
    error = info.get("error") if isinstance(info, dict) else None
    return error if isinstance(error, dict) else None
