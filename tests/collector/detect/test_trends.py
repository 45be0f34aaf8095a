"""`no_learning` on a gradient norm and on a loss (collector/detect/trends.py): each backlog screen against its
rule fed point by point (`screen_check.screened_as_fed`), and a learning run taken mostly in bulk.
(`val_loss_rise` has no screen: its evaluations are few and fed in full.)"""

from __future__ import annotations

import math

import numpy as np
import pytest

from collector.detect.trends import NoLearningGrad, NoLearningLoss
from tests.collector.detect.screen_check import calm, drawn, screen_property, screened_as_fed, zeros

GRAD, LOSS = "train/grad_norm", "train/loss"


def _not_learning(rng: np.random.Generator, values: np.ndarray) -> np.ndarray:
    """`trouble`: a loss sitting at ln(vocab size) (a fresh model's), or flat from the start (one that never
    learns), or flat after it fell."""
    kind = rng.integers(0, 4)
    at = int(rng.integers(0, len(values)))
    if kind == 0:
        values[:at] = math.log(32000) * (1 + 0.001 * rng.standard_normal(at))
    elif kind == 1:
        values[:] = values[0] * (1 + rng.choice([0.0, 1e-7, 1e-3]) * rng.standard_normal(len(values)))
    elif kind == 2:
        values[at:] = values[at]
    return values


@screen_property
def test_no_learning_grad_screen_takes_only_what_feeding_gives(seed: int, n: int, horizon: int) -> None:
    steps, values, facts, excused = drawn(seed, GRAD, n, zeros)
    screened_as_fed(NoLearningGrad(GRAD, NoLearningGrad.settings()), steps, values, facts, excused, horizon)


@screen_property
def test_no_learning_loss_screen_takes_only_what_feeding_gives(seed: int, n: int, horizon: int) -> None:
    steps, values, facts, excused = drawn(seed, LOSS, n, _not_learning)
    screened_as_fed(NoLearningLoss(LOSS, NoLearningLoss.settings()), steps, values, facts, excused, horizon)


@pytest.mark.parametrize(
    ("rule", "metric"), [(NoLearningGrad, GRAD), (NoLearningLoss, LOSS)], ids=["grad", "loss"]
)
def test_a_learning_run_is_taken_in_bulk(rule: type, metric: str) -> None:
    t = np.arange(2000) / 2000
    noise = np.random.default_rng(5).standard_normal(2000)
    curve = 1.0 + 0.2 * noise if metric == GRAD else 0.6 + 3.0 * np.exp(-5 * t) + 0.01 * noise
    steps, values, facts, excused = calm(np.abs(curve), {"model": {"vocab_size": 32000}})
    assert screened_as_fed(rule(metric, rule.settings()), steps, values, facts, excused) > 1800
