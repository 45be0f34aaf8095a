"""Synthetic training histories for the detector tests: deterministic (seeded), plain lists, no I/O.

`healthy_sft` is the baseline every "must not fire" test starts from: warmup then cosine lr, a loss that
falls with noise, grad_norm noisy around 1, time per step with slow steps at save and eval steps, and a
validation loss every `eval_every` steps with one small bump.
"""

from __future__ import annotations

import math
import random

Series = dict[str, tuple[list[int], list[float]]]


def cosine_lr(step: int, total: int, warmup: int, base: float = 1e-4) -> float:
    if step <= warmup:
        return base * step / max(1, warmup)
    progress = (step - warmup) / max(1, total - warmup)
    return base * 0.5 * (1 + math.cos(math.pi * progress))


def healthy_sft(
    total: int = 2000,
    log_every: int = 1,
    eval_every: int = 100,
    save_every: int = 200,
    warmup: int = 100,
    seed: int = 1,
    names: dict[str, str] | None = None,
) -> Series:
    """A healthy verl-style SFT run (metric names overridable: `names={"loss": "loss", ...}`)."""
    rng = random.Random(seed)
    key = {
        "loss": "train/loss",
        "grad_norm": "train/grad_norm",
        "lr": "train/lr",
        "step_time": "train/time(s)",
        "val_loss": "val/loss",
        **(names or {}),
    }
    out: Series = {name: ([], []) for name in key.values()}

    def add(role: str, step: int, value: float) -> None:
        out[key[role]][0].append(step)
        out[key[role]][1].append(value)

    for step in range(log_every, total + 1, log_every):
        level = 0.9 + 2.0 * math.exp(-step / (total / 4))
        # logged values are means over `log_every` steps: noise shrinks with the logging interval
        noise = 0.04 / math.sqrt(log_every)
        add("loss", step, level * (1 + rng.gauss(0, noise)))
        add(
            "grad_norm",
            step,
            math.exp(rng.gauss(0, 0.25 / math.sqrt(log_every))) * (1.5 if step < warmup else 1.0),
        )
        add("lr", step, cosine_lr(step, total, warmup))
        slow = 6.0 if step % save_every == 0 else 3.0 if step % eval_every == 0 else 1.0
        add("step_time", step, 0.5 * slow * (1 + abs(rng.gauss(0, 0.05))))
    bump_done = False
    for step in range(eval_every, total + 1, eval_every):
        value = 0.85 + 1.8 * math.exp(-step / (total / 3))
        if not bump_done and step >= total // 2:
            value *= 1.03  # one evaluation a little worse: noise, not overfitting
            bump_done = True
        add("val_loss", step, value)
    return out


def replace_values(series: Series, metric: str, new: dict[int, float]) -> Series:
    """A copy of `series` with some of `metric`'s values replaced by step."""
    steps, values = series[metric]
    out = dict(series)
    out[metric] = (list(steps), [new.get(s, v) for s, v in zip(steps, values, strict=True)])
    return out


def rules_of(events: list, severity: str | None = None) -> set[str]:
    return {e.rule for e in events if severity is None or e.severity == severity}


def healthy_ppo(total: int = 400, seed: int = 1, test_freq: int = 20) -> Series:
    """A healthy verl PPO/GRPO run: noisy rising reward, slowly growing KL, falling entropy, steady step time."""
    rng = random.Random(seed)
    out: Series = {}

    def add(name: str, step: int, value: float) -> None:
        out.setdefault(name, ([], []))
        out[name][0].append(step)
        out[name][1].append(value)

    for step in range(1, total + 1):
        progress = step / total
        add("critic/score/mean", step, 0.2 + 0.5 * progress + rng.gauss(0, 0.08))
        add("critic/score/std", step, 0.4 - 0.1 * progress + abs(rng.gauss(0, 0.02)))
        add("actor/ppo_kl", step, 0.002 + 0.01 * progress + abs(rng.gauss(0, 0.002)))
        add("actor/kl_loss", step, 0.001 + 0.03 * progress + abs(rng.gauss(0, 0.003)))
        add("actor/pg_loss", step, rng.gauss(0, 0.05))
        add("actor/entropy", step, 1.2 - 0.5 * progress + rng.gauss(0, 0.02))
        add("actor/grad_norm", step, math.exp(rng.gauss(-1.0, 0.3)))
        add("actor/lr", step, 1e-6)
        add("response_length/mean", step, 300 + 200 * progress + rng.gauss(0, 20))
        slow = 2.5 if step % test_freq == 0 else 1.0
        add("timing_s/step", step, 40.0 * slow * (1 + abs(rng.gauss(0, 0.05))))
        if step % test_freq == 0:
            add("val-core/openai/gsm8k/reward/mean@1", step, 0.3 + 0.4 * progress + rng.gauss(0, 0.02))
    return out
