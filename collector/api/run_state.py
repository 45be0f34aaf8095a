"""In what state a run and a watched root are: the overview's status words, and each root's reachability."""

from __future__ import annotations

from pathlib import Path

from collector.detect.runlevel import stopped_by_person
from collector.ingest.fs import root_state
from collector.store import read as store_read

VERSION = "0.1.0"  # the collector's, as /api/health and /openapi.json state it


def run_status(r: dict, stalled: bool, reachable: bool = True) -> str:
    """What the run is doing, in the overview's words: `unreachable` while the host of a remote run that has
    not finished cannot be reached; `stalled` while a stalled alert is not resolved;
    `failed` while its console log ends in an error (`status_info.error`, even after a summary: the script
    raised after training), `stopped` when that error is a person's Ctrl-C (KeyboardInterrupt, SIGINT); else status.json's state (`running`, `completed`, `failed`) or the completion
    its log shows; an HF trainer_state run is `completed` once `global_step` reaches `max_steps`; else
    `unknown`. A dead trainer pid is left to the stalled rule."""
    if not reachable and r["status"] not in ("completed", "failed"):
        return "unreachable"
    if stalled:
        return "stalled"
    error = _error_line(r)
    if r["status"] not in ("failed", "stopped") and error is not None:
        return "stopped" if stopped_by_person(str(error.get("text", ""))) else "failed"
    if r["status"] and r["status"] != "unknown":
        return r["status"]
    if r["format"] == "hf_trainer_state":
        state = store_read.parse_json(r["config"]) or {}
        done, total = state.get("global_step"), state.get("max_steps")
        if isinstance(done, int) and isinstance(total, int) and total > 0 and done >= total:
            return "completed"
    return "unknown"


def _error_line(r: dict) -> dict | None:
    """The error line a console log ended with (`{"line", "text"}`), as the run's status facts hold it."""
    info = store_read.parse_json(r["status_info"]) if r.get("status_info") else None
    error = info.get("error") if isinstance(info, dict) else None
    return error if isinstance(error, dict) else None


def health_info(db: Path, roots: list, version: str) -> dict:
    """The database, the roots as given (a path or `ssh://host/path`) and `root_states`: each root's `state`
    ("local", or its host's "connected"/"connecting"/"disconnected"), `since`, `error`, and for a remote root
    its host's `read_bytes` and `listing_bytes` so far."""
    states = [root_state(r) for r in roots]
    roots_text = [s["root"] for s in states]
    return {"ok": True, "db": str(db), "roots": roots_text, "root_states": states, "version": version}
