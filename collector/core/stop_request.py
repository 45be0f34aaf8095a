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

import contextlib
import errno
import json
import os
import secrets
import stat
import time
from pathlib import Path

STOP_FILE = "runwatch.stop"
ALREADY_THERE = "a request was already there"  # a team owner's outcome when an earlier request stands
MAX_BYTES = 64 << 10  # what is read of a stop file: a request is one short JSON object


def stop_path(run_dir: Path | str) -> Path:
    return Path(run_dir) / STOP_FILE


def ended(run_id: str, status_info: dict | None) -> str | None:
    """Why a stop of the run is refused when its status.json (`status_info`) says it ended, else None: a stop
    file left in an ended run's folder would stop it again once it is resumed (runwatch never removes one).
    The API's refusal, and the owning collector's in team mode."""
    state = (status_info or {}).get("state")
    if state in ("completed", "failed", "stopped"):
        return f"run {run_id!r} has ended (status.json: {state}); nothing to stop"
    return None


def single_file(run_id: str, path: object) -> str:
    """Why a stop of a run that is one file by itself is refused: its folder is its root's (other runs')."""
    return f"run {run_id!r} is the single file {path}: there is no run folder to ask to stop"


class StopFileLink(ValueError):
    """`RUN_DIR/runwatch.stop` (or the run folder itself, or a folder between it and its root) is a symbolic
    link (or not a plain file): runwatch neither reads nor writes through it, since it could point anywhere
    outside the watched roots."""


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

    A request already there stands (it is returned, nothing is written). The request is written to a new
    file of an unpredictable name in the run folder (created exclusively, never through a link) and renamed
    over `runwatch.stop`, all relative to the folder opened once. Raises StopFileLink when `runwatch.stop`
    or the run folder is a link (with `root`, also when the folder resolves outside it), OSError when the
    folder cannot be written (the caller says so to the person or the log).
    """
    folder = _open_folder(run_dir)
    try:
        existing = _read(folder, run_dir)
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
        tmp = f".{STOP_FILE}.{secrets.token_hex(8)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(json.dumps(request) + "\n")
            # rename() replaces a link planted meanwhile itself, never the file it points to
            os.replace(tmp, STOP_FILE, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=folder)
            raise
        return request, True
    finally:
        os.close(folder)


def read_stop_request(run_dir: Path | str) -> dict | None:
    """The stop request of the run, or None when there is none. A file that is not a JSON object (written by
    hand) still asks for a stop: its text becomes the reason. Raises StopFileLink when `runwatch.stop` is a
    link or not a plain file (never followed)."""
    try:  # (the trainer reads its own folder, which may well be a link to scratch space)
        folder = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        return _read(folder, run_dir)
    finally:
        os.close(folder)


def request_in_force(run_dir: Path | str, root: Path | str | None = None) -> dict | None:
    """The stop request in the run folder as `write_stop_request` finds it (never read through a link: the
    run folder, `runwatch.stop`, or with `root`, a folder on the way out of the root), or None when there is
    none. Raises StopFileLink for a link, OSError when the folder cannot be read."""
    if root:
        check_inside(run_dir, root)
    folder = _open_folder(run_dir)
    try:
        return _read(folder, run_dir)
    finally:
        os.close(folder)


def check_inside(run_dir: Path | str, root: Path | str) -> None:
    """Raise StopFileLink when the run folder, links resolved, is not inside its watched `root` (a folder
    between them was replaced by a link out of the roots after the run was found)."""
    real, top = os.path.realpath(run_dir), os.path.realpath(root)
    if real != top and not real.startswith(top.rstrip(os.sep) + os.sep):
        raise StopFileLink(
            f"the run folder {run_dir} leads to {real}, outside its watched root {root} (a folder on the way is"
            " a link): runwatch writes no stop request there"
        )


def _open_folder(run_dir: Path | str) -> int:
    """The run folder, opened without following it if it is itself a link."""
    try:
        return os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(run_dir):
            raise StopFileLink(
                f"the run folder {run_dir} is a symbolic link (to {os.readlink(run_dir)}): runwatch neither"
                " reads nor writes a stop request through it (it could point outside the watched roots)"
            ) from None
        raise


def _read(folder: int, run_dir: Path | str) -> dict | None:
    """`read_stop_request` in the folder open as `folder`."""
    try:
        fd = os.open(STOP_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise StopFileLink(_refusal(run_dir, "is a symbolic link")) from None
        raise
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise StopFileLink(_refusal(run_dir, "is not a plain file"))
        text = f.read(MAX_BYTES).decode("utf-8", errors="replace")
    try:
        request = json.loads(text)
    except json.JSONDecodeError:
        request = None
    if not isinstance(request, dict):
        return {"reason": text.strip() or "stop requested", "by": "person", "alert_id": None, "rule": None}
    return _typed(request)


def _typed(request: dict) -> dict:
    """A JSON object's request with runwatch's fields of the types it writes them in (one written by hand may
    hold anything: `{"reason": 7, "requested_at": "this morning"}` broke `collector run`, `collector stop` and
    the run page, whose answers are typed): a reason that is no text is its JSON text, an author that is none
    is a person, a time, alert id, rule or step of another type is left out (None). Other fields are kept."""
    out = dict(request)
    if out.get("reason") is not None and not isinstance(out["reason"], str):
        out["reason"] = json.dumps(out["reason"])
    if out.get("by") is not None and not isinstance(out["by"], str):
        out["by"] = "person"
    for key, kinds in (("requested_at", (int, float)), ("alert_id", int), ("step", int), ("rule", str)):
        if key in out and (isinstance(out[key], bool) or not isinstance(out[key], kinds)):
            out[key] = None
    return out


def _refusal(run_dir: Path | str, what: str) -> str:
    return (
        f"{stop_path(run_dir)} {what}: runwatch neither reads nor writes a stop request through it (it could"
        " point outside the watched roots); remove it, then ask again"
    )
