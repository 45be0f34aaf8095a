"""`reward_collapse` (on a reward and on its spread), `entropy_collapse` and `response_truncation`
(collector/detect/rl.py): each backlog screen against its rule fed point by point
(`screen_check.screened_as_fed`), and a healthy series taken mostly in bulk."""

from __future__ import annotations

import numpy as np
import pytest

from collector.core.facts import RunFacts
from collector.core.severity import Severity
from collector.detect.base import Finding
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


def test_a_reward_that_fell_to_its_floor_is_not_hidden_by_the_noise_its_own_fall_made() -> None:
    """A GRPO reward at 0.8-1.0 that falls to 0 and stays there (two stray 0.1s among the zeros): before, the
    rule's longer-run noise was the deviation around the median of the last 100 points, which the fall itself
    inflated (half the points high, half at 0), so the drop hid behind it until the window held only zeros:
    the collapse was dated from step 165, 65 steps late. The shape is Sunshine535/nips-grpo-dynamics
    `results/logs/exp2/adabalance_seed42.log` (commit 2cd2efce1c0622bfd77899c555357107706a0c54): TRL logs
    every 5 steps, reward ~0.9 to step 65, 0.6, 0.2, 0.125, then 0 from step 85 to 200."""
    high = [0.9, 0.725, 0.875, 0.975, 0.825, 0.975, 0.925, 0.95, 0.975, 0.825, 0.9, 0.775, 0.975]
    low = [0.0] * 24
    low[5] = low[11] = 0.1
    values = [*high, 0.6, 0.2, 0.125, *low]
    rule = RewardCollapse("reward", RewardCollapse.settings())
    verdicts = [(5 * i, rule.feed(5 * i, v, RunFacts())) for i, v in enumerate(values, 1)]
    found = [(step, v) for step, v in verdicts if isinstance(v, Finding)]
    assert found, "the collapse was not found"
    first_error = next(step for step, v in found if v.severity == Severity.ERROR)
    assert first_error <= 190 and min(v.first_step or step for step, v in found) <= 100
    steps, series, facts, excused = calm(values, every=5)
    screened_as_fed(RewardCollapse("reward", RewardCollapse.settings()), steps, series, facts, excused)
