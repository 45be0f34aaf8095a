"""The checkpoint index of a run folder: verl `global_step_N/` and Hugging Face `checkpoint-N/` folders.

A checkpoint is complete when it can be loaded as a model without the trainer: a config, weights whose files
are whole, and for verl a tokenizer (verl's `huggingface/` export is what people deploy). Reads the
filesystem only: names, sizes, safetensors headers, zip directories; never the weights themselves.
"""

from __future__ import annotations

import json
import os
import re
import struct
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from collector.formats.hf_lineage import HF_STATE, latest, other_run, state_facts
from collector.ingest.checkpoint_places import LAST_CHECKPOINT, checkpoint_folders

MARKER_NAME = "latest_checkpointed_iteration.txt"
_VERL_DIR = re.compile(r"^global_step_(\d+)$")
_HF_DIR = re.compile(r"^checkpoint-(\d+)$")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
# A safetensors header larger than this is not a header but a broken length field.
_MAX_HEADER_BYTES = 100 * 1024 * 1024


@dataclass(slots=True)
class Checkpoint:
    """One checkpoint folder. `bytes` is the total size of the files under it; `problem` says, in words,
    why it is not complete (None when it is)."""

    step: int
    path: Path
    bytes: int
    complete: bool
    kind: str  # "verl" or "hf"
    problem: str | None = None
    # HF: the folder holds the trainer's trainer_state.json but no weights (what people commit to git):
    # the run saved this checkpoint, its weights are elsewhere or gone.
    state_only: bool = False


@dataclass(slots=True)
class CheckpointIndex:
    """The checkpoints of a run by step, and the step verl's `latest_checkpointed_iteration.txt` names."""

    checkpoints: list[Checkpoint] = field(default_factory=list)
    latest_marker: int | None = None
    # HF checkpoints in the folder that another run wrote (step, path, why): never this run's to offer.
    other_runs: list[tuple[int, Path, str]] = field(default_factory=list)


def scan_checkpoints(run_dir: Path, own_state: Path | None = None, reused: bool = False) -> CheckpointIndex:
    """Index the run's checkpoint folders, sorted by step: those directly under `run_dir`, in the folder its
    config names and in verl's `checkpoints/<project>/<experiment>/` tree under it (see `checkpoint_places`),
    and `last-checkpoint/` at the step its trainer_state.json names (unless that `checkpoint-N/` is there too).
    HF checkpoints another run wrote into the same output folder are left out (listed in `other_runs`): those
    whose trainer_state.json is not of the run `own_state` is (when discovery split a `reused` output folder
    into runs, see `formats.hf_lineage`; with `reused` and no `own_state`, a run that saved nothing yet,
    every HF checkpoint with a state is another run's), else not of the run of the folder's top-level state,
    else of its most recently written checkpoint state.

    verl `global_step_N/` is complete when its `huggingface/` folder (or `actor/huggingface/`, as verl's RL
    trainer writes it) holds `config.json`, a tokenizer (`tokenizer.json` or `tokenizer_config.json`) and whole
    weights; without a `huggingface/` folder it is indexed as incomplete ("no huggingface/ folder (model
    shards only)"). HF `checkpoint-N/` is complete with `config.json` and whole weights, or, for LoRA,
    `adapter_config.json` and whole adapter weights. Weights are whole when every `*.safetensors` file's
    header parses and its size matches the header, every shard an index names exists, and every
    `pytorch_model*.bin` / `adapter_model.bin` is a complete zip archive. A missing or unreadable `run_dir`
    gives an empty index; never raises on what it finds.
    """
    index = CheckpointIndex()
    for folder in checkpoint_folders(run_dir):
        if index.latest_marker is None:
            index.latest_marker = _read_marker(folder / MARKER_NAME)
        _scan_folder(folder, index)
    _drop_other_runs(run_dir, index, own_state, reused)
    index.checkpoints.sort(key=lambda c: (c.step, c.kind))
    return index


def _scan_folder(folder: Path, index: CheckpointIndex) -> None:
    """Add the checkpoint folders directly under `folder` (a step already indexed is kept once)."""
    try:
        entries = sorted(
            os.scandir(folder) if isinstance(folder, Path) else folder.scandir(), key=lambda e: e.name
        )
    except ConnectionError:
        raise  # a remote host out of reach: no index is not an empty index
    except OSError:
        return
    seen = {(c.step, c.kind) for c in index.checkpoints}
    for entry in entries:
        if not entry.is_dir(follow_symlinks=False):
            continue
        path = folder / entry.name
        if match := _VERL_DIR.match(entry.name):
            step, kind = int(match.group(1)), "verl"
        elif match := _HF_DIR.match(entry.name):
            step, kind = int(match.group(1)), "hf"
        elif entry.name == LAST_CHECKPOINT:
            settings = state_facts(path / HF_STATE)
            step, kind = (settings or {}).get("global_step"), "hf"
            if type(step) is not int:
                continue
        else:
            continue
        if (step, kind) in seen:
            continue  # last-checkpoint/ is the Hub's copy of a checkpoint-N/ still there
        seen.add((step, kind))
        problem = _verl_problem(path) if kind == "verl" else _hf_problem(path)
        state_only = kind == "hf" and problem is not None and _state_only(path)
        if state_only:
            problem = f"only {HF_STATE} (no weights nor config): the weights of this save are not here"
        checkpoint = Checkpoint(step, path, _total_bytes(path), problem is None, kind, problem, state_only)
        index.checkpoints.append(checkpoint)


def _drop_other_runs(run_dir: Path, index: CheckpointIndex, own_state: Path | None, reused: bool) -> None:
    """Leave out HF checkpoints another run wrote into the same output folder (see `scan_checkpoints`)."""
    hf = [c for c in index.checkpoints if c.kind == "hf" and (c.path / HF_STATE).is_file()]
    top = run_dir / HF_STATE
    if not reused:
        if len(hf) < 2 and not top.is_file():
            return
        own_state = top if top.is_file() else latest([(c.path / HF_STATE, c.step) for c in hf])
    own = state_facts(own_state) if own_state is not None else None
    for c in hf:
        theirs = state_facts(c.path / HF_STATE)
        why = (
            other_run(own, theirs)
            if own is not None
            else "written by another run (this one saved nothing yet)"
        )
        if why is not None:
            index.checkpoints.remove(c)
            index.other_runs.append((c.step, c.path, why))


def _verl_problem(folder: Path) -> str | None:
    export = next((p for p in (folder / "huggingface", folder / "actor" / "huggingface") if p.is_dir()), None)
    if export is None:
        return "no huggingface/ folder (model shards only)"
    where = export.relative_to(folder).as_posix()
    if not (export / "config.json").is_file():
        return f"{where}/ has no config.json"
    if not any((export / name).is_file() for name in _TOKENIZER_FILES):
        return f"{where}/ has no tokenizer (tokenizer.json or tokenizer_config.json)"
    return _weights_problem(export, where)


def _hf_problem(folder: Path) -> str | None:
    if (folder / "adapter_config.json").is_file():
        return _weights_problem(folder, folder.name, adapter=True)
    if not (folder / "config.json").is_file():
        return "no config.json (nor adapter_config.json for a LoRA adapter)"
    return _weights_problem(folder, folder.name)


def _state_only(folder: Path) -> bool:
    """Whether an HF checkpoint folder has its trainer_state.json but no weights file of any kind."""
    try:
        names = os.listdir(folder) if isinstance(folder, Path) else [e.name for e in folder.scandir()]
    except ConnectionError:
        raise
    except OSError:
        return False
    # (optimizer.pt, rng_state.pth, training_args.bin are the trainer's, not the model's)
    weights = [n for n in names if n.startswith(("model", "pytorch_model", "adapter_model"))]
    return HF_STATE in names and not weights


def _weights_problem(folder: Path, where: str, adapter: bool = False) -> str | None:
    """Why the weights in `folder` are not whole, or None when they are."""
    prefixes = ("adapter_model",) if adapter else ("model", "pytorch_model")
    try:
        names = sorted(os.listdir(folder) if isinstance(folder, Path) else [e.name for e in folder.scandir()])
    except ConnectionError:
        raise
    except OSError as err:
        return f"{where}/ cannot be listed: {err.strerror}"
    safetensors = [n for n in names if n.endswith(".safetensors") and n.startswith(prefixes)]
    bins = [n for n in names if n.endswith(".bin") and n.startswith(prefixes)]
    if not safetensors and not bins:
        wanted = (
            "adapter_model.safetensors or adapter_model.bin"
            if adapter
            else "*.safetensors or pytorch_model*.bin"
        )
        return f"{where}/ has no weights ({wanted})"
    for name in safetensors:
        problem = safetensors_problem(folder / name)
        if problem:
            return f"{where}/{name}: {problem}"
    for name in bins:
        if not _is_zip(folder / name):
            return f"{where}/{name}: not a complete zip archive (truncated?)"
    for index_name in (n for n in names if n.endswith((".safetensors.index.json", ".bin.index.json"))):
        missing = _missing_shards(folder, index_name)
        if missing:
            return f"{where}/{index_name} names shards that are missing: {', '.join(missing)}"
    return None


def safetensors_problem(path: Path) -> str | None:
    """Why a `.safetensors` file is not whole, or None: the header is an 8-byte little-endian length and that
    many bytes of JSON, and the tensors' data offsets must end exactly at the end of the file."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(8)
            if len(head) < 8:
                return "shorter than a safetensors header (truncated?)"
            (length,) = struct.unpack("<Q", head)
            if length > min(size - 8, _MAX_HEADER_BYTES):
                return f"header length {length} does not fit in a {size}-byte file (truncated?)"
            header = json.loads(f.read(length))
    except ConnectionError:
        raise
    except OSError as err:
        return f"cannot be read: {err.strerror}"
    except (UnicodeDecodeError, json.JSONDecodeError):
        return "header is not valid JSON (truncated or not safetensors)"
    if type(header) is not dict:
        return "header is not a JSON object"
    data_end = 0
    for name, tensor in header.items():
        if name == "__metadata__":
            continue
        offsets = tensor.get("data_offsets") if type(tensor) is dict else None
        if not (type(offsets) is list and len(offsets) == 2 and all(type(o) is int for o in offsets)):
            return f"tensor {name!r} has no valid data_offsets"
        data_end = max(data_end, offsets[1])
    expected = 8 + length + data_end
    if size != expected:
        return f"{size} bytes but the header describes {expected} (truncated?)"
    return None


def _is_zip(path: Path) -> bool:
    """Whether the file is a complete zip archive (its end-of-archive directory is there): a ranged read."""
    try:
        with path.open("rb") as f:
            return zipfile.is_zipfile(f)
    except ConnectionError:
        raise
    except OSError:
        return False


def _missing_shards(folder: Path, index_name: str) -> list[str]:
    try:
        weight_map = json.loads((folder / index_name).read_text()).get("weight_map", {})
        shards = set(weight_map.values()) if type(weight_map) is dict else set()
    except (OSError, ValueError, AttributeError):
        return [f"(unreadable index {index_name})"]
    return sorted(str(s) for s in shards if type(s) is not str or not (folder / s).is_file())


def _total_bytes(folder: Path) -> int:
    if not isinstance(folder, Path):
        return folder.total_bytes()  # a remote folder: from its host's listing
    total = 0
    for dirpath, _, filenames in os.walk(folder):
        for name in filenames:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue  # removed while we looked (a rotating save_total_limit)
    return total


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _read_marker(path: Path) -> int | None:
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isascii() and text.isdigit() else None
