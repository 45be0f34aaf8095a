"""The checkpoints a Hugging Face run saved, as its trainer_state.json tells them. Pure: no I/O.

- `hf_checkpoints_from_state(info, last_step) -> list[dict]`: the INFERRED saves (save_steps multiples, the
  best model checkpoint, the final step), each marked `inferred: True` with what it was inferred from.
- `checkpoint_step(path) -> int | None`: the N of a `checkpoint-N` path.
- `is_trainer_state(info)`, `run_best_step(info)`: whether run info is a trainer state's, and its own best step.
"""

from __future__ import annotations

import re

_CKPT_STEP = re.compile(r"checkpoint-(\d+)/?$")


def is_trainer_state(info: dict) -> bool:
    """Whether run info is a trainer_state.json's (its global step, and its save steps or best checkpoint)."""
    return "global_step" in info and ("save_steps" in info or "best_model_checkpoint" in info)


def run_best_step(info: dict) -> int | None:
    """The step of the run's own best checkpoint (HF `best_model_checkpoint`, else `best_global_step`)."""
    step = checkpoint_step(info.get("best_model_checkpoint"))
    best = info.get("best_global_step")
    return step if step is not None else (best if type(best) is int else None)


def _whole(value: object) -> int | None:
    """A positive whole number given as int or as a float such as 1000.0 (older trainer_state.json files)."""
    if type(value) is int and value > 0:
        return value
    if type(value) is float and value.is_integer() and value > 0:
        return int(value)
    return None


def checkpoint_step(path: object) -> int | None:
    """The N of a path ending in `checkpoint-N` (absolute paths from another machine included), else None."""
    if not isinstance(path, str):
        return None
    found = _CKPT_STEP.search(path.strip())
    return int(found.group(1)) if found else None


def hf_checkpoints_from_state(info: dict, last_step: int | None) -> list[dict]:
    """INFERRED checkpoint list of an HF run from its trainer_state info (no folders seen): multiples of
    `save_steps` up to the last step (unless the `best_model_checkpoint` lies off that grid: then the run saved
    by another strategy, such as per epoch), the `best_model_checkpoint`, and the final step (HF saves at the end).
    Each item: step, path (`checkpoint-N`), complete None and bytes None (unknown: nobody has seen the
    folder), inferred True, inferred_from (the state file's fact it rests on). Older checkpoints may in fact have been deleted by `save_total_limit`.
    """
    last = last_step if last_step is not None else info.get("global_step")
    steps: dict[int, str] = {}  # step -> the fact it was inferred from
    save_steps = _whole(info.get("save_steps"))
    best = checkpoint_step(info.get("best_model_checkpoint"))
    if best is not None and save_steps is not None and best % save_steps and best != last:
        # a best checkpoint off the save_steps grid (and not the final save) was saved by another strategy
        # (save_strategy "epoch": at each evaluation); trainer_state.json keeps save_steps' default all the same
        save_steps = None
    if isinstance(last, int) and last > 0:
        if save_steps is not None:
            steps.update((s, "save_steps") for s in range(save_steps, last + 1, save_steps))
        steps.setdefault(last, "global_step (HF saves at the end)")
    if best is not None:
        steps[best] = "best_model_checkpoint"
    return implied_saves(steps, "checkpoint-")


def implied_saves(steps: dict[int, str], prefix: str) -> list[dict]:
    """Checkpoint entries for saves the run's files imply (`steps`: step -> what implies it), by step, each
    at `prefix` + step, not seen on disk (`complete`/`bytes` unknown, `inferred`)."""
    return [
        {
            "step": s,
            "path": f"{prefix}{s}",
            "complete": None,
            "bytes": None,
            "inferred": True,
            "inferred_from": steps[s],
        }  # fmt: skip
        for s in sorted(steps)
    ]
