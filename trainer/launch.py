"""Start a verl SFT or GRPO run that writes a monitorable run directory.

    python -m trainer.launch --preset {demo,overfit,spike,nan,stall,healthy,smoke,gpu,grpo,...} --out RUN_DIR
                             [--nproc N] [--steps N] [--data DIR] [--model PATH] [--wandb]
                             [--resume-from STEP] [key=value verl overrides...]

GRPO presets (`grpo*`) run `python -m verl.trainer.main_ppo` instead (trainer/rl_launch.py); the rest is alike.
Runs `torchrun -m verl.trainer.sft_trainer` (verl's own trainer, unforked) with the preset's overrides,
our plugin loaded through `VERL_USE_EXTERNAL_MODULES`, checkpoints in RUN_DIR/global_step_N/, and the
run-directory files (metrics.jsonl, training_history.csv, validation_history.csv, status.json, run.json)
written by the plugin. Returns torchrun's exit code; 2 when pre-flight checks fail (nothing is started).
Running it again on the same RUN_DIR resumes from the latest checkpoint (`trainer.resume_mode=auto`) and
appends to the metrics files; `--resume-from STEP` resumes from RUN_DIR/global_step_STEP (trainer/resume_from.py).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from trainer.preflight import RunPlan, check_run, count_steps, parquet_rows, steps_in_data
from trainer.presets import PRESETS, merge_overrides, override_value
from trainer.resume_from import latest_checkpoint, resume_overrides, resume_problems
from trainer.rl_launch import check_ppo_run, missing_packages, ppo_command, ppo_paths
from trainer.stop import checkpoint_said, stopped_line
from trainer.writers import write_json_atomic

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO / "data" / "build"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m trainer.launch",
        description="Start a verl SFT or GRPO run that writes a runwatch run directory.",
    )
    parser.add_argument(
        "--preset", required=True, choices=sorted(PRESETS), help="run recipe (see trainer/presets.py)"
    )
    parser.add_argument("--out", required=True, type=Path, help="run directory (checkpoints go here too)")
    parser.add_argument("--nproc", type=int, default=1, help="processes (GPUs, or gloo CPU processes)")
    parser.add_argument(
        "--steps", type=int, default=None, help="stop after N steps (trainer.total_training_steps)"
    )
    parser.add_argument(
        "--data", type=Path, default=None, help="folder with sft_train.parquet / sft_val.parquet"
    )
    parser.add_argument(
        "--model", type=Path, default=None, help="model folder (default: the tiny local model)"
    )
    parser.add_argument(
        "--wandb", action="store_true", help="mirror metrics to W&B (WANDB_MODE=offline by default)"
    )
    parser.add_argument(
        "--inject",
        action="append",
        default=[],
        type=parse_fault,
        metavar="JSON",
        help='an extra fault, e.g. \'{"kind":"stall","step":8,"seconds":60}\' (kinds: nan, lr_spike, stall, crash, slow)',
    )
    resume_help = "resume from RUN_DIR/global_step_STEP, not the latest (the last good one before a spike)"
    parser.add_argument("--resume-from", type=int, default=None, metavar="STEP", help=resume_help)
    parser.add_argument(
        "--dry-run", action="store_true", help="check and print the torchrun command; start nothing"
    )
    parser.add_argument(
        "overrides", nargs="*", help="verl Hydra overrides, key=value (they win over the preset)"
    )
    return parser.parse_args(argv)


FAULT_KEYS = {
    "nan": {"step"},
    "lr_spike": {"step", "steps", "factor"},
    "stall": {"step", "seconds"},
    "crash": {"step"},
    "slow": {"step", "seconds"},
}


def parse_fault(text: str) -> dict:
    """One `--inject` fault from its JSON, checked for a known kind and its required keys."""
    try:
        fault = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--inject {text!r} is not JSON ({exc})") from exc
    if not isinstance(fault, dict) or fault.get("kind") not in FAULT_KEYS:
        raise argparse.ArgumentTypeError(f"--inject {text!r}: kind must be one of {', '.join(FAULT_KEYS)}")
    missing = FAULT_KEYS[fault["kind"]] - set(fault) - {"steps"}
    if missing:
        raise argparse.ArgumentTypeError(f"--inject {text!r}: missing {', '.join(sorted(missing))}")
    return fault


def build_overrides(args: argparse.Namespace) -> list[str]:
    """The full verl override list for this launch: preset, paths, process count, then the user's own."""
    preset = PRESETS[args.preset]
    out = args.out.resolve()
    data = (args.data or DEFAULT_DATA).resolve()
    given = args.model or (
        Path(os.environ["RUNWATCH_MODEL_PATH"]) if os.environ.get("RUNWATCH_MODEL_PATH") else None
    )
    model = (given or DEFAULT_DATA / "model").resolve()
    base = dict(preset.overrides)
    base.update(resume_overrides(out, args.resume_from))
    if preset.trainer == "ppo":
        # GRPO presets start from the warm-started data/build/rl_model unless a model is given.
        base.update(ppo_paths(out, data, given.resolve() if given else None, args.nproc, preset.cpu))
        if args.steps is not None:
            base["trainer.total_training_steps"] = args.steps
        return merge_overrides(base, args.overrides)
    base.update(
        {
            "data.train_files": str(data / "sft_train.parquet"),
            "data.val_files": str(data / "sft_val.parquet"),
            "model.path": str(model),
            "trainer.default_local_dir": str(out),
            "trainer.experiment_name": out.name,
            "trainer.n_gpus_per_node": args.nproc,
            "trainer.nnodes": 1,
            "trainer.logger": "[console]",
            # Hydra's own output (resolved config, overrides, its log) stays inside the run, out of sight.
            "hydra.run.dir": str(out / ".hydra"),
            "hydra.output_subdir": ".",
        }
    )
    if args.steps is not None:
        base["trainer.total_training_steps"] = args.steps
    return merge_overrides(base, args.overrides)


def plan_from_overrides(args: argparse.Namespace, overrides: list[str]) -> RunPlan:
    def value(key: str, default=None):
        return override_value(overrides, key, default)

    def paths(key: str) -> list[Path]:
        raw = value(key)
        if raw in (None, "null", "None", ""):
            return []
        return [Path(p.strip(" '\"")) for p in raw.strip("[]").split(",") if p.strip()]

    total = value("trainer.total_training_steps")
    tokenizer = value("model.tokenizer_path")
    return RunPlan(
        out=args.out.resolve(),
        nproc=args.nproc,
        train_files=paths("data.train_files"),
        val_files=paths("data.val_files"),
        model_path=Path(value("model.path")),
        tokenizer_path=Path(tokenizer) if tokenizer not in (None, "null") else None,
        train_batch_size=int(value("data.train_batch_size", 256)),
        micro_batch_size=int(value("data.micro_batch_size_per_gpu", 4)),
        train_max_samples=int(value("data.train_max_samples", -1)),
        total_epochs=int(value("trainer.total_epochs", 4)),
        total_steps=int(total) if total not in (None, "null") else None,
    )


def torchrun_command(nproc: int, overrides: list[str]) -> list[str]:
    """verl's own SFT entry point under torchrun, on one node."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes=1",
        f"--nproc_per_node={nproc}",
        "-m",
        "verl.trainer.sft_trainer",
        *overrides,
    ]


def worker_env(args: argparse.Namespace, preset_faults: list[dict], extra: dict) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO), env.get("PYTHONPATH", "")] if p)
    modules = [m for m in env.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
    env["VERL_USE_EXTERNAL_MODULES"] = ",".join(dict.fromkeys(["trainer.verl_plugin", *modules]))
    env["RUNWATCH_RUN_DIR"] = str(args.out.resolve())
    env["RUNWATCH_PRESET"] = args.preset
    env["RUNWATCH_FAULTS"] = json.dumps(preset_faults)
    env["RUNWATCH_EXTRA"] = json.dumps(extra)
    env["RUNWATCH_WANDB"] = "1" if args.wandb else ""
    env.setdefault("WANDB_MODE", "offline")
    env["HYDRA_FULL_ERROR"] = "1"
    if PRESETS[args.preset].cpu:
        env["RUNWATCH_PLATFORM"] = "cpu"  # CPU presets train on the CPU even where GPUs exist
        if PRESETS[args.preset].trainer == "ppo":
            # Ray refuses to declare its logical "GPU" slots when CUDA_VISIBLE_DEVICES lists none.
            env.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            env["CUDA_VISIBLE_DEVICES"] = ""
        # One thread per process: on a shared 2-core machine more threads only fight each other.
        env.setdefault("OMP_NUM_THREADS", "1")
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


EXCEPTION_LINE = re.compile(r"^(\[rank\d+\]:\s*)?([A-Za-z_][\w.]*(Error|Exception|Interrupt)\b.*)")


def worker_error(tail: list[str]) -> list[str]:
    """The worker's exception line and the traceback lines before it, out of torchrun's output tail.

    torchrun ends with its own summary (ChildFailedError...), which says nothing about the cause.
    """
    for index in range(len(tail) - 1, -1, -1):
        match = EXCEPTION_LINE.match(tail[index])
        if match and "ChildFailedError" not in tail[index] and "SignalException" not in tail[index]:
            context = [re.sub(r"^\[rank\d+\]:\s?", "", line) for line in tail[max(0, index - 6) : index]]
            return [match.group(2), *[line for line in context if line.strip()]]
    return [line for line in tail if line.strip()][-8:]


def finish_status(
    out: Path, rc: int, tail: list[str], total_steps: int, stopped_by: str | None, preset: str = "smoke"
) -> str:
    """After a failed torchrun, make status.json say `failed` with the reason, unless the run already said
    `failed` or `stopped` (verl's PPO driver ends its Ray actor after a stop request); returns the state.

    The workers write `failed` themselves when Python sees the exception; a run killed by a signal, or one
    that died before training began, cannot, so the launcher writes it from the exit code and the log tail.
    """
    path = out / "status.json"
    doc = read_status(out)
    if doc.get("state") in ("failed", "stopped"):
        return doc["state"]
    trainer = "torchrun" if PRESETS[preset].trainer == "sft" else "verl.trainer.main_ppo"
    reason = f"stopped by {stopped_by}" if stopped_by else f"{trainer} exited with code {rc}"
    # stopped by a signal: that is the cause; what the output ends with is torchrun's report of it, or a
    # worker's exception the signal raised where it came (an interrupted logging call's KeyError)
    error_lines = [] if stopped_by else worker_error(tail)
    doc.update(
        state="failed",
        step=doc.get("step", latest_checkpoint(out)),
        total_steps=doc.get("total_steps", total_steps),
        pid=doc.get("pid", os.getpid()),
        host=doc.get("host", socket.gethostname()),
        error=reason + ("\n" + "\n".join(error_lines) if error_lines else ""),
        updated_at=time.time(),
        finished_at=time.time(),
    )
    write_json_atomic(path, doc)
    return "failed"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    preset = PRESETS[args.preset]
    if preset.trainer == "ppo":
        return main_ppo(args, preset)
    try:
        overrides = build_overrides(args)
        plan = plan_from_overrides(args, overrides)
    except ValueError as exc:
        print(f"trainer.launch: bad override ({exc}); nothing was started", file=sys.stderr)
        return 2
    problems = check_run(plan) + resume_problems(args.out.resolve(), args.resume_from)
    if problems:
        return _preflight_failed(args.preset, problems)

    train_rows = sum(parquet_rows(p) for p in plan.train_files)
    total_steps = count_steps(train_rows, plan)
    if override_value(overrides, "trainer.total_training_steps") in (None, "null"):
        overrides = merge_overrides({}, [*overrides, f"trainer.total_training_steps={total_steps}"])
    out = plan.out
    if args.dry_run:
        print(" ".join(shlex.quote(part) for part in torchrun_command(args.nproc, overrides)))
        return 0
    extra = {"nproc": args.nproc, "launcher_pid": os.getpid(), "vocab_size": _vocab_size(plan.model_path)}
    extra["steps_per_epoch"] = steps_in_data(train_rows, plan) // max(1, plan.total_epochs)
    extra["warmup_steps"] = round(
        float(override_value(overrides, "optim.lr_warmup_steps_ratio", 0)) * total_steps
    )
    return run_workers(args, torchrun_command(args.nproc, overrides), out, total_steps, extra)


def _preflight_failed(preset: str, problems: list[str]) -> int:
    """Say what pre-flight found, one problem a line; the exit code of a run that was not started."""
    print(f"trainer.launch: pre-flight failed for preset {preset!r}, nothing was started:", file=sys.stderr)
    for problem in problems:
        print(f"  - {problem}", file=sys.stderr)
    return 2


def main_ppo(args: argparse.Namespace, preset) -> int:
    """A GRPO preset: pre-flight, then verl's `main_ppo` (trainer/rl_launch.py)."""
    try:
        overrides = build_overrides(args)
    except ValueError as exc:
        print(f"trainer.launch: bad override ({exc}); nothing was started", file=sys.stderr)
        return 2
    out = args.out.resolve()
    problems, total_steps, train_rows = check_ppo_run(overrides, out, args.nproc)
    problems = problems + resume_problems(out, args.resume_from)
    if problems:
        return _preflight_failed(args.preset, problems)
    if args.dry_run:
        print(" ".join(shlex.quote(part) for part in ppo_command(overrides)))
        return 0
    if missing_packages():
        print(
            f"trainer.launch: {', '.join(missing_packages())} missing (verl's PPO trainer imports it without "
            "declaring it): pip install -r requirements.txt; nothing was started",
            file=sys.stderr,
        )
        return 2
    model = Path(override_value(overrides, "actor_rollout_ref.model.path"))
    batch = int(override_value(overrides, "data.train_batch_size", 8))
    extra = {"nproc": args.nproc, "launcher_pid": os.getpid(), "vocab_size": _vocab_size(model)}
    extra["steps_per_epoch"] = train_rows // max(1, batch)
    extra["warmup_steps"] = 0
    return run_workers(args, ppo_command(overrides), out, total_steps, extra)


def run_workers(
    args: argparse.Namespace, command: list[str], out: Path, total_steps: int, extra: dict
) -> int:
    """Start the trainer command, relay its output, forward SIGTERM/SIGINT; status.json says `failed` if it fails."""
    preset = PRESETS[args.preset]
    resume_from = args.resume_from if args.resume_from is not None else latest_checkpoint(out)
    write_json_atomic(
        out / "status.json",
        {
            "state": "running",
            "step": resume_from,
            "total_steps": total_steps,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "updated_at": time.time(),
            "error": None,
        },
    )
    print(
        f"trainer.launch: preset {args.preset} ({preset.description}); {total_steps} steps, {args.nproc} process(es), "
        f"run directory {out}" + (f"; resuming from step {resume_from}" if resume_from else ""),
        flush=True,
    )
    proc = subprocess.Popen(
        command,
        env=worker_env(args, [*preset.faults, *args.inject], extra),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        bufsize=1,
    )
    stopped_by: list[str] = []

    def forward(signum, _frame):
        stopped_by.append(signal.Signals(signum).name)
        proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    tail: collections.deque[str] = collections.deque(maxlen=200)
    held: list[str] = []  # the output after a signal was forwarded, relayed once the trainer has stopped
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if stopped_by:
                held.append(line)
            else:
                sys.stdout.write(line)
                sys.stdout.flush()
            tail.append(line.rstrip("\n"))
        rc = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if stopped_by:
        # torchrun reports the signal it was sent as a traceback of its own (SignalException): the signal
        # came from here, and the line below says it
        sys.stdout.writelines(without_signal_report(held))
        sys.stdout.flush()
    if rc != 0:
        state = finish_status(
            out, rc, list(tail), total_steps, stopped_by[0] if stopped_by else None, args.preset
        )
        if stopped_by and state != "stopped":
            print(f"trainer.launch: {signal_stop_line(out, stopped_by[0])}", flush=True)
            return rc
        if state != "stopped":
            print(f"trainer.launch: run {out} failed (exit code {rc}); see status.json", file=sys.stderr)
            return rc
    status = read_status(out)
    if status.get("state") == "stopped":
        # after whatever the trainer printed last (a progress bar's final redraw): the log ends with the stop
        print(f"trainer.launch: {stopped_line(out, status)}", flush=True)
    return 0


def without_signal_report(lines: list[str]) -> list[str]:
    """`lines` without torchrun's traceback of a signal it was sent (from its `Traceback` line to the
    `SignalException` line); any other traceback stays."""
    kept: list[str] = []
    start = None  # where the traceback being read began in `kept`
    for line in lines:
        text = re.sub(r"^\[rank\d+\]:\s?", "", line.rstrip("\n"))
        if text.startswith("Traceback (most recent call last)"):
            start = len(kept)
        kept.append(line)
        if start is not None and "SignalException" in text and EXCEPTION_LINE.match(text):
            del kept[start:]
            start = None
        elif start is not None and not text.startswith((" ", "Traceback")):
            start = None if EXCEPTION_LINE.match(text) else start
    return kept


def signal_stop_line(out: Path, signal_name: str) -> str:
    """The last line of a run stopped by a signal the launcher was sent: the step and the last checkpoint."""
    status = read_status(out)
    where = checkpoint_said(out, status.get("last_checkpoint_step") or latest_checkpoint(out))
    step = status.get("step")
    return f"stopped by {signal_name} at step {step if step is not None else '?'}; {where}"


def read_status(out: Path) -> dict:
    """The run's status.json, or {} when it is missing or unreadable."""
    try:
        doc = json.loads((out / "status.json").read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _vocab_size(model_path: Path) -> int | None:
    try:
        return int(json.loads((model_path / "config.json").read_text())["vocab_size"])
    except (OSError, ValueError, KeyError):
        return None


if __name__ == "__main__":
    sys.exit(main())
