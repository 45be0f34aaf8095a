"""Why a file under a watched root is not read: the reason a person sees beside the file on its run.

Pure but for `runwatch_files_beside` (lists one folder): a file's name, size and first bytes in, a sentence out. Discovery calls `reason_not_read` for every
file no format claims, and `pointer_reason` before it trusts a name (a Git LFS pointer committed in place
of `events.out.tfevents.*` or `trainer_state.json` is not that file).
"""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path, PurePath

from collector.core.runtime import alerts_log_path, marker_path, scratch_path, token_path
from collector.core.stop_request import STOP_FILE

LFS_POINTER = b"version https://git-lfs.github.com/spec/v1"
ANNEX_MARKERS = (b"/annex/objects/", b"#$# git-annex")
# Pointer files are a few hundred bytes: only files this small are looked at for one.
POINTER_MAX_BYTES = 1024
LFS_REASON = "Git LFS pointer, not the file: run git lfs pull"
ANNEX_REASON = "git-annex pointer, not the file: run git annex get"
OUTSIDE_ROOT_REASON = "a link to a file outside the watched roots: not read (add its folder as a root)"
NOT_A_FILE_REASON = "not a plain file (a FIFO, socket, device or broken link): not opened, not read"
LINKED_FOLDER_REASON = "a link to a folder: not followed (add the folder it points to as a root)"
# Files people keep beside runs that are not run files (code, docs, configs, images, archives).
NOT_RUN_SUFFIXES = {
    ".py",
    ".sh",
    ".md",
    ".rst",
    ".ipynb",
    ".yaml",
    ".yml",
    ".toml",
    ".cfg",
    ".ini",
    ".png",
    ".jpg",
    ".jpeg",
    ".gif",
    ".svg",
    ".pdf",
    ".html",
    ".gitignore",
    ".gitattributes",
    ".lock",
    ".zip",
    ".gz",
    ".tar",
    ".safetensors",
    ".bin",
    ".pt",
    ".pth",
    ".ckpt",
    ".model",
    ".pkl",
    ".npy",
    ".npz",
    ".parquet",
    ".arrow",
}
NOT_RUN_NAMES = {"LICENSE", "README", "Makefile", "Dockerfile", ".DS_Store", "requirements.txt"}
# The stop request runwatch writes into a run's folder (`collector stop`, the dashboard, a `[stop]` rule).
STOP_FILE_REASON = f"runwatch's own stop request ({STOP_FILE}): not a metrics file"


# What runwatch writes beside its database DB (see `collector.core.runtime`): DB + suffix, each in words.
RUNWATCH_OWN = {
    alerts_log_path(Path("x")).name[1:]: "alert log",
    token_path(Path("x")).name[1:]: "API token",
    marker_path(Path("x")).name[1:]: "running-collector marker",
    ".wal": "database write-ahead log",  # DuckDB's own, beside the database
    scratch_path(Path("x")).name[1:]: "ingest scratch folder",
}
SCRATCH_SUFFIX = scratch_path(Path("x")).name[1:]


def runwatch_own_reason(name: str, beside: Collection[str]) -> str | None:
    """The reason a file or folder named `name` is not a run when it is one runwatch writes: its database
    (a file with one of runwatch's companions beside it in `beside`, the folder's names) or a companion of
    a database beside it (`DB.alerts.jsonl`, `DB.token`, `DB.collector.json`, `DB.wal`, `DB.ingest/`)."""
    for suffix, what in RUNWATCH_OWN.items():
        if name.endswith(suffix) and name[: -len(suffix)] in beside:
            return f"runwatch's own {what} (of the database {name[: -len(suffix)]}): not a run"
    if any(name + suffix in beside for suffix in RUNWATCH_OWN):
        return "runwatch's own database: not a run"
    return None


def pointer_reason(head: bytes) -> str | None:
    """The reason a file is a stand-in for another (a Git LFS or git-annex pointer), or None."""
    if head.startswith(LFS_POINTER):
        return LFS_REASON
    if len(head) <= POINTER_MAX_BYTES and any(marker in head for marker in ANNEX_MARKERS):
        return ANNEX_REASON
    return None


UNLISTABLE_REASON = (
    "a folder that cannot be listed: any run in it is not seen; it is looked at again at each rescan"
)
UNREADABLE_REASON = (
    "cannot be opened to read (permission denied, or an I/O error): it is looked at again at each rescan"
)


def reason_not_read(path: PurePath, size: int, head: bytes) -> str:
    """Why runwatch does not read this file, for a file no format claims (its first bytes in `head`):
    empty, a pointer, not a run file (code, docs, images, model weights), binary, or an unknown format."""
    if size == 0:
        return "empty"
    pointer = pointer_reason(head)
    if pointer is not None:
        return pointer
    if path.name == STOP_FILE:
        return STOP_FILE_REASON
    if path.name in NOT_RUN_NAMES or path.suffix.lower() in NOT_RUN_SUFFIXES:
        return "not a run file"
    if b"\x00" in head[:8192]:
        return "binary, not a format runwatch reads"
    return "unknown format: no metrics shape runwatch reads"


COPY_TAIL = ": not read, to count each value once"


def copy_reason(kind: str, read: list[str]) -> str:
    """Why a copy of a run's metrics (a CSV export, a console log, a W&B mirror) is not read."""
    return f"a {kind} copy of the metrics in {', '.join(read[:2])}{COPY_TAIL}"


def is_copy(reason: str) -> bool:
    """Whether a file was left unread as a copy of metrics the run reads elsewhere (expected, not a problem)."""
    return reason.endswith(COPY_TAIL)


def is_expected(reason: str) -> bool:
    """Whether a file left unread is no problem to show: a copy of metrics read elsewhere, or runwatch's own
    stop request (each still listed with its reason among the run's files)."""
    return is_copy(reason) or reason == STOP_FILE_REASON


def zero_points_warning(lines: int, points: int) -> str | None:
    """The warning for a metrics file that gave no point from the lines (records) it has (None when it gave
    some, or has no line yet): every line was read and none held a metric runwatch reads."""
    if points or not lines:
        return None
    noun = "line" if lines == 1 else "lines"
    return f"0 points from {lines} {noun}: none holds a metric runwatch reads in this format"


def runwatch_files_beside(db: Path, roots: list[Path]) -> list[tuple[Path, str]]:
    """runwatch's own files beside the database `db` when its folder is under one of `roots` (they are
    never read as runs; this lists them with the reason, so nothing is skipped in silence)."""
    folder = db.expanduser().resolve().parent
    if not any(folder.is_relative_to(Path(r).expanduser().resolve()) for r in roots):
        return []
    try:
        names = set(os.listdir(folder))
    except OSError:
        return []
    found = [(folder / n, runwatch_own_reason(n, names)) for n in sorted(names)]
    return [(path, why) for path, why in found if why is not None]
