"""runwatch for a Hugging Face `Trainer` (and TRL's trainers, which are Trainers): one callback to import.

    from trainer.hf import RunwatchCallback
    trainer = Trainer(..., callbacks=[RunwatchCallback()])   # the run folder is args.output_dir

It writes the run's `status.json` (running, the step, the last checkpoint; `completed` or `stopped` at the
end) and `run.json` (the TrainingArguments, the schedule, versions) into the output folder, beside what the
Trainer writes itself (trainer_state.json at each save, TensorBoard events when reported), which runwatch
reads as the run's metrics. It honours stop requests (`RUN_DIR/runwatch.stop`, written by `runwatch stop`, the
dashboard or a stop rule): at the end of the step that sees one it saves a checkpoint of that step, stops
training and records `stopped` with the request's reason. The Trainer calls no hook when training raises, so
the callback also chains `sys.excepthook` (as our verl seam does): a script that dies of the exception records
`failed` with its error (a Ctrl-C, `stopped`); an exception the script catches leaves `running`.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from trainer.callbacks import RunInfo
from trainer.stop import StopPoll, ranks_agree
from trainer.writers import RunJsonWriter, StatusWriter

TRAINER_NAME = "hf_trainer"


class RunwatchCallback(TrainerCallback):
    """status.json, run.json and stop requests for a `transformers.Trainer` run (see the module docstring).

    `run_dir` is the folder runwatch watches as the run (default: the Trainer's `output_dir`). Only the main
    process writes; every process takes the same stop decision at the same step."""

    def __init__(self, run_dir: str | Path | None = None) -> None:
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.status: StatusWriter | None = None
        self.poll: StopPoll | None = None
        self.stop_reason: str | None = None

    def on_train_begin(self, args, state, control, **kwargs: Any):
        run_dir = self.run_dir or Path(args.output_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        self.poll = StopPoll(run_dir)
        if not state.is_world_process_zero:
            return control
        info = RunInfo(
            run_dir=run_dir,
            trainer=TRAINER_NAME,
            preset="custom",
            config=args.to_dict(),
            total_steps=state.max_steps or None,
            resume_step=state.global_step,
            extra={
                "lr_scheduler": str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)),
                # transformers 5.17 dropped `warmup_ratio` (a fraction in `warmup_steps` says it): ask the
                # arguments for the steps they resolve to, and keep the ratio where the version still has it
                "warmup_ratio": getattr(args, "warmup_ratio", None),
                "warmup_steps": args.get_warmup_steps(state.max_steps) if state.max_steps else None,
                # the loss of a uniform guess is ln(vocab size): a loss far above it has diverged
                "vocab_size": getattr(getattr(kwargs.get("model"), "config", None), "vocab_size", None),
            },
        )
        RunJsonWriter(run_dir).on_train_begin(info)
        self.status = StatusWriter(run_dir)
        self.status.on_train_begin(info)
        self._record_a_crash()
        return control

    def _record_a_crash(self) -> None:
        """Chain sys.excepthook: an exception that ends the script is the run's `failed` (Ctrl-C: `stopped`)."""
        previous = sys.excepthook

        def excepthook(kind, exc, tb):
            status = self.status
            if status is not None and status.doc.get("state") == "running":
                step = status.doc.get("step") or 0
                if issubclass(kind, KeyboardInterrupt):
                    status.on_stopped(step, "interrupted (KeyboardInterrupt)")
                else:
                    lines = traceback.format_exception(kind, exc, tb)
                    status.on_exception(step, f"{kind.__name__}: {exc}".strip() + "\n" + "".join(lines[-6:]))
            previous(kind, exc, tb)

        sys.excepthook = excepthook

    def on_step_end(self, args, state, control, **kwargs: Any):
        if self.status is not None:
            self.status.on_step_end(state.global_step, {})
        if self.stop_reason is None and self.poll is not None and ranks_agree(self.poll.requested()):
            self.stop_reason = self.poll.reason()
            print(
                f"runwatch: asked to stop at step {state.global_step}: {self.stop_reason}; saving a checkpoint"
            )
            control.should_save = True
            control.should_training_stop = True
        return control

    def on_save(self, args, state, control, **kwargs: Any):
        if self.status is not None:
            self.status.on_checkpoint_saved(
                state.global_step, str(Path(args.output_dir) / f"checkpoint-{state.global_step}")
            )
        return control

    def on_train_end(self, args, state, control, **kwargs: Any):
        if self.status is not None:
            if self.stop_reason is not None:
                self.status.on_stopped(state.global_step, self.stop_reason)
            else:
                self.status.on_train_end(state.global_step)
        return control
