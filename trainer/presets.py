"""Run presets: verl 0.9.1 overrides plus the scenario faults each one injects. Pure data, no I/O.

- `gpu`: the seed hyperparameters for Qwen2.5-Coder-7B-Instruct on GPUs (`trainer/run_sft.sh`).
- `demo`: the tiny CPU model overfitting a small train set (val/loss turns up while train/loss keeps
  falling), then a gradient spike (learning rate x10 at steps 60-61); 200 steps, checkpoint and
  validation every 10, all checkpoints kept. What `make demo` runs.
- `overfit`: the same overfitting run without the spike.
- `spike`: a healthy run whose learning rate is boosted 150x for two steps: grad norm and loss jump.
- `nan`: a healthy run with a NaN loss injected at step 12.
- `stall`: a healthy run whose process sleeps 90 s before step 15 (status.json and metrics stop moving).
- `healthy`: the full train set, decreasing losses, nothing injected.
- `smoke`: a handful of steps for tests.
- `grpo`, `grpo_demo`, `grpo_collapse`, `grpo_kl`, `grpo_truncate`, `grpo_smoke`: GRPO runs of verl's PPO
  trainer on CPU (`trainer/rl_presets.py`).

Every CPU preset starts from `CPU_BASE` (the overrides verl needs to train on CPU with gloo, from
/work/shared/notes/verl-on-cpu.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainer.rl_presets import RL_GPU_PRESETS, RL_PRESETS

# Keys are verl's Hydra keys; a leading "+" adds a key verl's config does not declare.
CPU_BASE: dict[str, Any] = {
    "+model.override_config.attn_implementation": "sdpa",
    "engine.strategy": "fsdp2",
    "+engine.mixed_precision": "{param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
    "engine.use_torch_compile": "false",  # compiling costs more than it saves on a 100 K-parameter model
    "model.enable_gradient_checkpointing": "false",
    "trainer.device": "cpu",
    "data.num_workers": 0,
    "data.use_dynamic_bsz": "false",
    "data.max_length": 512,
    "data.truncation": "right",
    "data.train_batch_size": 8,
    "data.micro_batch_size_per_gpu": 4,
    # 3e-3 already gives the tiny model a one-off grad-norm spike near step 9: healthy runs stay below it.
    "optim.lr": 2e-3,
    "optim.betas": "[0.9,0.95]",
    "optim.weight_decay": 0.01,
    "optim.lr_warmup_steps_ratio": 0.05,
    "optim.clip_grad": 1.0,
    "optim.lr_scheduler_type": "cosine",
    "optim.min_lr_ratio": 0.1,
    "trainer.seed": 42,
    "engine.seed": 42,
    "trainer.total_epochs": 1,
    "trainer.resume_mode": "auto",
    "checkpoint.save_contents": "[model,optimizer,extra,hf_model]",
    "trainer.project_name": "runwatch",
}

# The seed hyperparameters (lr 2e-5, betas 0.9/0.95, wd 0.01, warmup 5%, clip 1.0, cosine, 2 epochs,
# save/test every 500, keep 5, seed 42, max_length 4096, global batch 128, micro batch 2) as verl keys.
GPU_BASE: dict[str, Any] = {
    "engine.strategy": "fsdp2",
    "trainer.device": "cuda",
    "data.use_dynamic_bsz": "false",
    "data.max_length": 4096,
    "data.truncation": "right",
    "data.train_batch_size": 128,
    "data.micro_batch_size_per_gpu": 2,
    "data.num_workers": 8,
    "optim.lr": 2e-5,
    "optim.betas": "[0.9,0.95]",
    "optim.weight_decay": 0.01,
    "optim.lr_warmup_steps_ratio": 0.05,
    "optim.clip_grad": 1.0,
    "optim.lr_scheduler_type": "cosine",
    "trainer.total_epochs": 2,
    "trainer.save_freq": 500,
    "trainer.test_freq": 500,
    "trainer.max_ckpt_to_keep": 5,
    "trainer.seed": 42,
    "engine.seed": 42,
    "trainer.resume_mode": "auto",
    "checkpoint.save_contents": "[model,optimizer,extra,hf_model]",
    "trainer.project_name": "runwatch",
}


@dataclass(frozen=True)
class Preset:
    """A named run recipe: verl overrides, injected faults, and whether it runs on CPU."""

    name: str
    description: str
    overrides: dict[str, Any]
    faults: list[dict[str, Any]] = field(default_factory=list)
    cpu: bool = True
    trainer: str = "sft"  # "sft": verl.trainer.sft_trainer under torchrun; "ppo": verl.trainer.main_ppo (Ray)


def _cpu(**changes: Any) -> dict[str, Any]:
    merged = dict(CPU_BASE)
    for key, value in changes.items():
        merged[key.replace("__", ".")] = value
    return merged


# Overfitting for real: 16 conversations seen 60 times by a model that can memorise their random names and
# numbers; the validation loss falls for about 40 steps, then climbs while the train loss keeps falling.
OVERFIT = _cpu(
    data__train_max_samples=16,
    trainer__total_epochs=60,
    trainer__test_freq=10,
    trainer__save_freq=10,
    # Every checkpoint is kept: with rotation, the best one (before the turn) would be gone by the end.
    trainer__max_ckpt_to_keep="null",
    optim__lr=1e-2,
)
# The demo: the same overfitting over 200 steps, and a gradient spike once the turn shows (later, the model has
# memorised its 16 rows and a learning-rate boost no longer moves it).
DEMO = {**OVERFIT, "trainer.total_epochs": 100}

PRESETS: dict[str, Preset] = {
    preset.name: preset
    for preset in [
        Preset(
            "demo",
            "overfits a 16-row train set (val/loss turns up after ~40 steps), gradient spike at steps 60-61",
            DEMO,
            faults=[{"kind": "lr_spike", "step": 60, "steps": 2, "factor": 10.0}],
        ),
        Preset("overfit", "overfits a 16-row train set: val/loss turns up while train/loss falls", OVERFIT),
        Preset(
            "spike",
            "healthy run with the learning rate boosted 150x at steps 20-21: grad norm and loss jump",
            _cpu(trainer__total_training_steps=60, trainer__test_freq=20, trainer__save_freq=20),
            faults=[{"kind": "lr_spike", "step": 20, "steps": 2, "factor": 150.0}],
        ),
        Preset(
            "nan",
            "healthy run with a NaN loss injected at step 12",
            _cpu(trainer__total_training_steps=30, trainer__test_freq=10, trainer__save_freq=10),
            faults=[{"kind": "nan", "step": 12}],
        ),
        Preset(
            "stall",
            # Not next to a save/validation step, where a long pause is expected and a monitor waits longer.
            "healthy run whose process sleeps 90 s before step 15 (longer than a 60 s stall threshold)",
            _cpu(trainer__total_training_steps=30, trainer__test_freq=10, trainer__save_freq=10),
            faults=[{"kind": "stall", "step": 15, "seconds": 90}],
        ),
        Preset(
            "healthy",
            "the full train set for 200 steps: both losses fall",
            _cpu(trainer__total_training_steps=200, trainer__test_freq=25, trainer__save_freq=25),
        ),
        Preset(
            "smoke",
            "six steps, validation and checkpoint every 3 (for tests)",
            _cpu(trainer__total_training_steps=6, trainer__test_freq=3, trainer__save_freq=3),
        ),
        Preset(
            "gpu", "the seed hyperparameters on GPUs (Qwen2.5-Coder-7B-Instruct)", dict(GPU_BASE), cpu=False
        ),
        *[
            Preset(name, description, overrides, faults=faults, trainer="ppo")
            for name, description, overrides, faults in RL_PRESETS
        ],
        *[
            Preset(name, description, overrides, faults=faults, cpu=False, trainer="ppo")
            for name, description, overrides, faults in RL_GPU_PRESETS
        ],
    ]
}


def override_key(item: str) -> str:
    """The config key of a Hydra override, without its `+`/`++`/`~` prefix: `+a.b=1` -> `a.b`."""
    return item.split("=", 1)[0].lstrip("+~")


def merge_overrides(base: dict[str, Any], extra: list[str]) -> list[str]:
    """`base` as `key=value` overrides, with each `extra` override replacing the base one for its key.

    Hydra rejects two overrides of one key, so a user's `optim.lr=1e-4` must replace the preset's.
    A base key that needs `+` keeps its `+` unless the user wrote their own form.
    """
    merged: dict[str, str] = {override_key(k): f"{k}={v}" for k, v in base.items()}
    for item in extra:
        if "=" not in item:
            raise ValueError(f"override {item!r} is not key=value")
        merged[override_key(item)] = item
    return list(merged.values())


def override_value(overrides: list[str], key: str, default: Any = None) -> str | None:
    """The value the overrides give `key`, or `default`."""
    for item in reversed(overrides):
        if override_key(item) == key:
            return item.split("=", 1)[1]
    return default
