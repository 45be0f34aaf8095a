"""`grad_spike` and `step_time_spike` (collector/detect/spikes.py): each backlog screen against its rule fed
point by point (`screen_check.screened_as_fed`), and a healthy series taken mostly in bulk."""

from __future__ import annotations

import numpy as np
import pytest

from collector.core.facts import RunFacts
from collector.core.severity import Severity
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


def test_exact_zero_gradients_of_a_grpo_run_are_not_its_baseline() -> None:
    """A TRL GRPO run logs grad_norm 0.0 at every step whose groups each got one reward (zero advantages, no
    update): those zeros are not sizes of the gradient. Before, they made the baseline median 0 and every
    ordinary gradient after them "Infx its median", a grad_spike error on a healthy run. The shape is the one in
    Sunshine535/nips-grpo-dynamics `results/logs/exp1a/rho0.10_seed42.log` and `rho5.00_seed42.log` (commit
    2cd2efce1c0622bfd77899c555357107706a0c54): 40 logs, over half of them exactly 0, the rest 0.1-2.8."""
    rng = np.random.default_rng(7)
    values = np.where(rng.random(400) < 0.6, 0.0, rng.uniform(0.1, 1.4, 400))
    values[390:] = rng.uniform(1.2, 2.8, 10)  # the largest of them come last, as in the real run
    rule = GradSpike(GRAD, GradSpike.settings())
    findings = [v for s, x in enumerate(values, 1) if (v := rule.feed(s * 5, float(x), RunFacts()))]
    found = [f for f in findings if getattr(f, "severity", None) is not None]
    assert not [f for f in found if f.severity >= Severity.WARN], [f.message for f in found]
    assert all(f.evidence["baseline_median"] > 0 for f in found)
    steps, values, facts, excused = calm(values, every=5)
    screened_as_fed(GradSpike(GRAD, GradSpike.settings()), steps, values, facts, excused)


def test_a_spike_after_zero_gradients_is_still_found() -> None:
    """Zeros left out of the baseline hide nothing: a 50x gradient among them is still a spike."""
    values = np.where(np.arange(300) % 3 == 0, 0.0, 1.0 + 0.05 * np.sin(np.arange(300)))
    values[250] = 50.0
    rule = GradSpike(GRAD, GradSpike.settings())
    verdicts = {s: rule.feed(s, float(x), RunFacts()) for s, x in enumerate(values, 1)}
    assert getattr(verdicts[251], "severity", None) is not None
