"""`lr_anomaly` (collector/detect/schedule.py): its backlog screen against the rule fed point by point
(`screen_check.screened_as_fed`), and an lr on its configured curve taken mostly in bulk."""

from __future__ import annotations

import math

import numpy as np
import pytest

from collector.detect.schedule import LrAnomaly
from tests.collector.detect.screen_check import calm, drawn, screen_property, screened_as_fed

LR = "train/lr"


def _off_schedule(rng: np.random.Generator, values: np.ndarray) -> np.ndarray:
    """`trouble`: an lr at zero, or stuck where the schedule moves on, or scaled off the curve for a while."""
    at, span = int(rng.integers(0, len(values))), int(rng.integers(1, 100))
    kind = rng.integers(0, 3)
    if kind == 0:
        values[at : at + span] = 0.0
    elif kind == 1:
        values[at:] = values[at]
    else:
        values[at : at + span] *= rng.uniform(0.5, 1.6)
    return values


@screen_property
def test_lr_anomaly_screen_takes_only_what_feeding_gives(seed: int, n: int, horizon: int) -> None:
    steps, values, facts, excused = drawn(seed, LR, n, _off_schedule)
    screened_as_fed(LrAnomaly(LR, LrAnomaly.settings()), steps, values, facts, excused, horizon)


@pytest.mark.parametrize("scheduler", ["cosine", "linear", "constant"])
def test_an_lr_on_its_curve_is_taken_in_bulk(scheduler: str) -> None:
    n, warmup = 2000, 100
    s = np.arange(1, n + 1)
    progress = np.clip((s - warmup) / (n - warmup), 0, 1)
    after = {
        "cosine": 0.5 * (1 + np.cos(math.pi * progress)),
        "linear": 1 - progress,
        "constant": 1.0 + 0 * s,
    }
    lr = 1e-4 * np.where(s <= warmup, s / warmup, after[scheduler])
    info = {"lr_scheduler_type": scheduler, "lr": 1e-4, "warmup_steps": warmup, "max_steps": n}
    steps, values, facts, excused = calm(lr[:-1], info)  # the last step's lr is 0: a schedule's end
    assert screened_as_fed(LrAnomaly(LR, LrAnomaly.settings()), steps, values, facts, excused) > 1800
