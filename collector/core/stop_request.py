"""The stop request: a file the collector (or a person, through the API or the CLI) writes into a run folder to
ask the trainer to stop; any trainer can poll for it.

`RUN_DIR/runwatch.stop`, one JSON object, written atomically (a temporary file renamed over it), never
removed by runwatch (a person removes it to let a restarted run go on):

    {"requested_at": 1764000000.0, "reason": "nonfinite on train/loss at step 12: ...",
     "by": "rule" | "person", "alert_id": 7 | null, "rule": "nonfinite" | null, "step": 12 | null}

A trainer checks for the file once per step (`os.stat`, a few microseconds), saves a checkpoint, records
`stopped` with the reason and exits 0. The first request stands: a later one does not replace it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

STOP_FILE = "runwatch.stop"


def stop_path(run_dir: Path | str) -> Path:
    return Path(run_dir) / STOP_FILE


def write_stop_request(
    run_dir: Path | str,
    reason: str,
    *,
    by: str,
    alert_id: int | None = None,
    rule: str | None = None,
    step: int | None = None,
) -> tuple[dict, bool]:
    """Ask the run in `run_dir` to stop; returns (the request in force, whether this call wrote it).

    A request already there stands (it is returned, nothing is written). Raises OSError when the folder
    cannot be written (the caller says so to the person or the log).
    """
    path = stop_path(run_dir)
    existing = read_stop_request(run_dir)
    if existing is not None:
        return existing, False
    request = {
        "requested_at": time.time(),
        "reason": reason,
        "by": by,
        "alert_id": alert_id,
        "rule": rule,
        "step": step,
    }
    tmp = path.with_name(f".{STOP_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(request) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return request, True


def read_stop_request(run_dir: Path | str) -> dict | None:
    """The stop request of the run, or None when there is none. A file that is not a JSON object (written by
    hand) still asks for a stop: its text becomes the reason."""
    try:
        text = stop_path(run_dir).read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        request = json.loads(text)
    except json.JSONDecodeError:
        request = None
    if not isinstance(request, dict):
        return {"reason": text.strip() or "stop requested", "by": "person", "alert_id": None, "rule": None}
    return request
