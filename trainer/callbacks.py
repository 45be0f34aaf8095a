"""The callback interface our run-directory writers implement, and the fan-out that calls them.

A trainer (verl's SFT trainer today, its PPO/GRPO trainer by the same seam) reports its life through
these hooks; each writer turns them into one output (metrics.jsonl, CSV histories, status.json, run.json,
W&B). The shape follows torchtitan's metric loggers: small classes, one concern each, no knowledge of the
training loop. `trainer/verl_seam.py` is what calls them from inside verl.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def scalar(value: Any) -> Any:
    """A JSON-ready value: tensors and numpy scalars become floats; other numbers and strings pass."""
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return item()
        except (TypeError, ValueError, RuntimeError):
            return str(value)
    return str(value)


@dataclass
class RunInfo:
    """What every writer may want to know when training begins."""

    run_dir: Path
    trainer: str  # "verl_sft" or "verl_ppo"
    preset: str
    config: dict[str, Any]  # the resolved trainer config (verl's, as a plain dict)
    total_steps: int | None
    resume_step: int  # 0 for a fresh run, else the checkpoint step the run continues from
    injected: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # run.json keys a launcher wants recorded


class RunCallback:
    """Lifecycle hooks; every method is optional (the defaults do nothing)."""

    def on_train_begin(self, info: RunInfo) -> None:
        """Training is about to take its first step (or its first step after a resume)."""

    def on_step_end(self, step: int, metrics: dict[str, float]) -> None:
        """One optimizer step finished; `metrics` is what the trainer logged for it (plus train/time(s))."""

    def on_validation_end(self, step: int, metrics: dict[str, float]) -> None:
        """A validation pass at `step` finished with `metrics` (val/loss, ...)."""

    def on_checkpoint_saved(self, step: int, path: str) -> None:
        """The checkpoint for `step` is complete on disk at `path`."""

    def on_train_end(self, step: int) -> None:
        """Training finished normally at `step`."""

    def on_exception(self, step: int, error: str) -> None:
        """Training died at `step` with `error` (a one-line summary and the traceback's last lines)."""

    def on_stopped(self, step: int, reason: str) -> None:
        """Training stopped on request after `step` (a checkpoint of it is saved); `reason` says why."""


class CallbackList(RunCallback):
    """Calls each callback in turn. A writer that raises is reported on stderr and dropped, never fatal:
    losing one output must not kill a training run."""

    def __init__(self, callbacks: list[RunCallback]) -> None:
        self.callbacks = list(callbacks)

    def _each(self, hook: str, *args: Any) -> None:
        for cb in list(self.callbacks):
            try:
                getattr(cb, hook)(*args)
            except Exception as exc:
                print(
                    f"runwatch: writer {type(cb).__name__}.{hook} failed ({type(exc).__name__}: {exc}); "
                    "it is disabled for the rest of this run",
                    file=sys.stderr,
                )
                self.callbacks.remove(cb)

    def on_train_begin(self, info: RunInfo) -> None:
        self._each("on_train_begin", info)

    def on_step_end(self, step: int, metrics: dict[str, float]) -> None:
        self._each("on_step_end", step, metrics)

    def on_validation_end(self, step: int, metrics: dict[str, float]) -> None:
        self._each("on_validation_end", step, metrics)

    def on_checkpoint_saved(self, step: int, path: str) -> None:
        self._each("on_checkpoint_saved", step, path)

    def on_train_end(self, step: int) -> None:
        self._each("on_train_end", step)

    def on_exception(self, step: int, error: str) -> None:
        self._each("on_exception", step, error)

    def on_stopped(self, step: int, reason: str) -> None:
        self._each("on_stopped", step, reason)


def is_validation_record(metrics: dict[str, Any]) -> bool:
    """True when a logged record holds only validation values (verl logs `{"val/loss": ...}` on its own)."""
    return bool(metrics) and all(key.startswith(("val/", "val-", "val_")) for key in metrics)
