"""A synthetic verl GRPO history for the RL rules' bench (`bench/detect_speed.py --rl`).

A pure function of (steps, seed): the metrics verl's GRPO trainer logs every step, named as verl names them
(`critic/score/mean`, `critic/rewards/mean`, `actor/entropy`, `actor/kl_loss`, `actor/ppo_kl`,
`response_length/clip_ratio`, `actor/grad_norm`, `actor/lr`, `timing_s/step`, and some no rule reads), with
the RL rules' trouble planted at fixed fractions of the run: the reward falling and recovering, the entropy
collapsing and later exploding, the KL accelerating and spiking, the PPO KL rising then levelling off (normal)
and once past its ceiling, nearly every response truncated for a while, a gradient spike and a NaN reward.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

# every metric of a step, judged ones first; the last five have no rule (verl logs dozens more such)
METRICS = (
    "critic/score/mean",
    "critic/rewards/mean",
    "actor/entropy",
    "actor/kl_loss",
    "actor/ppo_kl",
    "response_length/clip_ratio",
    "actor/grad_norm",
    "actor/lr",
    "timing_s/step",
    "actor/pg_loss",
    "actor/pg_clipfrac",
    "response_length/mean",
    "critic/advantages/mean",
    "perf/mfu/actor",
)
JUDGED = 9  # the first this-many metrics have rules

# where trouble sits, as fractions of the run (odd, so none sits on a round step)
REWARD_FALL = (0.303, 0.331)  # the reward falls by 0.4, then recovers
ENTROPY_COLLAPSE = (0.553, 0.557)
ENTROPY_EXPLOSION = (0.801, 0.8013)
KL_ACCELERATES = 0.703  # the KL loss grows exponentially for 120 steps, then falls back
KL_SPIKE = 0.451
PPO_KL_CEILING = 0.907  # the PPO KL jumps past 1.0 (kl_spike's ceiling) for one step
TRUNCATED = (0.601, 0.6013)  # 95 % of responses cut at the length limit
GRAD_SPIKE = 0.211
NAN_REWARD = 0.651


def _span(steps: int, fractions: tuple[float, float]) -> slice:
    return slice(int(steps * fractions[0]), max(int(steps * fractions[1]), int(steps * fractions[0]) + 1))


def columns(steps: int, seed: int = 0) -> dict[str, np.ndarray]:
    """`{"step": 1..steps, metric: values}` for every metric of `METRICS`."""
    rng = np.random.default_rng([seed, 16])
    noise = rng.standard_normal((len(METRICS), steps))
    step = np.arange(1, steps + 1, dtype=np.int64)
    frac = step / steps
    reward = 0.2 + 0.6 * (1 - np.exp(-5.0 * frac)) + 0.02 * noise[0]
    fall = _span(steps, REWARD_FALL)
    reward[fall] -= 0.4
    reward[int(steps * NAN_REWARD)] = np.nan
    entropy = 0.3 + 1.2 * np.exp(-3.0 * frac) + 0.01 * noise[2]
    entropy[_span(steps, ENTROPY_COLLAPSE)] *= 0.02
    entropy[_span(steps, ENTROPY_EXPLOSION)] = 6.0
    kl = 0.001 + 0.02 * frac + 0.0005 * np.abs(noise[3])
    at = int(steps * KL_ACCELERATES)
    kl[at : at + 120] += 0.002 * np.exp(np.arange(len(kl[at : at + 120])) / 20.0)
    kl[int(steps * KL_SPIKE)] = 0.5
    ppo_kl = 0.0005 + 0.03 * (1 - np.exp(-10.0 * frac)) + 0.0005 * np.abs(noise[4])
    ppo_kl[int(steps * PPO_KL_CEILING)] = 2.0
    clip = np.clip(0.02 + 0.01 * np.abs(noise[5]), 0, 1)
    clip[_span(steps, TRUNCATED)] = 0.95
    grad = 0.5 + 0.05 * np.abs(noise[6])
    grad[int(steps * GRAD_SPIKE)] = 20.0
    return {
        "step": step,
        "critic/score/mean": reward,
        "critic/rewards/mean": reward - 0.001 * np.abs(noise[1]),  # the score less a small length penalty
        "actor/entropy": entropy,
        "actor/kl_loss": kl,
        "actor/ppo_kl": ppo_kl,
        "response_length/clip_ratio": clip,
        "actor/grad_norm": grad,
        "actor/lr": np.full(steps, 1e-6),
        "timing_s/step": 60.0 + 2.0 * np.abs(noise[8]),
        "actor/pg_loss": 0.01 * noise[9],
        "actor/pg_clipfrac": 0.002 * np.abs(noise[10]),
        "response_length/mean": 500.0 + 50.0 * noise[11],
        "critic/advantages/mean": 0.01 * noise[12],
        "perf/mfu/actor": 0.3 + 0.01 * noise[13],
    }


def write_verl_jsonl(path: Path, steps: int, seed: int = 0) -> Path:
    """The history as verl's file logger writes it: one `{"step": s, "data": {metric: value}}` line a step
    (a NaN as Python's json writes it)."""
    cols = columns(steps, seed)
    values = np.column_stack([cols[m] for m in METRICS]).tolist()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for step, row in zip(cols["step"].tolist(), values, strict=True):
            f.write(json.dumps({"step": step, "data": dict(zip(METRICS, row, strict=True))}) + "\n")
    return path
