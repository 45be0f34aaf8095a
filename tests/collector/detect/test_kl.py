"""`kl_spike` and `kl_rise` (collector/detect/kl.py): each backlog screen (`kl_rise`'s `between` its block
checks too) against its rule fed point by point (`screen_check.screened_as_fed`), and a calm KL taken mostly in
bulk."""

from __future__ import annotations

import numpy as np
import pytest

from collector.detect.kl import KlRise, KlSpike
from tests.collector.detect.screen_check import calm, drawn, screen_property, screened_as_fed

KL = "actor/kl_loss"


@screen_property
def test_kl_spike_screen_takes_only_what_feeding_gives(seed: int, n: int, horizon: int) -> None:
    steps, values, facts, excused = drawn(seed, KL, n)
    screened_as_fed(KlSpike(KL, KlSpike.settings()), steps, values, facts, excused, horizon)


@screen_property
def test_kl_rise_screen_takes_only_what_feeding_gives(seed: int, n: int, horizon: int) -> None:
    steps, values, facts, excused = drawn(seed, KL, n)
    screened_as_fed(KlRise(KL, KlRise.settings()), steps, values, facts, excused, horizon)


@pytest.mark.parametrize("rule", [KlSpike, KlRise], ids=["spike", "rise"])
def test_a_calm_kl_is_taken_in_bulk(rule: type) -> None:
    noise = np.random.default_rng(6).standard_normal(2000)
    steps, values, facts, excused = calm(0.001 + 0.0005 * np.abs(noise))
    assert screened_as_fed(rule(KL, rule.settings()), steps, values, facts, excused) > 1800
