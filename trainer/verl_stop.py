"""The stop request in verl's two loops: SFT's worker polls before every step (`install_stop_check`), the PPO/GRPO
driver after each logged step (`stop_ppo_after`, called from the seam's `Tracking.log`).

Either way the run ends as a finished one (exit code 0, no traceback in its log): SFT's workers exit 0, and the
PPO driver's `fit` returns as after its last step (`install_ppo_stop`); `trainer.launch` then ends the log with
one line saying the stop, its reason and the last checkpoint.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path

PPO_TRAINER_MODULE = "verl.trainer.ppo.ray_trainer"


class RunStopped(BaseException):
    """Raised out of verl's PPO step that a stop request ended; the wrapped `RayPPOTrainer.fit` returns on it.
    A BaseException, so no `except Exception` on the way up takes it for a failure."""


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
        print(f"runwatch: asked to stop after step {step}: {reason}; exiting", flush=True)
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    sys.exit(0)


def stop_ppo_after(step: int, caller, STATE) -> None:  # noqa: N803
    """In verl's PPO/GRPO driver, after step `step` is logged: save its checkpoint unless saved, record
    `stopped`, and end `fit` (RunStopped, which the wrapped fit returns on; without the wrapper the Ray actor
    exits, and trainer.launch reads status.json). SFT stops in train_batch."""
    module = sys.modules.get(PPO_TRAINER_MODULE)
    trainer = caller.f_locals.get("self") if caller is not None else None
    if module is None or not isinstance(trainer, module.RayPPOTrainer) or STATE.ended:
        return
    if step not in STATE.saved_steps:
        trainer._save_checkpoint()
    reason = STATE.stop_poll.reason()
    STATE.ended = True
    if STATE.callbacks is not None:
        STATE.callbacks.on_stopped(step, reason)
    print(f"runwatch: asked to stop after step {step}: {reason}; ending the training loop", flush=True)
    if getattr(module.RayPPOTrainer.fit, "_runwatch", False):
        raise RunStopped(step)
    os._exit(0)  # a Ray actor whose fit is not wrapped: returning from fit() is not possible from here


def install_ppo_stop() -> None:
    """Wrap `RayPPOTrainer.fit` so that a stop request ends it as a finished fit (the driver, verl's
    `main_ppo`, then exits 0 with no traceback), now or when verl's PPO trainer module is first imported."""
    when_imported(PPO_TRAINER_MODULE, _wrap_fit)


def _wrap_fit(module) -> None:
    trainer = module.RayPPOTrainer
    if getattr(trainer.fit, "_runwatch", False):
        return
    inner = trainer.fit

    def fit(self, *args, **kwargs):
        try:
            return inner(self, *args, **kwargs)
        except RunStopped:
            return None  # stopped on request: saved, recorded, said (stop_ppo_after)

    fit._runwatch = True
    trainer.fit = fit


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `then(module)` right after the module `name` is first executed (a one-shot import hook)."""

    def __init__(self, name: str, then: Callable) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader, then = spec.loader, self.then
        execute = loader.exec_module

        def exec_module(module):
            execute(module)
            then(module)

        loader.exec_module = exec_module
        return spec


def when_imported(name: str, then: Callable) -> None:
    """`then(module)` now if `name` is imported, else right after its first import."""
    if name in sys.modules:
        then(sys.modules[name])
    elif not any(isinstance(f, _AfterImport) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, then))
