"""Detection gives identical events however the points are cut into batches: one batch, many small ones
(cut anywhere, mid-step included), or one point at a time. The speed-ups in the rules (sorted windows, cached
medians) must not make a verdict depend on where a batch ended."""

from __future__ import annotations

import math
import random

import pytest

from collector.core.model import Points
from collector.detect.engine import RunDetector
from tests.collector.detect.synth import healthy_ppo, healthy_sft, replace_values

VERL_INFO = {
    "trainer": {"total_training_steps": 3000, "save_freq": 200, "test_freq": 100},
    "optim": {"lr": 1e-4, "lr_warmup_steps_ratio": 0.05, "lr_scheduler_type": "cosine"},
}


def troubled_sft() -> dict:
    """Every SFT rule has something to say: NaN, grad spikes and a level shift, loss jumps and a plateau,
    overfitting, slow steps, an lr that drops to zero."""
    series = healthy_sft(total=3000, seed=41)
    rng = random.Random(41)
    series = replace_values(series, "train/grad_norm", {400: math.nan, 900: 40.0, 901: 90.0, 902: 12.0})
    series = replace_values(series, "train/grad_norm", {s: 6.0 + rng.random() for s in range(2000, 2100)})
    series = replace_values(series, "train/loss", {903: 5.0, 904: 7.0, 1500: math.inf})
    series = replace_values(series, "train/loss", {s: 1.0 + 0.01 * rng.random() for s in range(1200, 3001)})
    series = replace_values(series, "train/time(s)", {777: 9.0, 1234: 30.0, 1235: 12.0})
    series = replace_values(series, "train/lr", {s: 0.0 for s in range(1700, 1720)})
    steps, values = series["val/loss"]
    # overfitting: the validation loss climbs from step 1500 on while the training loss still falls
    at_1500 = values[steps.index(1500)]
    series["val/loss"] = (
        steps,
        [v if s <= 1500 else at_1500 * (1 + (s - 1500) / 2000) for s, v in zip(steps, values, strict=True)],
    )
    return series


def points_of(series: dict) -> list[tuple[int, str, float]]:
    rows = sorted(
        (s, i, m, v)
        for i, (m, (steps, values)) in enumerate(series.items())
        for s, v in zip(steps, values, strict=True)
    )
    return [(s, m, v) for s, _, m, v in rows]


def run(rows: list[tuple[int, str, float]], cuts: list[int], run_info: dict | None) -> list[dict]:
    """Every event handed out, in order, feeding `rows` cut at the positions in `cuts`."""
    detector = RunDetector("r", run_info=run_info)
    detector.note_checkpoints([200, 400])
    events = []
    bounds = [0, *cuts, len(rows)]
    for a, b in zip(bounds, bounds[1:], strict=False):
        batch = rows[a:b]
        events += detector.update(
            Points([r[0] for r in batch], [r[1] for r in batch], [r[2] for r in batch], [None] * len(batch))
        )
    return [e.to_dict() for e in events]


def final(events: list[dict]) -> dict:
    latest = {}
    for e in events:
        latest[(e["rule"], e["metric"], e["first_step"])] = e
    return latest


@pytest.mark.parametrize(
    ("name", "series", "info"), [("sft", troubled_sft(), VERL_INFO), ("ppo", None, None)]
)
def test_one_batch_many_batches_and_point_by_point_give_identical_events(name, series, info):
    if series is None:
        series = healthy_ppo(total=600, seed=3)
        series = replace_values(series, "actor/ppo_kl", {300: 2.0, 301: 3.5, 302: 1.5})
        series = replace_values(series, "critic/score/std", {s: 0.0 for s in range(400, 420)})
    rows = points_of(series)
    whole = run(rows, [], info)
    # every rule an alert names: its own, and those of the findings it holds as one incident
    rules = {r for e in whole for r in e["evidence"].get("rules", [e["rule"]])}
    if name == "sft":
        assert {"nonfinite", "grad_spike", "loss_spike", "val_loss_rise", "loss_plateau"} <= rules, rules
        assert {"step_time_spike", "lr_anomaly"} <= rules, rules
    else:
        assert {"kl_spike", "reward_collapse"} <= rules, rules
    rng = random.Random(7)
    small = sorted(rng.sample(range(1, len(rows)), len(rows) // 37))
    every = list(range(1, len(rows)))
    for cuts in (small, every):
        events = run(rows, cuts, info)
        assert final(events) == final(whole)  # the same episodes, each ending in the same state
