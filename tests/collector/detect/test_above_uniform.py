"""`loss_above_uniform`: a training loss far above ln(vocab size) for several points in a row is a divergence,
even when it got there before the first logged point (an lr of 1.0 from step 1: no jump for `loss_spike`). The
shape of the diverging run below is a real one: the tiny local Qwen2 (vocabulary 512, ln 512 = 6.24) trained
by the HF Trainer on an H100 at lr 1.0 without clipping logged 34.5 at step 5, peaked at 77 and fell under
2 x ln(512) only at step 165, ending at 4.77 (the same model at lr 3e-4 ended at 1.68)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.core.model import Points
from collector.detect import registry
from collector.detect.above_uniform import LossAboveUniform
from collector.detect.backlog import judge_backlog
from collector.detect.engine import RunDetector, detect_series
from tests.collector.detect.screen_check import drawn, screen_property, screened_as_fed

VOCAB = {"vocab_size": 512}  # as run.json says it
DIVERGED = [34.5, 58.0, 48.4, 46.7, 66.8, 77.4, 70.6, 71.8, 65.4, 59.6, 60.6, 63.4, 75.1, 57.2, 55.3, 41.9, 40.8,
            39.6, 45.3, 43.4, 35.1, 41.0, 26.9, 26.3, 23.9, 19.1, 14.8, 16.1, 21.5, 20.3, 18.1, 13.1, 9.4, 8.6, 6.7,
            6.4, 6.6, 6.2, 5.6, 5.4, 5.2] + [4.8] * 39  # fmt: skip


def _found(events) -> list[tuple[str, str, int]]:
    return [(e.rule, str(e.severity), e.first_step) for e in events if e.rule == "loss_above_uniform"]


def _loss(values, every: int = 5) -> dict:
    return {"train/loss": ([every * (i + 1) for i in range(len(values))], list(values))}


def test_a_loss_that_starts_far_above_a_uniform_guess_is_a_divergence_from_its_first_point() -> None:
    events = detect_series(_loss(DIVERGED), run_info={**VOCAB, "learning_rate": 1.0})
    assert _found(events) == [("loss_above_uniform", "error", 5)]
    event = next(e for e in events if e.rule == "loss_above_uniform")
    assert not event.active and event.last_step == 160  # closed once it fell below 2 x ln(512) and stayed
    assert "worse than a uniform guess" in event.message and "this run's is 1" in event.message
    assert registry.get("loss_above_uniform").unsafe_checkpoint  # a checkpoint saved at step 100 is not kept


def test_what_is_not_above_a_uniform_guess() -> None:
    uniform = math.log(512)
    fresh = [uniform * (1 - i / 200) for i in range(100)]  # a fresh initialisation learning from ln(V)
    bits = [v / math.log(2) for v in fresh]  # the same, logged in bits (1.44 x ln V at the start)
    one_bad_batch = [2.0] * 30 + [40.0] + [2.0] * 30  # one point: loss_spike's
    for values in (fresh, bits, one_bad_batch):
        assert _found(detect_series(_loss(values), run_info=VOCAB)) == []
    assert (
        _found(detect_series(_loss(DIVERGED), run_info={})) == []
    )  # vocabulary unknown: nothing to hold it to
    rl = {**VOCAB, "algorithm": {"adv_estimator": "grpo"}}
    assert _found(detect_series(_loss(DIVERGED), run_info=rl)) == []  # an RL run's loss is no cross-entropy


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    runs=st.lists(st.tuples(st.booleans(), st.integers(1, 8)), min_size=1, max_size=25),
    cut=st.integers(0, 200),
)
def test_its_screen_finds_what_feeding_every_point_finds(runs: list[tuple[bool, int]], cut: int) -> None:
    """Stretches above and below the threshold in any order, judged in two batches: the backlog path (the
    screen takes the quiet points in bulk) ends with the episodes the engine ends with, point by point."""
    values = np.concatenate([np.full(n, 40.0 if high else 2.0) + 0.01 * np.arange(n) for high, n in runs])
    points = Points()
    for i, v in enumerate(values):
        points.add(i + 1, "train/loss", float(v))
    slow, fast = RunDetector("r", run_info=VOCAB), RunDetector("r", run_info=VOCAB)
    cut = min(cut, len(points))
    want, got = {}, {}
    for a, b in ((0, cut), (cut, len(points))):
        if b > a:
            part = Points(points.step[a:b], points.metric[a:b], points.value[a:b], points.wall_time[a:b])
            want.update({(e.rule, e.first_step): e.to_dict() for e in slow.update(part)})
            got.update({(e.rule, e.first_step): e.to_dict() for e in judge_backlog(fast, part.step, part.metric,
                                                                                   part.value)})  # fmt: skip
    assert got == want


def _above(rng: np.random.Generator, values: np.ndarray) -> np.ndarray:
    """`trouble`: stretches far above 2 x ln(32000) = 20.8 (`drawn` gives a vocabulary of 32,000 at times)."""
    for _ in range(int(rng.integers(0, 4))):
        at, span = int(rng.integers(0, len(values))), int(rng.integers(1, 8))
        values[at : at + span] = rng.uniform(15.0, 60.0, len(values[at : at + span]))
    return values


@screen_property
def test_loss_above_uniform_screen_takes_only_what_feeding_gives(seed: int, n: int, horizon: int) -> None:
    steps, values, facts, excused = drawn(seed, "train/loss", n, _above)
    rule = LossAboveUniform("train/loss", LossAboveUniform.settings())
    screened_as_fed(rule, steps, values, facts, excused, horizon)
