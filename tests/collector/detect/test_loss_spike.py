"""`loss_spike` (collector/detect/loss_spike.py): its backlog screen against the rule fed point by point
(`screen_check.screened_as_fed`), and a healthy loss taken mostly in bulk."""

from __future__ import annotations

import numpy as np

from collector.detect.loss_spike import LossSpike
from tests.collector.detect.screen_check import calm, drawn, screen_property, screened_as_fed

LOSS = "train/loss"


def _diverging(rng: np.random.Generator, values: np.ndarray) -> np.ndarray:
    """`trouble`: the loss climbs back, or jumps to a new level and stays there."""
    if rng.random() < 0.5:
        at = int(rng.integers(0, len(values)))
        values[at:] = values[at:] * rng.uniform(1.5, 4.0) + np.linspace(
            0, rng.uniform(0, 3), len(values) - at
        )
    return values


@screen_property
def test_loss_spike_screen_takes_only_what_feeding_gives(seed: int, n: int, horizon: int) -> None:
    steps, values, facts, excused = drawn(seed, LOSS, n, _diverging)
    screened_as_fed(LossSpike(LOSS, LossSpike.settings()), steps, values, facts, excused, horizon)


def test_a_healthy_loss_is_taken_in_bulk() -> None:
    t = np.arange(2000) / 2000
    noise = np.random.default_rng(4).standard_normal(2000)
    steps, values, facts, excused = calm(0.6 + 3.0 * np.exp(-5 * t) + 0.01 * noise)
    assert screened_as_fed(LossSpike(LOSS, LossSpike.settings()), steps, values, facts, excused) > 1800
