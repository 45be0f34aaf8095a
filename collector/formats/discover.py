"""Which files under the watched roots are runs, and which of their files to read, in which format.

A run is a directory (its metrics files, `status.json`, `run.json`, checkpoint marker), or a single file that is a
whole run by itself (a renamed `trainer_state.json`, or a verl `<experiment>.jsonl` in a project folder that
holds only such files). Reads only names and the first few KiB of files whose name is ambiguous.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from collector import formats
from collector.formats import hf_lineage, layouts, peek, unread
from collector.formats.peek import classify
from collector.formats.run_ids import as_path, distinct_root_name, rel_id, root_of

# Folders that never hold a run's own metrics: checkpoints, model exports, other tools' state.
SKIP_DIRS = {"huggingface", "wandb", ".git", "node_modules", "__pycache__"}
_CHECKPOINT_DIR = re.compile(r"^(global_step_\d+|checkpoint-\d+|last-checkpoint)$")
_HF_CHECKPOINT_DIR = re.compile(r"^checkpoint-(\d+)$")

HF_STATE_NAME = layouts.HF_STATE_NAME
HF_LOGGING_DIR = layouts.HF_LOGGING_DIR
WANDB_DIR = "wandb"  # skipped, except its run folders (see `_wandb_offline_runs`)
# W&B's run folders: `offline-run-*`, and `run-*` of an online run, whose `run-*.wandb` is the same local file
WANDB_RUN_FOLDERS = ("offline-run-", "run-")


@dataclass(frozen=True, slots=True)
class Source:
    """One file of a run: `role` is "metrics" (ingested for points), "meta" (status, config, checkpoint
    marker) or "ignored" (a second view of metrics already ingested from a better source)."""

    path: Path
    format: str
    role: str
    # What the file's neighbours say that its parser needs (an HF console log's `logging_steps`, from the
    # trainer_state.json beside it): the parser's state on a read from the file's start.
    context: dict | None = None


@dataclass(slots=True)
class Run:
    """A run: `id` is stable across restarts of the collector (see `find_runs`); `format` is the format its
    points come from (or its first meta source's format while it has no metrics yet)."""

    id: str
    root: Path
    dir: Path
    format: str
    sources: list[Source] = field(default_factory=list)
    file: Path | None = None  # set when the run is one file by itself (its `dir` is that file's folder)
    # Files of the run's folder that are not read, each with the reason a person sees (see `unread`).
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    # One of the runs of an HF output folder several runs reused (`hf_lineage`): its newest state (None
    # while it has saved nothing), which tells its checkpoints from the other runs'.
    reused: bool = False
    own_state: Path | None = None

    @property
    def path(self) -> Path:
        """What a person opens to see the run: its file when it is one file, else its folder."""
        return self.file or self.dir

    def metrics_sources(self) -> list[Source]:
        return [s for s in self.sources if s.role == "metrics"]


def find_runs(roots: list[Path], unlisted: list[tuple[str, str]] | None = None) -> list[Run]:
    """Every run under `roots`, sorted by id.

    Run ids: the run directory's path under its root with `/` separators; the root itself as a run uses the
    root's folder name; a file that is a run by itself uses its path under the root without extension, or
    its stem when the root is that file. When ids from different roots collide, each gets its root's folder
    name as a prefix (`rootname/id`). Does not descend into checkpoint folders (`global_step_*`,
    `checkpoint-*`), `huggingface/`, `wandb/`, hidden folders, `node_modules`, `__pycache__`, nor follow
    symlinked folders. An HF Trainer output folder's `runs/*/events.out.tfevents.*` are sources of that run
    (format `hf_tensorboard`: its live view), not runs of their own. Each run lists the files of its folder
    it does not read, with the reason (`Run.skipped`). A folder that cannot be listed is appended to
    `unlisted` as (path, reason) (local roots; a remote listing failure is the host's state).
    """
    found: list[Run] = []
    for root in roots:
        root = as_path(root)
        if root.is_file():
            found.extend(_file_root_runs(root))
            continue

        def cannot_list(e: OSError) -> None:
            if unlisted is not None:
                unlisted.append((str(e.filename), f"{unread.UNLISTABLE_REASON} ({e.strerror or e})"))

        for dirpath, dirnames, filenames in _walk(root, cannot_list):
            dirpath = as_path(dirpath)
            has_wandb = WANDB_DIR in dirnames
            beside = set(filenames)
            dirnames[:] = sorted(
                d for d in dirnames if not _skipped_dir(d) and unread.runwatch_own_reason(d, beside) is None
            )
            if layouts.is_mlflow_run(dirpath):
                dirnames[:] = [
                    d for d in dirnames if d not in layouts.MLFLOW_PARTS
                ]  # read as the run's files
            if HF_LOGGING_DIR in dirnames and layouts.is_hf_output_folder(dirpath):
                dirnames.remove(HF_LOGGING_DIR)  # its TensorBoard files are sources of this folder's run
            if layouts.CONSOLE_DIR in dirnames and layouts.console_logs(dirpath, layouts.real(root)):
                dirnames.remove(layouts.CONSOLE_DIR)  # its console logs are files of this folder's run
            runs = _runs_in_dir(dirpath, root)
            found.extend(runs)
            if has_wandb:
                found.extend(_wandb_offline_runs(dirpath, root, runs))
    return _prefix_colliding_ids(found, roots)


def _wandb_offline_runs(folder: Path, root: Path, runs: list[Run]) -> list[Run]:
    """The W&B runs under `folder/wandb/`: each `offline-run-*` or `run-*` folder is a run, unless `folder` is a
    run with metrics files of its own (a trainer mirroring its metrics to W&B, as runwatch's does): then
    its `.wandb` files are a copy, listed on that run as not read."""
    offline = sorted(
        p for p in (folder / WANDB_DIR).glob("*run-*") if p.name.startswith(WANDB_RUN_FOLDERS) and p.is_dir()
    )
    own = next((r for r in runs if r.dir == folder and r.file is None and r.metrics_sources()), None)
    if own is None:
        return [run for path in offline for run in _runs_in_dir(path, root)]
    read = [s.path.name for s in own.metrics_sources()]
    own.skipped.extend(
        (f, unread.copy_reason("W&B", read)) for path in offline for f in sorted(path.glob("run-*.wandb"))
    )
    return []


def run_for_path(path: Path, roots: list[Path]) -> Run | None:
    """The run a changed file belongs to, or None when no run reads it.

    Cheap: looks at the file's own folder only (plus the other roots, to keep ids the same as
    `find_runs`). A file inside a run's checkpoint folder (`global_step_N/...`, `checkpoint-N/...`) belongs
    to that run, and so does such a folder itself, so checkpoint changes can be noticed; files under `wandb/`,
    `.git` and the like belong to none.
    """
    path = as_path(path)
    root = root_of(path, roots)
    if root is None:
        return None
    if root == path:
        runs = _file_root_runs(root) if root.is_file() else []
        return _with_unique_id(runs[0], roots) if runs else None
    rel_parts = path.relative_to(root).parts
    if len(rel_parts) >= 3 and rel_parts[-3] == HF_LOGGING_DIR:
        # Maybe the HF Trainer's TensorBoard logging under an output folder: it belongs to that folder's run.
        output_dir = root.joinpath(*rel_parts[:-3])
        for run in _runs_in_dir(output_dir, root):
            if run.dir == output_dir and any(source.path == path for source in run.sources):
                return _with_unique_id(run, roots)
    if len(rel_parts) >= 2 and rel_parts[-2] == layouts.CONSOLE_DIR:
        # Maybe a console log in an HF output folder's logs/: a file of that folder's run.
        output_dir = root.joinpath(*rel_parts[:-2])
        if any(p == path for p, _ in layouts.console_logs(output_dir, layouts.real(root))):
            run = next(
                (r for r in _runs_in_dir(output_dir, root) if r.dir == output_dir and r.file is None), None
            )
            return _with_unique_id(run, roots) if run is not None else None
    # Find the folder that would be the run: the file's own folder, or the folder above a checkpoint folder
    # (or above an MLflow run's metrics/, params/, tags/).
    run_dir = path.parent
    for i in range(len(rel_parts) - 2, 0, -1):
        if rel_parts[i] in layouts.MLFLOW_PARTS and layouts.is_mlflow_run(root.joinpath(*rel_parts[:i])):
            run_dir = root.joinpath(*rel_parts[:i])
            break
    in_checkpoint = False
    for i, part in enumerate(rel_parts):
        if part == WANDB_DIR and i == len(rel_parts) - 3 and rel_parts[i + 1].startswith(WANDB_RUN_FOLDERS):
            # A W&B offline run's file: a run of its own unless the folder above wandb/ is a run (a copy).
            above = root.joinpath(*rel_parts[:i])
            offline = _wandb_offline_runs(above, root, _runs_in_dir(above, root))
            found = next((r for r in offline if any(x.path == path for x in r.sources)), None)
            return _with_unique_id(found, roots) if found else None
        if i < len(rel_parts) - 1 and (part in SKIP_DIRS or part.startswith(".")):
            return None
        if i < len(rel_parts) - 1 and part.endswith(unread.SCRATCH_SUFFIX):
            beside = root.joinpath(*rel_parts[:i], part.removesuffix(unread.SCRATCH_SUFFIX))
            if beside.is_file():
                return None  # runwatch's own scratch folder beside its database
        if _CHECKPOINT_DIR.match(part):  # a checkpoint folder itself (created, deleted) or a file in one
            run_dir = root.joinpath(*rel_parts[:i])
            in_checkpoint = True
            break
    if layouts.under_hf_logging(run_dir, root):
        return None  # find_runs does not look in there either
    runs = _runs_in_dir(run_dir, root)
    folder_id = rel_id(run_dir, root)
    for run in runs:
        if in_checkpoint and run.id == folder_id:
            return _with_unique_id(run, roots)
        if any(source.path == path for source in run.sources):
            return _with_unique_id(run, roots)
    return None


def _runs_in_dir(folder: Path, root: Path) -> list[Run]:
    """The runs one folder defines: one run for the folder, plus one per file that is a run by itself."""
    real_root = layouts.real(root)
    if not layouts.stays_inside(folder, real_root):
        return []  # reached through a folder link out of the root (a changed file's event path)
    try:
        entries = sorted(_scandir(folder), key=lambda e: e.name)
    except OSError:
        return []
    files: list[tuple[Path, str]] = []
    skipped: list[tuple[Path, str]] = []
    claimed = None  # a format a skipped file's name claims (a pointer in place of an event file)
    hf_checkpoints: list[tuple[int, Path]] = []
    names = {e.name for e in entries}
    for entry in entries:
        try:
            is_file = entry.is_file()
            is_dir = not is_file and entry.is_dir(follow_symlinks=False)
            if is_file and entry.is_symlink() and not layouts.stays_inside(folder / entry.name, real_root):
                # runwatch reads only what it was given; the link is listed, never skipped in silence
                skipped.append((Path(entry.path), unread.OUTSIDE_ROOT_REASON))
                named, _ = formats.by_name(Path(entry.name))
                claimed = claimed or (named.name if named else None)  # so its folder's run lists it
                continue
            size = entry.stat().st_size if is_file else 0
            if not is_file and not is_dir:  # listed on its folder's run, never opened (a FIFO would block)
                why = unread.LINKED_FOLDER_REASON if entry.is_dir() else unread.NOT_A_FILE_REASON
                skipped.append((Path(entry.path), why))
                continue
        except OSError:
            continue
        if is_file:
            path = folder / entry.name
            own = unread.runwatch_own_reason(entry.name, names)
            if own is not None:
                skipped.append((path, own))  # its alert log is JSONL: never read back as a run
                continue
            fmt = classify(path)
            pointer = peek.pointer(path, size)
            if fmt is not None and pointer is None:
                files.append((path, fmt))
                continue
            claimed = claimed or fmt
            head = peek.head(path, 8192) if size else b""
            reason = pointer or (
                unread.UNREADABLE_REASON if head is None else unread.reason_not_read(path, size, head)
            )
            skipped.append((path, reason))
        elif is_dir and (match := _HF_CHECKPOINT_DIR.match(entry.name)):
            state = folder / entry.name / HF_STATE_NAME
            if state.is_file() and layouts.stays_inside(state, real_root):
                hf_checkpoints.append((int(match.group(1)), state))

    if layouts.is_mlflow_run(folder):
        files.extend(layouts.mlflow_files(folder, real_root))
    folder_files: list[tuple[Path, str]] = []
    runs: list[Run] = []
    # The training platform's callback writes `{job_id}_metrics.jsonl` beside `{job_id}_status.json`, for
    # many jobs in one folder: each job is a run (`folder/job_id`).
    jobs = layouts.platform_jobs(files)
    for job, job_files in jobs.items():
        metrics_file, metrics_format = next((p, fmt) for p, fmt in job_files if not _is_meta(fmt))
        sources = [Source(p, fmt, "meta" if _is_meta(fmt) else "metrics") for p, fmt in job_files]
        runs.append(Run(rel_id(folder / job, root), root, folder, metrics_format, sources, file=metrics_file))
    files = [(p, fmt) for p, fmt in files if not any((p, fmt) in f for f in jobs.values())]
    # A folder holding nothing readable but JSONL files is a verl project folder (`<project>/<experiment>.jsonl`,
    # verl's default): one run per file, whatever the count, so ids stay put when the next experiment
    # arrives. A folder with other files beside its JSONL (runwatch's layout, logs, CSVs) is one run.
    hf_file_runs = {p for p, fmt in files if fmt == "hf_trainer_state" and p.name != HF_STATE_NAME}
    run_folder = (
        hf_checkpoints or layouts.is_mlflow_run(folder) or any(p.name == "metrics.jsonl" for p, _ in files)
    )
    if not run_folder and layouts.unrelated_files(files):
        # A flat folder of several runs' files (logs gathered side by side): one run per file.
        hf_file_runs |= {p for p, fmt in files if not _is_meta(fmt)}
    jsonl_are_runs = not hf_checkpoints and all(fmt == "jsonl" or p in hf_file_runs for p, fmt in files)
    jsonl_are_runs = jsonl_are_runs and not any(p.name == "metrics.jsonl" for p, _ in files)
    file_runs: dict[str, Run] = {}
    for path, fmt in files:
        if path in hf_file_runs or (fmt == "jsonl" and jsonl_are_runs):
            # `<experiment>.jsonl.1`, a rotated earlier life, belongs to the run of `<experiment>.jsonl`.
            base = Path(formats.unrotated(path))
            run_id = rel_id(base.with_suffix(""), root)
            if run_id in file_runs and formats.unrotated(file_runs[run_id].path) != base:
                run_id = rel_id(base, root)  # `x.log` beside `x.jsonl`: each keeps its whole name
            if run_id in file_runs:
                file_runs[run_id].sources.append(Source(path, fmt, "metrics"))
                continue
            file_runs[run_id] = Run(run_id, root, folder, fmt, [Source(path, fmt, "metrics")], file=path)
            runs.append(file_runs[run_id])
        else:
            folder_files.append((path, fmt))
    split = hf_lineage.split_folder(folder, real_root, folder_files, hf_checkpoints)
    if split:
        # Several runs wrote this output folder: the current one is the folder's run, the others their own.
        current = split[-1]
        top = folder / HF_STATE_NAME
        folder_files = [(p, fmt) for p, fmt in folder_files if p != top]
        folder_files += [(current.source, "hf_trainer_state")] if current.source else []
        folder_files += [(life, "hf_tensorboard") for life in current.lives]
        for other in split[:-1]:
            files = [(other.source, "hf_trainer_state"), *((life, "hf_tensorboard") for life in other.lives)]
            sources = [Source(p, fmt, "metrics") for p, fmt in files]
            run_id = rel_id(folder, root) + f"/run-to-{other.last_step}"
            run_id += (
                f"-{sum(r.id.startswith(run_id) for r in runs) + 1}"
                if any(r.id == run_id for r in runs)
                else ""
            )
            fmt = "hf_trainer_state"
            runs.append(
                Run(
                    run_id, root, folder, fmt, sources, file=other.source, reused=True, own_state=other.source
                )
            )
    elif hf_checkpoints and not any(fmt == "hf_trainer_state" for _, fmt in folder_files):
        # HF Trainer output folder without a top-level state: its newest checkpoint's state is the history
        # (the most recently written: a resume rewound to an earlier checkpoint left later ones behind; in a
        # copied or cloned folder, the highest step: `hf_lineage.latest`).
        folder_files.append(
            (hf_lineage.latest([(path, step) for step, path in hf_checkpoints]), "hf_trainer_state")
        )

    # An HF output folder's logs/ of console logs: the run's console (a copy of its states' metrics).
    folder_files += layouts.console_logs(folder, real_root)
    if any(fmt != "checkpoint_marker" for _, fmt in folder_files) or (claimed and not runs) or split:
        run = _folder_run(folder, root, folder_files, claimed)
        if split:
            run.reused, run.own_state = True, split[-1].source
        elif _is_hf_output(run):
            # The HF Trainer's own TensorBoard logging: the run's live view (trainer_state.json is written
            # only at saves), read into the trainer_state's metric names (see `hf_tensorboard`).
            run.sources.extend(
                Source(path, "hf_tensorboard", "metrics")
                for path in layouts.hf_logging_files(folder, real_root)
            )
        if any(s.format == "hf_console" and s.role == "metrics" for s in run.sources):
            own = split[-1].source if split else None
            context = hf_lineage.console_context(own, [p for _, p in sorted(hf_checkpoints)], files)
            run.sources = [
                replace(s, context=context) if s.format == "hf_console" else s for s in run.sources
            ]
        run.skipped = [*_copies_not_read(run), *skipped]
        runs.insert(0, run)
    return runs


def _folder_run(folder: Path, root: Path, files: list[tuple[Path, str]], claimed: str | None = None) -> Run:
    # Every metrics file of a run is read (one value per (metric, step) is the store's rule), except copies
    # (console logs, CSV exports) when the run has another metrics file: they would repeat its values.
    # Without another metrics file, the best-ranked copy format is read (a CSV history over a console log).
    # A copy is one only of a file that holds points: a progress-only trainer_log.jsonl (no loss in it) does
    # not make the console log beside it a copy.
    metrics = {fmt for _, fmt in files if not _is_meta(fmt)}
    read = {fmt for fmt in metrics if not formats.get(fmt).copy}
    if read and not any(peek.holds_points(p, fmt) for p, fmt in files if fmt in read):
        read |= {fmt for fmt in metrics if formats.get(fmt).copy}
    if not read and metrics:
        read = {min(metrics, key=formats.rank)}
    sources = []
    for path, fmt in files:
        role = "meta" if _is_meta(fmt) else "metrics" if fmt in read else "ignored"
        sources.append(Source(path, fmt, role))
    read = sorted({s.format for s in sources if s.role == "metrics"}, key=formats.rank)
    present = sorted({fmt for _, fmt in files}, key=formats.rank)
    run_format = (read or present or [claimed])[0]
    return Run(rel_id(folder, root), root, folder, run_format, sources)


def _copies_not_read(run: Run) -> list[tuple[Path, str]]:
    read = [s.path.name for s in run.sources if s.role == "metrics"]
    return [(s.path, unread.copy_reason(s.format, read)) for s in run.sources if s.role == "ignored"]


def _is_meta(fmt: str) -> bool:
    return formats.get(fmt).role == "meta"


def _is_hf_output(run: Run) -> bool:
    return any(s.format == "hf_trainer_state" for s in run.sources)


def _file_root_runs(path: Path) -> list[Run]:
    fmt = classify(path)
    if fmt is None or _is_meta(fmt):
        return []
    return [Run(path.stem, path, path.parent, fmt, [Source(path, fmt, "metrics")], file=path)]


def _prefix_colliding_ids(runs: list[Run], roots: list[Path]) -> list[Run]:
    roots_of_id: dict[str, set[Path]] = {}
    for run in runs:
        roots_of_id.setdefault(run.id, set()).add(run.root)
    for run in runs:
        colliding = roots_of_id[run.id]
        if len(colliding) > 1:
            # (two roots of one name, `/a/outputs` and `/b/outputs`, or two `metrics.jsonl` file roots, must
            # not merge their runs into one: the prefix takes parent folders until it tells them apart)
            run.id = f"{distinct_root_name(run.root, colliding)}/{run.id}"
    return sorted(runs, key=lambda r: r.id)


def _with_unique_id(run: Run, roots: list[Path]) -> Run:
    """Prefix the run's id with its root's name when another root has a run with the same id (the prefix
    `find_runs` gives it: it takes the colliding roots' names into account)."""
    colliding = {run.root}
    for other in roots:
        other = as_path(other)
        if other == run.root:
            continue
        if other.is_file():
            others = _file_root_runs(other)
        else:
            # The only folders of the other root that could define a run with this id.
            folders = {other, other / run.id, (other / run.id).parent}
            folders = {f for f in folders if f.is_dir() and not layouts.under_hf_logging(f, other)}
            others = [o for folder in folders for o in _runs_in_dir(folder, other)]
        if any(o.id == run.id for o in others):
            colliding.add(other)
    if len(colliding) > 1:
        run.id = f"{distinct_root_name(run.root, colliding)}/{run.id}"
    return run


def _scandir(folder: Path):
    return os.scandir(folder) if isinstance(folder, Path) else folder.scandir()


def _walk(root: Path, onerror=None):
    return os.walk(root, onerror=onerror) if isinstance(root, Path) else root.walk()


def _skipped_dir(name: str) -> bool:
    return name in SKIP_DIRS or name.startswith(".") or bool(_CHECKPOINT_DIR.match(name))
