"""`grad_spike` and `step_time_spike` (collector/detect/spikes.py): each backlog screen against its rule fed
point by point (`screen_check.screened_as_fed`), and a healthy series taken mostly in bulk."""

from __future__ import annotations

import numpy as np
import pytest

from collector.detect.spikes import GradSpike, StepTimeSpike
from tests.collector.detect.screen_check import calm, drawn, screen_property, screened_as_fed

GRAD, STEP_TIME = "train/grad_norm", "train/time(s)"


@screen_property
def test_grad_spike_screen_takes_only_what_feeding_gives(seed: int, n: int, horizon: int) -> None:
    steps, values, facts, excused = drawn(seed, GRAD, n)
    screened_as_fed(GradSpike(GRAD, GradSpike.settings()), steps, values, facts, excused, horizon)


@screen_property
def test_step_time_spike_screen_takes_only_what_feeding_gives(seed: int, n: int, horizon: int) -> None:
    steps, values, facts, excused = drawn(seed, STEP_TIME, n)
    screened_as_fed(
        StepTimeSpike(STEP_TIME, StepTimeSpike.settings()), steps, values, facts, excused, horizon
    )


@pytest.mark.parametrize(
    ("rule", "metric", "usual"),
    [(GradSpike, GRAD, 1.0), (StepTimeSpike, STEP_TIME, 0.1)],
    ids=["grad", "time"],
)
def test_a_healthy_series_is_taken_in_bulk(rule: type, metric: str, usual: float) -> None:
    noise = np.random.default_rng(3).standard_normal(2000)
    steps, values, facts, excused = calm(usual * (1 + 0.05 * np.abs(noise)), every=1)
    assert screened_as_fed(rule(metric, rule.settings()), steps, values, facts, excused) > 1800


def test_the_check_catches_a_screen_blind_to_a_spike(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the property tests exist for: a screen that calls a spike quiet fails them."""
    values = 1.0 + 0.01 * np.sin(np.arange(400))
    values[300] = 30.0
    steps, values, facts, excused = calm(values)
    real = GradSpike.screen
    monkeypatch.setattr(type(real), "quiet", lambda self, rule, steps, values, ctx: len(values))
    with pytest.raises(AssertionError, match="called step 301 .* quiet"):
        screened_as_fed(GradSpike(GRAD, GradSpike.settings()), steps, values, facts, excused)
