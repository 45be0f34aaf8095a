"""Where a run's checkpoints are, beyond the folders directly under it, and which of them it wrote.

verl saves to `trainer.default_local_dir`, by default `checkpoints/<project_name>/<experiment_name>/` under the
directory it was started from: a run folder holding such a tree, or whose `run.json` or Hydra config
(`.hydra/config.yaml`) names the folder, has its checkpoints there. The Hub's `hub_strategy="checkpoint"`
keeps the latest HF checkpoint in `last-checkpoint/`. (Which HF checkpoints of an output folder reused by
several runs are a run's own: `formats.hf_lineage`.) Reads names and small JSON/YAML files only.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

LAST_CHECKPOINT = "last-checkpoint"
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
