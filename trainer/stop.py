"""The trainer's side of a stop request (`RUN_DIR/runwatch.stop`, written by the collector or a person; the
file and its JSON are described in `collector/core/stop_request.py`).

`StopPoll.requested()` is one `os.stat` per call (about a microsecond: see bench/logging_cost.py);
`ranks_agree` makes every rank of a distributed run take the same decision at the same step (one
one-element all-reduce per step, only when there is more than one rank).
"""

from __future__ import annotations

import os
from pathlib import Path

from collector.core.stop_request import StopFileLink, read_stop_request, stop_path


class StopPoll:
    """Whether the run has been asked to stop, and why."""

    def __init__(self, run_dir: Path | str) -> None:
        self.run_dir = Path(run_dir)
        self.path = str(stop_path(run_dir))

    def requested(self) -> bool:
        return os.path.exists(self.path)

    def reason(self) -> str:
        try:
            request = read_stop_request(self.run_dir) or {}
        except StopFileLink as e:  # a stop all the same: whoever could plant it could write one
            return str(e)
        return str(request.get("reason") or "stop requested")


def ranks_agree(seen: bool) -> bool:
    """True on every rank when any rank saw the request (a rank may look a moment before the file lands)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return seen
    import torch

    device = f"cuda:{torch.cuda.current_device()}" if dist.get_backend() == "nccl" else "cpu"
    flag = torch.tensor([1 if seen else 0], dtype=torch.int32, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def stopped_line(run_dir: Path | str, status: dict) -> str:
    """The one line a stopped run's log ends with, from its status.json: the step, the reason and the last
    checkpoint (its folder, or that none was saved)."""
    step = status.get("step")
    where = checkpoint_said(run_dir, status.get("last_checkpoint_step"))
    reason = status.get("stop_reason") or "stop requested"
    return f"stopped by runwatch at step {step if step is not None else '?'}: {reason}; {where}"


def checkpoint_said(run_dir: Path | str, saved: int | None) -> str:
    """`last checkpoint <its folder>` for step `saved` when it is there, else `no checkpoint saved`."""
    folder = Path(run_dir) / f"global_step_{saved}" if saved else None
    return f"last checkpoint {folder}" if folder is not None and folder.is_dir() else "no checkpoint saved"
