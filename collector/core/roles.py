"""Metric names across trainers, mapped to the role they play in a run.

Stable interface (the API and the app pick panels with it; the detectors pick rules with it):

- `role_of(metric) -> str | None`: one of the roles below, or None for a metric no rule or panel reads by role.
- `real_units_name(metric) -> str`: the name without that scale (`train/lr(1e-3)` -> `train/lr`).
- `value_scale(metric) -> float`: what a stored value must be multiplied by to get the real quantity
  (`train/lr(1e-3)` is logged as lr x 1000, so its scale is 1e-3; everything else is 1.0).
- `direction_of(role) -> "min" | "max" | None`: which way is better, for roles where that is defined.
- `RL_ROLES`: the roles only an RL run (PPO/GRPO) logs: a run with a metric of one of them is an RL run.

Roles (a panel's own roles, which no rule reads, are named by their panel in `panels.py`): "loss" (the
language-model training loss), "val_loss", "val_score" (a validation metric where higher
is better, e.g. verl's `val-core/.../reward/mean@1`), "grad_norm", "lr", "step_time", "kl", "reward",
"reward_std", "entropy", "clip_ratio" (share of responses cut at the length limit), "response_length", "epoch", "accuracy", "eval_metric" (other `eval_*` numbers).

Policy losses (`actor/pg_loss`, `critic/vf_loss`) are deliberately not "loss": they are not language-model
losses, rise and fall with the advantages, and a spike or plateau in them means nothing on its own.
"""

from __future__ import annotations

import re

from collector.core.panels import own_role_names

RL_ROLES = frozenset({"reward", "kl", "reward_std", "clip_ratio"})

# Exact names first (fast path), then patterns. Keys are lower-cased.
_EXACT: dict[str, str] = {
    # training loss: verl SFT, HF Trainer, generic
    "train/loss": "loss",
    "loss": "loss",
    "train_loss_step": "loss",
    "train/loss_step": "loss",
    # validation loss
    "val/loss": "val_loss",
    "eval_loss": "val_loss",
    "eval/loss": "val_loss",
    "val_loss": "val_loss",
    "validation/loss": "val_loss",
    # gradient norm
    "train/grad_norm": "grad_norm",
    "grad_norm": "grad_norm",
    "actor/grad_norm": "grad_norm",
    "critic/grad_norm": "grad_norm",
    "train/global_grad_norm": "grad_norm",
    # learning rate
    "train/lr": "lr",
    "lr": "lr",
    "learning_rate": "lr",
    "train/learning_rate": "lr",
    "actor/lr": "lr",
    # time per step (not train_runtime: that is the whole run's wall time, logged once)
    "train/time(s)": "step_time",
    "train/step_time": "step_time",
    "timing_s/step": "step_time",
    "perf/time_per_step": "step_time",
    "time_per_step": "step_time",
    "step_time": "step_time",
    # KL divergence to the reference policy
    "actor/ppo_kl": "kl",
    "actor/kl_loss": "kl",
    "kl": "kl",
    "objective/kl": "kl",
    "actor/kl": "kl",
    "critic/kl": "kl",
    # reward
    "critic/score/mean": "reward",
    "critic/rewards/mean": "reward",
    "reward": "reward",
    "rewards/mean": "reward",
    "train/reward": "reward",
    "env/reward_mean": "reward",
    # reward spread
    "reward_std": "reward_std",
    "critic/score/std": "reward_std",
    "critic/rewards/std": "reward_std",
    # the rest
    "entropy": "entropy",
    "actor/entropy": "entropy",
    "actor/entropy_loss": "entropy",
    "train/entropy": "entropy",
    # share of responses cut at the length limit
    "response_length/clip_ratio": "clip_ratio",
    "completions/clipped_ratio": "clip_ratio",
    "train/completions/clipped_ratio": "clip_ratio",
    "response_length/mean": "response_length",
    "completions/mean_length": "response_length",
    "completion_length": "response_length",  # TRL GRPOTrainer before 0.15 (and Unsloth's notebooks on it)
    "epoch": "epoch",
    "train/epoch": "epoch",
    "accuracy": "accuracy",
    "mean_token_accuracy": "accuracy",
    "train/accuracy": "accuracy",
}

_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"^train/lr\(\d*\.?\d+e-?\d+\)$"), "lr"),
    (re.compile(r"^val-core/.+"), "val_score"),
    (re.compile(r"^val(idation)?/.*loss$"), "val_loss"),
    (re.compile(r"^rewards/[^/]+/mean$"), "reward"),
    (re.compile(r"^timing_s/step$"), "step_time"),
    (re.compile(r"^(eval|val|test)[_/].*acc(uracy)?$"), "accuracy"),
    (re.compile(r"^val/test_score/.+"), "val_score"),
    (re.compile(r"^eval_(runtime|samples_per_second|steps_per_second|num_tokens)$"), ""),
    (re.compile(r"^eval_.+_loss$"), "val_loss"),  # HF with a dict of eval datasets: eval_<name>_loss
    (re.compile(r"^eval_.+"), "eval_metric"),
]

# Metric names the panels name for roles of their own (no rule reads them).
_PANEL_NAMES = own_role_names()

_SCALE = re.compile(r"\((\d*\.?\d+e-?\d+)\)$")

_DIRECTION = {
    "loss": "min",
    "val_loss": "min",
    "val_score": "max",
    "accuracy": "max",
    "reward": "max",
}

_cache: dict[str, str | None] = {}


def role_of(metric: str) -> str | None:
    """The role a metric name plays ("loss", "grad_norm", "lr", ...), or None when no rule or panel reads it
    by role."""
    hit = _cache.get(metric, "?")
    if hit != "?":
        return hit
    key = metric.lower()
    role: str | None = _EXACT.get(key) or _PANEL_NAMES.get(key)
    if role is None:
        for pattern, name in _PATTERNS:
            if pattern.match(key):
                role = name or None
                break
    if role is None and key.startswith("train/"):
        # HF's W&B and TensorBoard callbacks prefix every training key with "train/" (TRL's `kl`,
        # `reward_std`, `objective/kl`, `completions/mean_length` arrive as `train/kl`, ...)
        role = role_of(metric[len("train/") :])
    if len(_cache) < 100_000:  # metric names are few; the bound only guards against a pathological file
        _cache[metric] = role
    return role


EVALUATION_ROLES = ("val_loss", "val_score", "eval_metric")


def step_order(metric: str) -> tuple[bool, bool, str]:
    """Where a metric's point stands among the points of one step when detection judges them, on every path
    (read live, read back from the store): training metrics first, then evaluations (a trainer logs an
    evaluation after the training record of its step, and a rule reading the training loss at an evaluation
    reads that step's), each by name; gradient norms last among the training metrics (a NaN norm alone is a
    skipped step, a notice: judged after a NaN loss or lr of its step, it joins that error instead of heading
    it, whichever batches the step's points came in)."""
    role = role_of(metric)
    return role in EVALUATION_ROLES, role == "grad_norm", metric


def value_scale(metric: str) -> float:
    """The factor that turns a stored value into the real quantity: `train/lr(1e-3)` -> 1e-3, else 1.0."""
    found = _SCALE.search(metric)
    if found is None:
        return 1.0
    return float(found.group(1))


def real_units_name(metric: str) -> str:
    """The metric's name in real units, without the scale `value_scale` reads: `train/lr(1e-3)` -> `train/lr`."""
    return _SCALE.sub("", metric)


def direction_of(role: str | None) -> str | None:
    """ "min" or "max" for roles where one way is better (loss, val_loss, reward, accuracy...), else None."""
    return _DIRECTION.get(role or "")


def eval_metric_direction(metric: str) -> str:
    """Best guess of which way an evaluation metric improves: error rates and losses fall, scores rise."""
    key = metric.lower()
    if any(
        word in key for word in ("loss", "wer", "cer", "perplexity", "ppl", "error", "mse", "mae", "rmse")
    ):
        return "min"
    return "max"
