"""The stop request in verl's two loops: SFT's worker polls before every step (`install_stop_check`), the PPO/GRPO
driver after each logged step (`stop_ppo_after`, called from the seam's `Tracking.log`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def install_stop_check(run_dir: Path, STATE) -> None:  # noqa: N803 - the seam's one SeamState
    """Poll the stop request before every step, on every rank (the ranks agree, then all stop together)."""
    if STATE.stop_installed:
        return
    STATE.stop_installed = True
    from verl.workers.engine_workers import TrainingWorker

    from trainer.stop import StopPoll, ranks_agree

    poll = StopPoll(run_dir)
    inner = TrainingWorker.train_batch

    def train_batch(self, data, *args, **kwargs):
        if ranks_agree(poll.requested()):
            stop_now(poll, STATE)
        return inner(self, data, *args, **kwargs)

    TrainingWorker.train_batch = train_batch


def stop_now(poll, STATE) -> None:  # noqa: N803
    """Save the last finished step as a checkpoint (unless it is saved), record `stopped`, exit 0."""
    import torch.distributed as dist

    step = STATE.train_step  # the faults wrapper counts steps on every rank; this one has not begun
    reason = poll.reason()
    if STATE.ckpt_handler is not None and step > 0 and step not in STATE.saved_steps:
        STATE.ckpt_handler.save_checkpoint(step=step)
    if STATE.callbacks is not None and not STATE.ended:
        STATE.ended = True
        STATE.callbacks.on_stopped(step, reason)
    if os.environ.get("RANK", "0") == "0":
        print(f"runwatch: stopped after step {step} on request: {reason}", flush=True)
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    sys.exit(0)


def stop_ppo_after(step: int, caller, STATE) -> None:  # noqa: N803
    """In verl's PPO/GRPO driver, after step `step` is logged: save its checkpoint unless saved, record
    `stopped`, end the process (a Ray actor; trainer.launch reads status.json). SFT stops in train_batch."""
    module = sys.modules.get("verl.trainer.ppo.ray_trainer")
    trainer = caller.f_locals.get("self") if caller is not None else None
    if module is None or not isinstance(trainer, module.RayPPOTrainer) or STATE.ended:
        return
    if step not in STATE.saved_steps:
        trainer._save_checkpoint()
    reason = STATE.stop_poll.reason()
    STATE.ended = True
    if STATE.callbacks is not None:
        STATE.callbacks.on_stopped(step, reason)
    print(f"runwatch: stopped after step {step} on request: {reason}", flush=True)
    os._exit(0)  # a Ray actor: returning from fit() is not possible from here
