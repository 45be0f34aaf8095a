"""`loss_plateau` (collector/detect/loss_plateau.py): its backlog screen (`quiet`, and `between` its checks)
against the rule fed point by point (`screen_check.screened_as_fed`), and a falling loss taken mostly in bulk."""

from __future__ import annotations

import numpy as np

from collector.detect.loss_plateau import LossPlateau
from tests.collector.detect.screen_check import calm, drawn, screen_property, screened_as_fed

LOSS = "train/loss"


def _levelling_off(rng: np.random.Generator, values: np.ndarray) -> np.ndarray:
    """`trouble`: the loss stops falling (flat, or wobbling about one level) from some point on."""
    if rng.random() < 0.6:
        at = int(rng.integers(0, len(values)))
        values[at:] = values[at] + rng.choice([0.0, 0.001, 0.02]) * rng.standard_normal(len(values) - at)
    return values


@screen_property
def test_loss_plateau_screen_takes_only_what_feeding_gives(seed: int, n: int, horizon: int) -> None:
    steps, values, facts, excused = drawn(seed, LOSS, n, _levelling_off)
    screened_as_fed(LossPlateau(LOSS, LossPlateau.settings()), steps, values, facts, excused, horizon)


def test_a_falling_loss_is_taken_in_bulk() -> None:
    t = np.arange(2000) / 2000
    steps, values, facts, excused = calm(0.6 + 3.0 * np.exp(-5 * t))
    assert screened_as_fed(LossPlateau(LOSS, LossPlateau.settings()), steps, values, facts, excused) > 1800
