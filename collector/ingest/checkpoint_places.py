"""Where a run's checkpoints are, beyond the folders directly under it, and which of them it wrote.

verl saves to `trainer.default_local_dir`, by default `checkpoints/<project_name>/<experiment_name>/` under the
directory it was started from: a run folder holding such a tree, or whose `run.json` or Hydra config
(`.hydra/config.yaml`) names the folder, has its checkpoints there. The Hub's `hub_strategy="checkpoint"`
keeps the latest HF checkpoint in `last-checkpoint/`. One HF `output_dir` reused by several runs holds
checkpoints each run's `trainer_state.json` describes with its own settings: only the run's own are its.
Reads names and small JSON/YAML files only.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

LAST_CHECKPOINT = "last-checkpoint"
HF_STATE = "trainer_state.json"
# The settings that tell two HF runs in one output folder apart (a run keeps them across its checkpoints).
RUN_SETTINGS = ("max_steps", "num_train_epochs", "train_batch_size", "logging_steps", "save_steps")
_YAML_DIR = re.compile(r"^\s*default_local_dir:\s*['\"]?([^'\"#\n]+?)['\"]?\s*(?:#.*)?$", re.MULTILINE)
_YAML_EXPERIMENT = re.compile(r"^\s*experiment_name:\s*['\"]?([^'\"#\n]+?)['\"]?\s*(?:#.*)?$", re.MULTILINE)


def checkpoint_folders(run_dir: Path) -> list[Path]:
    """The folders whose `global_step_N/` / `checkpoint-N/` children are this run's checkpoints: the run
    folder, the folder its config names (`default_local_dir`, absolute or relative to the run folder), and
    `checkpoints/<project>/<experiment>/` under it (the experiment the config names, else the only one)."""
    found = [run_dir]
    configured, experiment = _configured(run_dir)
    if configured is not None:
        # (joined to the run folder: relative to it, or an absolute path on the run's own machine)
        found.append(run_dir / (Path(configured).expanduser() if isinstance(run_dir, Path) else configured))
    tree = sorted(p for p in run_dir.glob("checkpoints/*/*") if p.is_dir())
    if experiment is not None and any(p.name == experiment for p in tree):
        tree = [p for p in tree if p.name == experiment]
    if len(tree) == 1:
        found.append(tree[0])
    out: list[Path] = []
    for folder in found:
        if folder.is_dir() and all(folder.resolve() != o.resolve() for o in out):
            out.append(folder)
    return out


def hf_settings(state_path: Path) -> dict | None:
    """An HF `trainer_state.json`'s run settings (`RUN_SETTINGS`) and its first logged entry, or None when
    it cannot be read."""
    try:
        state = json.loads(state_path.read_text())
    except (OSError, ValueError, RecursionError):
        return None
    if type(state) is not dict:
        return None
    history = state.get("log_history")
    first = history[0] if type(history) is list and history else None
    return {key: state.get(key) for key in RUN_SETTINGS} | {
        "first_log": first,
        "global_step": state.get("global_step"),
    }


def other_run(own: dict | None, theirs: dict | None) -> str | None:
    """Why a checkpoint whose state is `theirs` was written by another run than the one `own` describes
    (None when it is the run's own, or either is unknown): different settings, or a different first log."""
    if own is None or theirs is None:
        return None
    for key in RUN_SETTINGS:
        if own.get(key) is not None and theirs.get(key) is not None and own[key] != theirs[key]:
            return f"written by another run ({key} {theirs[key]}, this run's {own[key]})"
    if own.get("first_log") and theirs.get("first_log") and own["first_log"] != theirs["first_log"]:
        return "written by another run (its history starts differently)"
    return None


def _configured(run_dir: Path) -> tuple[str | None, str | None]:
    """(default_local_dir, experiment_name) from run.json (anywhere in it) or `.hydra/config.yaml`."""
    try:
        config = json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError, RecursionError):
        config = None
    if config is not None:
        folder, experiment = _find_key(config, "default_local_dir"), _find_key(config, "experiment_name")
        if folder is not None or experiment is not None:
            return folder, experiment
    try:
        text = (run_dir / ".hydra" / "config.yaml").read_text(errors="replace")
    except OSError:
        return None, None
    folder, experiment = _YAML_DIR.search(text), _YAML_EXPERIMENT.search(text)
    return (folder.group(1) if folder else None), (experiment.group(1) if experiment else None)


def _find_key(obj: object, key: str) -> str | None:
    if type(obj) is dict:
        if type(obj.get(key)) is str:
            return obj[key]
        for value in obj.values():
            found = _find_key(value, key)
            if found is not None:
                return found
    return None
