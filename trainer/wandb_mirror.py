"""Optional Weights & Biases mirror of the run's metrics, and a reader for offline runs.

The mirror is one more `RunCallback`: it sends exactly what metrics.jsonl gets. `WANDB_MODE` defaults to
`offline` (no network, no account): the run lands in `RUN_DIR/wandb/offline-run-*/run-*.wandb`.
`read_offline_history` reads such a file back (wandb 0.31 ships no Python reader for it): the file is a
LevelDB-style log of length-prefixed protobuf `Record`s (framing: `collector.formats.wandb_records`, shared
with the collector), and we keep the `history` ones.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from collector.formats.wandb_records import frame_records
from trainer.callbacks import RunCallback, RunInfo, scalar


class WandbMirror(RunCallback):
    """Mirrors every logged record to a wandb run stored under RUN_DIR/wandb (offline by default)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.run = None

    def on_train_begin(self, info: RunInfo) -> None:
        os.environ.setdefault("WANDB_MODE", "offline")
        os.environ.setdefault("WANDB_SILENT", "true")
        import wandb

        trainer_cfg = info.config.get("trainer", {}) or {}
        self.run = wandb.init(
            project=str(trainer_cfg.get("project_name") or "runwatch"),
            name=str(trainer_cfg.get("experiment_name") or self.run_dir.name),
            dir=str(self.run_dir),
            config={"preset": info.preset, "injected": info.injected, **info.config},
            resume="allow" if info.resume_step else None,
        )

    def _log(self, step: int, metrics: dict[str, Any]) -> None:
        if self.run is not None:
            self.run.log({key: scalar(value) for key, value in metrics.items()}, step=step)

    def on_step_end(self, step: int, metrics: dict[str, float]) -> None:
        self._log(step, metrics)

    def on_validation_end(self, step: int, metrics: dict[str, float]) -> None:
        self._log(step, metrics)

    def _finish(self, exit_code: int) -> None:
        if self.run is not None:
            self.run.finish(exit_code=exit_code)
            self.run = None

    def on_train_end(self, step: int) -> None:
        self._finish(0)

    def on_exception(self, step: int, error: str) -> None:
        self._finish(1)

    def on_stopped(self, step: int, reason: str) -> None:
        self._finish(0)


def read_offline_history(wandb_file: Path) -> list[dict[str, Any]]:
    """The history rows of an offline `.wandb` file: one dict per `log` call, with `_step` and the metrics."""
    from wandb.proto import wandb_internal_pb2

    framed = frame_records(Path(wandb_file).read_bytes())
    if framed.bad:
        first = framed.bad[0]
        raise ValueError(f"{wandb_file}: chunk {first.line}: {first.reason}")
    rows = []
    for payload in framed.records:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(payload)
        if record.WhichOneof("record_type") != "history":
            continue
        row: dict[str, Any] = {}
        for item in record.history.item:
            key = item.key or "/".join(item.nested_key)
            row[key] = json.loads(item.value_json) if item.value_json else None
        if record.history.HasField("step"):
            row.setdefault("_step", record.history.step.num)
        rows.append(row)
    return rows


def find_offline_run_files(run_dir: Path) -> list[Path]:
    """The `.wandb` files under RUN_DIR/wandb, oldest first."""
    return sorted((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
