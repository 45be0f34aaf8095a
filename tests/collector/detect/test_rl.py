"""`reward_collapse` (on a reward and on its spread), `entropy_collapse` and `response_truncation`
(collector/detect/rl.py): each backlog screen against its rule fed point by point
(`screen_check.screened_as_fed`), and a healthy series taken mostly in bulk."""

from __future__ import annotations

import numpy as np
import pytest

from collector.detect.rl import EntropyCollapse, ResponseTruncation, RewardCollapse, RewardStdCollapse
from tests.collector.detect.screen_check import calm, drawn, screen_property, screened_as_fed, zeros

REWARD, SPREAD, ENTROPY, CLIPPED = (
    "critic/score/mean",
    "critic/score/std",
    "actor/entropy",
    "response_length/clip_ratio",
)


def _truncated(rng: np.random.Generator, values: np.ndarray) -> np.ndarray:
    """`trouble`: stretches where nearly every response is cut at the length limit."""
    at, span = int(rng.integers(0, len(values))), int(rng.integers(1, 60))
    values[at : at + span] = rng.uniform(0.9, 1.0, len(values[at : at + span]))
    return values


@screen_property
def test_reward_collapse_screen_takes_only_what_feeding_gives(seed: int, n: int, horizon: int) -> None:
    steps, values, facts, excused = drawn(seed, REWARD, n)
    screened_as_fed(RewardCollapse(REWARD, RewardCollapse.settings()), steps, values, facts, excused, horizon)


@screen_property
def test_reward_spread_collapse_screen_takes_only_what_feeding_gives(seed: int, n: int, horizon: int) -> None:
    steps, values, facts, excused = drawn(seed, SPREAD, n, zeros)
    rule = RewardStdCollapse(SPREAD, RewardStdCollapse.settings())
    screened_as_fed(rule, steps, values, facts, excused, horizon)


@screen_property
def test_entropy_collapse_screen_takes_only_what_feeding_gives(seed: int, n: int, horizon: int) -> None:
    steps, values, facts, excused = drawn(seed, ENTROPY, n)
    screened_as_fed(
        EntropyCollapse(ENTROPY, EntropyCollapse.settings()), steps, values, facts, excused, horizon
    )


@screen_property
def test_response_truncation_screen_takes_only_what_feeding_gives(seed: int, n: int, horizon: int) -> None:
    steps, values, facts, excused = drawn(seed, CLIPPED, n, _truncated)
    rule = ResponseTruncation(CLIPPED, ResponseTruncation.settings())
    screened_as_fed(rule, steps, values, facts, excused, horizon)


@pytest.mark.parametrize(
    ("rule", "metric"),
    [
        (RewardCollapse, REWARD),
        (RewardStdCollapse, SPREAD),
        (EntropyCollapse, ENTROPY),
        (ResponseTruncation, CLIPPED),
    ],
    ids=["reward", "spread", "entropy", "clipped"],
)
def test_a_healthy_series_is_taken_in_bulk(rule: type, metric: str) -> None:
    t = np.arange(2000) / 2000
    noise = 0.01 * np.random.default_rng(8).standard_normal(2000)
    curve = {
        REWARD: 0.2 + 0.6 * (1 - np.exp(-4 * t)) + noise,
        SPREAD: 0.3 + noise,
        ENTROPY: 0.5 + 0.8 * np.exp(-t) + noise,
        CLIPPED: 0.05 + np.abs(noise),
    }[metric]
    steps, values, facts, excused = calm(curve)
    assert screened_as_fed(rule(metric, rule.settings()), steps, values, facts, excused) > 1800
