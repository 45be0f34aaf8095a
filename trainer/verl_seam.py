"""Where our writers and scenario faults attach to verl, without forking it.

The seam is a handful of class/module attributes that verl's trainers look up at call time:

- `verl.utils.tracking.Tracking.__init__ / log / finish`: every verl trainer (SFT and PPO/GRPO) builds one
  `Tracking` on the logging rank and sends each record through `log(data, step)`. Wrapping them gives
  train begin, step end (plus `train/time(s)`, which verl 0.9.1 does not log), validation end and end.
- `CheckpointHandler.save_checkpoint / load_checkpoint`: checkpoint saved; the step a resume starts from.
- `TrainingWorker.train_batch` and `verl.workers.utils.losses.sft_loss`: where scenario faults are
  injected for real (a NaN loss that goes through backward, a learning-rate boost, a sleep).
- `sys.excepthook`: the run died; status.json says `failed` with the error.
- `TrainingWorker.train_batch` also polls the stop request (`RUN_DIR/runwatch.stop`, see
  `trainer/stop.py`) before each step: asked to stop, every rank saves a checkpoint of the last step
  and exits 0, and status.json says `stopped` with the reason.

`install_writers` and `install_faults` are idempotent. The environment variables below carry the launcher's
choices into the torchrun workers: RUNWATCH_RUN_DIR, RUNWATCH_PRESET, RUNWATCH_FAULTS (JSON list),
RUNWATCH_WANDB ("1"), RUNWATCH_EXTRA (JSON dict of run.json keys).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from trainer.callbacks import CallbackList, RunCallback, RunInfo, is_validation_record


class SeamState:
    """What the wrappers share in one process."""

    def __init__(self) -> None:
        self.callbacks: CallbackList | None = None
        self.run_dir: Path | None = None
        self.total_steps: int | None = None
        self.resume_step = 0
        self.last_step = 0
        self.train_step = 0  # the step the current train_batch call is computing (every rank)
        self.mark = time.monotonic()  # start of the step being timed
        self.ended = False
        self.nan_now = False
        self.writers_installed = False
        self.faults_installed = False
        self.stop_installed = False
        self.ckpt_handler = None  # verl's CheckpointHandler, to save a checkpoint when asked to stop
        self.saved_steps: set[int] = set()
        self.stop_poll = None  # trainer.stop.StopPoll of the run, where the writers are installed


STATE = SeamState()


def env_json(name: str, default: Any) -> Any:
    raw = os.environ.get(name, "")
    return json.loads(raw) if raw else default


def _train_begin(tracking_config: dict[str, Any] | None) -> None:
    if STATE.callbacks is not None or STATE.run_dir is None:
        return
    config = tracking_config or {}
    trainer_cfg = config.get("trainer", {}) or {}
    total = trainer_cfg.get("total_training_steps")
    STATE.total_steps = int(total) if total else None
    trainer_name = "verl_ppo" if "actor_rollout_ref" in config else "verl_sft"
    info = RunInfo(
        run_dir=STATE.run_dir,
        trainer=trainer_name,
        preset=os.environ.get("RUNWATCH_PRESET", "custom"),
        config=config,
        total_steps=STATE.total_steps,
        resume_step=STATE.resume_step,
        injected=env_json("RUNWATCH_FAULTS", []),
        extra={**policy_schedule(config), **env_json("RUNWATCH_EXTRA", {})},
    )
    from trainer.writers import default_writers

    callbacks: list[RunCallback] = default_writers(
        STATE.run_dir, wandb=os.environ.get("RUNWATCH_WANDB") == "1"
    )
    STATE.callbacks = CallbackList(callbacks)
    STATE.last_step = STATE.resume_step
    STATE.callbacks.on_train_begin(info)
    STATE.mark = time.monotonic()


def policy_schedule(config: dict[str, Any]) -> dict[str, Any]:
    """For a PPO config: the policy's (actor's) lr schedule as run.json's top-level keys. Its `optim` is nested
    under actor_rollout_ref.actor, beside the critic's (unused by GRPO); a reader taking the shallowest `lr` in
    the config would otherwise take the critic's."""
    actor = ((config.get("actor_rollout_ref") or {}).get("actor") or {}).get("optim") or {}
    if not actor:
        return {}
    return {
        "lr": actor.get("lr"),
        "lr_scheduler": actor.get("lr_scheduler_type"),
        "warmup_ratio": actor.get("lr_warmup_steps_ratio"),
    }


def _train_end() -> None:
    if STATE.callbacks is None or STATE.ended:
        return
    STATE.ended = True
    STATE.callbacks.on_train_end(STATE.last_step)


def record(data: dict[str, Any], step: int) -> None:
    """Route one logged record to the writers; adds `train/time(s)` to a training record in place."""
    if STATE.callbacks is None:
        return
    now = time.monotonic()
    if is_validation_record(data):
        STATE.callbacks.on_validation_end(step, dict(data))
    elif any(is_validation_record({key: None}) for key in data):
        # verl's PPO trainer logs a step's validation values inside that step's record: split them out, so the
        # run directory has the same shape as an SFT run's (a training record, then a validation record).
        train = {k: v for k, v in data.items() if not is_validation_record({k: None})}
        if "timing_s/step" not in train:
            train["train/time(s)"] = now - STATE.mark
        STATE.last_step = max(STATE.last_step, step)
        STATE.callbacks.on_step_end(step, train)
        STATE.callbacks.on_validation_end(step, {k: v for k, v in data.items() if k not in train})
    else:
        # PPO/GRPO log their own step time (timing_s/step); SFT in verl 0.9.1 logs none.
        if "timing_s/step" not in data:
            data["train/time(s)"] = now - STATE.mark
        STATE.last_step = max(STATE.last_step, step)
        STATE.callbacks.on_step_end(step, dict(data))
    STATE.mark = now


def install_writers(run_dir: Path) -> None:
    """Attach the run-directory writers to verl's `Tracking` (only the logging rank builds one, so rank 0 writes)."""
    if STATE.writers_installed:
        return
    STATE.writers_installed = True
    STATE.run_dir = run_dir
    from trainer.stop import StopPoll

    STATE.stop_poll = StopPoll(run_dir)
    from verl.utils.tracking import Tracking

    original_init, original_log, original_finish = Tracking.__init__, Tracking.log, Tracking.finish

    def init(self, project_name, experiment_name, default_backend="console", config=None):
        original_init(self, project_name, experiment_name, default_backend=default_backend, config=config)
        if config and "actor_rollout_ref" in config:
            # verl's PPO trainer builds Tracking in its driver before it loads a checkpoint, in another process
            # than the workers: the checkpoint hooks go here, and the step it will resume from is read ahead.
            install_ppo_checkpoint_hooks()
            STATE.resume_step = STATE.train_step = ppo_resume_step(config)
        _train_begin(config)

    def log(self, data, step, backend=None):
        record(data, step)
        result = original_log(self, data=data, step=step, backend=backend)
        if STATE.stop_poll is not None and STATE.stop_poll.requested():
            from trainer import verl_stop

            # The caller is verl's PPO fit loop, or SFT's (which stops in train_batch: ignored here).
            verl_stop.stop_ppo_after(step, sys._getframe(1), STATE)
        return result

    def finish(self, exit_code: int = 0):
        # verl's SFT trainer never calls finish(); __del__ does when fit() returns. Completed only if the
        # last step was reached: an exception unwinding through fit() also drops the object.
        if exit_code == 0 and STATE.total_steps is not None and STATE.last_step >= STATE.total_steps:
            _train_end()
        return original_finish(self, exit_code=exit_code)

    Tracking.__init__, Tracking.log, Tracking.finish = init, log, finish
    _make_verl_file_logger_append()

    import verl.utils.distributed as distributed

    original_destroy = distributed.destroy_global_process_group

    def destroy_global_process_group():
        # Called by verl's run_sft only after fit() returned: the run completed.
        _train_end()
        return original_destroy()

    distributed.destroy_global_process_group = destroy_global_process_group

    previous_hook = sys.excepthook

    def excepthook(exc_type, exc, tb):
        if STATE.callbacks is not None and not STATE.ended:
            STATE.ended = True
            lines = traceback.format_exception(exc_type, exc, tb)
            summary = f"{exc_type.__name__}: {exc}".strip()
            STATE.callbacks.on_exception(STATE.last_step, summary + "\n" + "".join(lines[-6:]))
        previous_hook(exc_type, exc, tb)

    sys.excepthook = excepthook


def _make_verl_file_logger_append() -> None:
    """verl's own `file` backend (if a user adds it to trainer.logger) opens its file with "wb", wiping
    what a crashed run wrote; ours appends. Same path rules as verl's, opened with "ab"."""
    from verl.utils import tracking

    def file_logger_init(self, project_name: str, experiment_name: str) -> None:
        self.project_name, self.experiment_name = project_name, experiment_name
        self.filepath = os.getenv("VERL_FILE_LOGGER_PATH", None)
        if self.filepath is None:
            root = os.path.expanduser(os.getenv("VERL_FILE_LOGGER_ROOT", "."))
            os.makedirs(os.path.join(root, project_name), exist_ok=True)
            self.filepath = os.path.join(root, project_name, f"{experiment_name}.jsonl")
        print(f"Creating file logger at {os.path.abspath(self.filepath)} (appending)")
        self.fp = open(self.filepath, "ab", buffering=0)  # noqa: SIM115 - closed by verl's finish()

    tracking.FileLogger.__init__ = file_logger_init


def install_checkpoint_hooks() -> None:
    """Checkpoint saved (rank 0 tells the writers) and the step a resume continues from (every rank)."""
    from verl.utils.checkpoint.checkpoint_handler import CheckpointHandler

    if getattr(CheckpointHandler.save_checkpoint, "_runwatch", False):
        return
    original_save, original_load = CheckpointHandler.save_checkpoint, CheckpointHandler.load_checkpoint

    def save_checkpoint(self, step):
        result = original_save(self, step)
        STATE.saved_steps.add(int(step))
        if STATE.callbacks is not None:
            STATE.callbacks.on_checkpoint_saved(
                step, os.path.join(self.default_local_dir, f"global_step_{step}")
            )
        STATE.mark = time.monotonic()  # saving is not part of the next step's time
        return result

    def load_checkpoint(self):
        STATE.ckpt_handler = self  # verl calls this once as the trainer starts (a fresh run too)
        step = original_load(self)
        STATE.resume_step = STATE.train_step = int(step or 0)
        return step

    save_checkpoint._runwatch = True
    CheckpointHandler.save_checkpoint, CheckpointHandler.load_checkpoint = save_checkpoint, load_checkpoint


def ppo_resume_step(config: dict[str, Any]) -> int:
    """The step verl's PPO trainer resumes from, as its `_load_checkpoint` will find it (resume_mode auto:
    `latest_checkpointed_iteration.txt` in trainer.default_local_dir; resume_path: that folder's step)."""
    trainer_cfg = config.get("trainer", {}) or {}
    mode = trainer_cfg.get("resume_mode", "auto")
    if mode == "disable":
        return 0
    if mode == "resume_path" and trainer_cfg.get("resume_from_path"):
        tail = str(trainer_cfg["resume_from_path"]).rstrip("/").rsplit("global_step_", 1)
        return int(tail[1]) if len(tail) == 2 and tail[1].isdigit() else 0
    folder = trainer_cfg.get("default_local_dir")
    try:
        return int((Path(str(folder)) / "latest_checkpointed_iteration.txt").read_text().strip())
    except (OSError, ValueError, TypeError):
        return 0


def install_ppo_checkpoint_hooks() -> None:
    """Checkpoint saved, for verl's PPO trainer (`RayPPOTrainer._save_checkpoint`, in the driver process).

    Only where that trainer is running, i.e. its module is already loaded (not for another caller of Tracking)."""
    module = sys.modules.get("verl.trainer.ppo.ray_trainer")
    if module is None:
        return
    RayPPOTrainer = module.RayPPOTrainer  # noqa: N806 - verl's class

    if getattr(RayPPOTrainer._save_checkpoint, "_runwatch", False):
        return
    original_save = RayPPOTrainer._save_checkpoint

    def _save_checkpoint(self, *args, **kwargs):
        result = original_save(self, *args, **kwargs)
        STATE.saved_steps.add(int(self.global_steps))
        if STATE.callbacks is not None:
            folder = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
            STATE.callbacks.on_checkpoint_saved(self.global_steps, folder)
        return result

    _save_checkpoint._runwatch = True
    RayPPOTrainer._save_checkpoint = _save_checkpoint


def install_faults(faults: list[dict[str, Any]]) -> None:
    """Inject the scenario faults for real, on every rank, at their steps.

    - `{"kind": "nan", "step": S}`: the SFT loss of step S is multiplied by NaN before backward, so the
      logged loss and grad norm are NaN and verl skips that optimizer update, as with a real overflow.
    - `{"kind": "lr_spike", "step": S, "steps": K, "factor": F}`: steps S..S+K-1 run with F times the
      scheduled learning rate (the scheduler restores it after each step).
    - `{"kind": "stall", "step": S, "seconds": T}`: the process sleeps T seconds before step S.
    - `{"kind": "crash", "step": S}`: step S raises, and the run dies as with any error in training.
    - `{"kind": "slow", "step": S, "seconds": T}`: from step S on, each step waits T seconds before it computes,
      as on a device where a step takes seconds (the CPU model's steps take a fraction of one).
    """
    if STATE.faults_installed:
        return
    STATE.faults_installed = True
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for fault in faults:
        by_kind.setdefault(fault["kind"], []).append(fault)

    import verl.workers.utils.losses as losses
    from verl.workers.engine_workers import TrainingWorker

    original_train_batch = TrainingWorker.train_batch
    original_sft_loss = losses.sft_loss

    def train_batch(self, data, *args, **kwargs):
        STATE.train_step += 1
        step = STATE.train_step
        for fault in by_kind.get("stall", []):
            if fault["step"] == step:
                print(
                    f"runwatch: injected stall: sleeping {fault['seconds']} s before step {step}", flush=True
                )
                time.sleep(float(fault["seconds"]))
        for fault in by_kind.get("slow", []):
            if step >= fault["step"]:
                time.sleep(float(fault["seconds"]))
        boost = 1.0
        for fault in by_kind.get("lr_spike", []):
            if fault["step"] <= step < fault["step"] + int(fault.get("steps", 1)):
                boost *= float(fault["factor"])
        if boost != 1.0:
            for group in self.engine.optimizer.param_groups:
                group["lr"] *= boost
        if any(fault["step"] == step for fault in by_kind.get("crash", [])):
            raise RuntimeError(f"runwatch: injected crash at step {step}")
        STATE.nan_now = any(fault["step"] == step for fault in by_kind.get("nan", []))
        try:
            return original_train_batch(self, data, *args, **kwargs)
        finally:
            STATE.nan_now = False

    def sft_loss(*args, **kwargs):
        loss, metrics = original_sft_loss(*args, **kwargs)
        if STATE.nan_now:
            loss = loss * float("nan")
        return loss, metrics

    TrainingWorker.train_batch = train_batch
    losses.sft_loss = sft_loss
