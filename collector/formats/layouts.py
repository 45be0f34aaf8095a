"""Trainers' folder layouts that discovery recognises: the HF Trainer's output folder (its `runs/` TensorBoard
logging and a `logs/` folder of console logs belong to it), MLflow's file-store run folders, and links that
must not lead out of a watched root."""

from __future__ import annotations

import re
from pathlib import Path

from collector import formats
from collector.formats import peek

HF_STATE_NAME = "trainer_state.json"
HF_LOGGING_DIR = "runs"
# Where people send an HF training script's console (`> outputs/logs/train.log`): a folder of console logs
# only, beside the output folder's states, is the run's console, not a run of its own.
CONSOLE_DIR = "logs"
_HF_CHECKPOINT_DIR = re.compile(r"^checkpoint-(\d+)$")
# An MLflow file-store run folder (`mlruns/<experiment>/<run>/`): its `meta.yaml` and these folders.
MLFLOW_PARTS = ("metrics", "params", "tags")
STATUS_SUFFIX, METRICS_SUFFIX = "_status.json", "_metrics.jsonl"


def real(path: Path) -> Path:
    try:
        return path.resolve()
    except OSError:
        return path


def stays_inside(path: Path, real_root: Path) -> bool:
    """Whether `path`, its symlinks followed, is still under the (resolved) root."""
    return real(path).is_relative_to(real_root)


def is_hf_output_folder(folder: Path) -> bool:
    """Whether `folder` is an HF Trainer output folder: a trainer_state.json, at the top or in a checkpoint."""
    if (folder / HF_STATE_NAME).is_file():
        return True
    return any(
        _HF_CHECKPOINT_DIR.match(c.name) and (c / HF_STATE_NAME).is_file()
        for c in folder.glob("checkpoint-*")
    )


def under_hf_logging(folder: Path, root: Path) -> bool:
    """Whether `folder` is in (or is) the `runs/` logging folder of an HF output folder under `root`."""
    for ancestor in (folder, *folder.parents):
        if ancestor == root or not ancestor.is_relative_to(root):
            return False
        if ancestor.name == HF_LOGGING_DIR and is_hf_output_folder(ancestor.parent):
            return True
    return False


def hf_logging_files(output_dir: Path, real_root: Path) -> list[Path]:
    """TensorBoard files the HF Trainer writes under `<output_dir>/runs/<time_host>/`: the same metrics as
    its trainer_state.json (which also names the best checkpoint), so they are a duplicate view of the run
    rather than a run of their own."""
    return sorted(
        p
        for p in output_dir.glob(f"{HF_LOGGING_DIR}/*/events.out.tfevents.*")
        if p.is_file() and stays_inside(p, real_root)
    )


def console_logs(output_dir: Path, real_root: Path) -> list[tuple[Path, str]]:
    """The console logs in `<output_dir>/logs/` of an HF output folder, with their formats, when that folder
    holds nothing else (a file of another kind, a subfolder: the folder is what it looks like by itself)."""
    folder = output_dir / CONSOLE_DIR
    if not folder.is_dir() or not stays_inside(folder, real_root) or not is_hf_output_folder(output_dir):
        return []
    found = []
    for path in sorted(folder.glob("*")):
        fmt = peek.classify(path) if path.is_file() and stays_inside(path, real_root) else None
        if fmt is None or not formats.get(fmt).copy or formats.get(fmt).lines is False:
            return []
        found.append((path, fmt))
    return found


def is_mlflow_run(folder: Path) -> bool:
    return (folder / "meta.yaml").is_file() and (folder / "metrics").is_dir()


def mlflow_files(folder: Path, real_root: Path) -> list[tuple[Path, str]]:
    """An MLflow run's metric, param and tag files (a metric named `train/loss` is `metrics/train/loss`)."""
    out = []
    for part in MLFLOW_PARTS:
        for path in sorted((folder / part).rglob("*")):
            if path.is_file() and stays_inside(path, real_root) and (fmt := peek.classify(path)) is not None:
                out.append((path, fmt))
    return out


def platform_jobs(files: list[tuple[Path, str]]) -> dict[str, list[tuple[Path, str]]]:
    """The training platform's jobs among a folder's files: `{job_id}_metrics.jsonl` with its
    `{job_id}_status.json` (the status file first), by job id; a metrics file without a status file is not
    one (it may be any JSONL)."""
    by_name = {p.name: (p, fmt) for p, fmt in files}
    jobs = {}
    for name, (path, fmt) in by_name.items():
        if fmt == "platform_status" and name.endswith(STATUS_SUFFIX):
            job = name[: -len(STATUS_SUFFIX)]
            metrics = by_name.get(job + METRICS_SUFFIX)
            if metrics is not None and metrics[1] == "jsonl":
                jobs[job] = [(path, fmt), metrics]
    return jobs


def unrelated_files(files: list[tuple[Path, str]]) -> bool:
    """Whether a folder's metrics files are several runs' gathered side by side, not one run's: a format
    comes in two files or more that are not one log's lives or splits (`train.log` and its rotated
    `train.log.1`, the lives a format declares (`Format.lives`: TensorBoard's `events.out.tfevents.*`,
    torchtune's `log_<time>.txt`), `training_history.csv` and `validation_history.csv`), as in a flat
    folder of collected logs
    (`sft.log` beside `dpo.log`, nine `*trainer_log.jsonl`). A folder holding a run's own status or config
    (runwatch's `status.json`, `run.json`) is one run whatever it holds."""
    families: dict[str, set[str]] = {}
    for path, fmt in files:
        described = formats.get(fmt)
        if described.role == "meta":
            if fmt != "checkpoint_marker":
                return False
            continue
        families.setdefault(fmt, set()).add(_family(path, fmt))
    return any(len(lives) > 1 for lives in families.values())


# Words that name a split of one run's logs (`training_history.csv` beside `validation_history.csv`).
_SPLIT_WORDS = re.compile(r"train(ing)?|val(idation|id)?|eval(uation)?|test")


def _family(path: Path, fmt: str) -> str:
    """The log a file is part of: its name without a rotation suffix or split words; the files of one
    folder named as its format's lives are one log."""
    if formats.is_life(path, fmt):
        return "lives"
    return _SPLIT_WORDS.sub("", formats.unrotated(path).name.lower())
