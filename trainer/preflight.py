"""Pre-flight checks: everything that would make a verl run fail minutes in, found before it starts.

`check_run(plan)` returns a list of problems, each a sentence naming the file or setting, what is wrong
and how to fix it; an empty list means the run may start. `count_steps` gives the steps verl will run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass
class RunPlan:
    """What the launcher is about to start, in the terms the checks need."""

    out: Path
    nproc: int
    train_files: list[Path]
    val_files: list[Path]
    model_path: Path
    tokenizer_path: Path | None
    train_batch_size: int
    micro_batch_size: int
    train_max_samples: int
    total_epochs: int
    total_steps: int | None  # an explicit trainer.total_training_steps, else None


def parquet_rows(path: Path) -> int:
    """Rows in a parquet file, from its footer (the data is not read)."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_rows


def _check_parquet(path: Path, role: str) -> list[str]:
    if not path.is_file():
        return [f"{role} file {path} does not exist (build it with `python -m data.build --out data/build`)"]
    try:
        import pyarrow.parquet as pq

        schema = pq.read_schema(path)
    except Exception as exc:
        return [f"{role} file {path} is not a readable parquet file ({type(exc).__name__}: {exc})"]
    if "messages" not in schema.names:
        return [f"{role} file {path} has no `messages` column (columns: {', '.join(schema.names)})"]
    return []


def _check_model(path: Path, tokenizer_path: Path | None) -> list[str]:
    if not path.is_dir():
        return [f"model.path {path} is not a folder (a Hugging Face model saved with save_pretrained)"]
    problems = []
    if not (path / "config.json").is_file():
        problems.append(f"model.path {path} has no config.json")
    weights = [*path.glob("*.safetensors"), *path.glob("*.bin"), *path.glob("*.safetensors.index.json")]
    if not weights:
        problems.append(f"model.path {path} has no weights (*.safetensors or *.bin)")
    tok = tokenizer_path or path
    if not any((tok / name).is_file() for name in ("tokenizer.json", "tokenizer.model", "vocab.json")):
        problems.append(f"tokenizer {tok} has no tokenizer.json / tokenizer.model / vocab.json")
    return problems


def _check_writable(out: Path) -> list[str]:
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".write-test-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        return [f"output folder {out} is not writable ({exc.strerror or exc})"]
    return []


def check_batches(plan: RunPlan, val_rows: int | None) -> list[str]:
    """Batch-size arithmetic verl asserts deep inside its engine, checked up front."""
    problems = []
    if plan.nproc < 1:
        return [f"--nproc {plan.nproc}: need at least one process"]
    if plan.micro_batch_size < 1 or plan.train_batch_size < 1:
        return ["data.train_batch_size and data.micro_batch_size_per_gpu must be positive"]
    per_rank, rest = divmod(plan.train_batch_size, plan.nproc)
    if rest or per_rank % plan.micro_batch_size:
        problems.append(
            f"data.train_batch_size={plan.train_batch_size} must be divisible by processes x micro batch "
            f"({plan.nproc} x {plan.micro_batch_size} = {plan.nproc * plan.micro_batch_size})"
        )
    if val_rows is not None and per_rank and val_rows // plan.nproc < per_rank:
        problems.append(
            f"validation set has {val_rows} rows: fewer than one batch of {per_rank} per process "
            f"({plan.nproc} processes); verl would log a NaN val/loss. Lower data.train_batch_size or add rows"
        )
    return problems


def steps_in_data(rows: int, plan: RunPlan) -> int:
    """Steps the data allows: full batches per epoch (verl's samplers drop the last) x epochs."""
    if plan.train_max_samples > 0:
        rows = min(rows, plan.train_max_samples)
    per_rank_rows = rows // plan.nproc
    per_epoch = per_rank_rows // max(1, plan.train_batch_size // plan.nproc)
    return per_epoch * plan.total_epochs


def count_steps(rows: int, plan: RunPlan) -> int:
    """Optimizer steps verl 0.9.1 runs: trainer.total_training_steps when given, else what the data allows."""
    return plan.total_steps or steps_in_data(rows, plan)


def check_run(plan: RunPlan) -> list[str]:
    """Every problem found; empty when the run may start."""
    problems = []
    for path in plan.train_files:
        problems += _check_parquet(path, "train")
    for path in plan.val_files:
        problems += _check_parquet(path, "validation")
    problems += _check_model(plan.model_path, plan.tokenizer_path)
    problems += _check_writable(plan.out)
    if problems:
        return problems
    val_rows = sum(parquet_rows(p) for p in plan.val_files) if plan.val_files else None
    problems += check_batches(plan, val_rows)
    if not problems:
        train_rows = sum(parquet_rows(p) for p in plan.train_files)
        capacity = steps_in_data(train_rows, plan)
        if capacity < 1:
            problems.append(
                f"the train set ({train_rows} rows, max samples {plan.train_max_samples}) holds no full batch "
                f"of data.train_batch_size={plan.train_batch_size}: verl would run zero steps"
            )
        elif plan.total_steps and plan.total_steps > capacity:
            problems.append(
                f"trainer.total_training_steps={plan.total_steps} is more than the {capacity} steps "
                f"{plan.total_epochs} epoch(s) of the train set give: raise trainer.total_epochs"
            )
    return problems
