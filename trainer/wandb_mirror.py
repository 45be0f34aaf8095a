"""Optional Weights & Biases mirror of the run's metrics, and a reader for offline runs.

The mirror is one more `RunCallback`: it sends exactly what metrics.jsonl gets. `WANDB_MODE` defaults to
`offline` (no network, no account): the run lands in `RUN_DIR/wandb/offline-run-*/run-*.wandb`.
`read_offline_history` reads such a file back (wandb 0.31 ships no Python reader for it): the file is a
LevelDB-style log of length-prefixed protobuf `Record`s, and we keep the `history` ones.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

from trainer.callbacks import RunCallback, RunInfo
from trainer.writers import scalar

BLOCK = 32768
FILE_HEADER = struct.Struct("<4sHB")  # ":W&B", magic 0xBEE1, version
RECORD_HEADER = struct.Struct("<IHB")  # crc32c, length, chunk type
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


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


def _chunks(data: bytes):
    """The payloads of a LevelDB-style log, whole records reassembled from their chunks."""
    pos = FILE_HEADER.size
    pending = b""
    while pos + RECORD_HEADER.size <= len(data):
        room = BLOCK - pos % BLOCK
        if room < RECORD_HEADER.size:  # block trailer: zero padding
            pos += room
            continue
        _crc, length, kind = RECORD_HEADER.unpack_from(data, pos)
        pos += RECORD_HEADER.size
        payload = data[pos : pos + length]
        pos += length
        if kind == 0 and length == 0:
            continue
        if kind == FULL:
            yield payload
        elif kind == FIRST:
            pending = payload
        elif kind == MIDDLE:
            pending += payload
        elif kind == LAST:
            yield pending + payload
            pending = b""


def read_offline_history(wandb_file: Path) -> list[dict[str, Any]]:
    """The history rows of an offline `.wandb` file: one dict per `log` call, with `_step` and the metrics."""
    from wandb.proto import wandb_internal_pb2

    data = Path(wandb_file).read_bytes()
    ident, _magic, _version = FILE_HEADER.unpack_from(data, 0)
    if ident != b":W&B":
        raise ValueError(f"{wandb_file}: not a wandb run file (header {ident!r})")
    rows = []
    for payload in _chunks(data):
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
