"""Real HF Trainer runs of the repo's tiny local Qwen2 (data/build) with `trainer.hf.RunwatchCallback`, on a GPU
when there is one (bf16; on CPU with `--scale 0.05`), written as run folders for runwatch to judge afterwards:

- `hf-gpu-healthy`: lr 3e-4, cosine, 5 % warm-up, 600 steps (keep the last checkpoint);
- `hf-gpu-diverge`: lr 1.0, no warm-up, no clipping (the loss jumps far above ln(vocab) from the first logged
  step: a `loss_above_uniform` error);
- `hf-gpu-stopped`: as healthy, a stop request written at step 230 (status `stopped`, a checkpoint of that step);
- `hf-gpu-fp16`: fp16 at lr 1.0, no clipping (NaN gradients from the first steps: a `nonfinite` error);
- `hf-gpu-accum8`: as healthy with gradient accumulation 8 (the logged loss is not scaled by it).

It needs torch, transformers and pandas only (no DuckDB, no verl), so it runs on a bare GPU image; copy the
folders back and run `runwatch check OUT/runs`. The SFT data is data/build's (`make data`).

    python scripts/gpu_hf_check.py OUT [--runs healthy diverge stopped fp16 accum] [--scale 1.0]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import pandas as pd
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainerCallback, TrainingArguments
from transformers.integrations import is_tensorboard_available

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from collector.core.stop_request import write_stop_request  # noqa: E402
from trainer.hf import RunwatchCallback  # noqa: E402

DATA = REPO / "data" / "build"
GPU = torch.cuda.is_available()
# TensorBoard events are a second record of the same run for runwatch to read; a bare GPU image may lack the
# package, and the run is worth having without them.
REPORT_TO = "tensorboard" if is_tensorboard_available() else "none"


class Rows(torch.utils.data.Dataset):
    """The SFT conversations of a parquet file, through the tokenizer's chat template; padding is not learned."""

    def __init__(self, tokenizer, path: Path, limit: int | None = None) -> None:
        chats = pd.read_parquet(path)["messages"].tolist()[:limit]
        texts = [tokenizer.apply_chat_template(list(m), tokenize=False) for m in chats]
        self.enc = tokenizer(
            texts, padding="max_length", truncation=True, max_length=160, return_tensors="pt"
        )

    def __len__(self) -> int:
        return self.enc["input_ids"].shape[0]

    def __getitem__(self, i: int) -> dict:
        ids, mask = self.enc["input_ids"][i], self.enc["attention_mask"][i]
        labels = ids.clone()
        labels[mask == 0] = -100
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}


class AskToStop(TrainerCallback):
    """Writes the run's stop request at one step, as `runwatch stop` would."""

    def __init__(self, run_dir: Path, at: int) -> None:
        self.run_dir, self.at = run_dir, at

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.at:
            write_stop_request(self.run_dir, reason="loss diverged (GPU check, by hand)", by="person")


def train(root: Path, name: str, data: tuple, lr: float, steps: int, *, clip: float = 1.0,
          stop_at: int | None = None, fp16: bool = False, accum: int = 1, scale: float = 1.0) -> None:  # fmt: skip
    run_dir = root / name
    run_dir.mkdir(parents=True)
    steps = max(10, int(steps * scale))
    every = max(5, int(50 * scale))
    args = TrainingArguments(
        output_dir=str(run_dir),
        max_steps=steps,
        per_device_train_batch_size=64,
        gradient_accumulation_steps=accum,
        learning_rate=lr,
        lr_scheduler_type="cosine",
        warmup_steps=int(0.05 * steps) if lr < 1e-2 else 0,
        max_grad_norm=clip,
        logging_steps=5,
        eval_strategy="steps",
        eval_steps=every,
        save_steps=2 * every,
        bf16=GPU and not fp16,
        fp16=fp16 and GPU,
        use_cpu=not GPU,
        report_to=REPORT_TO,
        disable_tqdm=True,
    )
    callbacks = [RunwatchCallback()]
    if stop_at:
        callbacks.append(AskToStop(run_dir, max(1, int(stop_at * scale))))
    model = AutoModelForCausalLM.from_pretrained(DATA / "model")
    trainer = Trainer(
        model=model, args=args, train_dataset=data[0], eval_dataset=data[1], callbacks=callbacks
    )
    started = time.time()
    trainer.train()
    memory = f", peak GPU memory {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB" if GPU else ""
    status = json.loads((run_dir / "status.json").read_text())
    print(f"{name}: {trainer.state.global_step} steps in {time.time() - started:.1f} s{memory}; status "
          f"{status['state']}; last logs {json.dumps(trainer.state.log_history[-2:])}", flush=True)  # fmt: skip


RUNS = {
    "healthy": ("hf-gpu-healthy", 3e-4, 600, {}),
    "diverge": ("hf-gpu-diverge", 1.0, 400, {"clip": 0.0}),
    "stopped": ("hf-gpu-stopped", 3e-4, 600, {"stop_at": 230}),
    "fp16": ("hf-gpu-fp16", 1.0, 200, {"clip": 0.0, "fp16": True}),
    "accum": ("hf-gpu-accum8", 3e-4, 200, {"accum": 8}),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument(
        "--runs", nargs="+", choices=list(RUNS), default=list(RUNS), help="which runs (default: all)"
    )
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every run's steps (0.05 on a CPU)")
    args = ap.parse_args()
    device = torch.cuda.get_device_name(0) if GPU else "CPU"
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, python {platform.python_version()}, "
          f"{device}, TensorBoard events: {REPORT_TO != 'none'}", flush=True)  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(DATA / "tokenizer")
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    data = (Rows(tokenizer, DATA / "sft_train.parquet"), Rows(tokenizer, DATA / "sft_val.parquet", 256))
    for key in args.runs:
        name, lr, steps, extra = RUNS[key]
        train(args.out / "runs", name, data, lr, steps, scale=args.scale, **extra)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
