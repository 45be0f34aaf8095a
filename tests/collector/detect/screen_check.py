"""A rule's backlog screen against the rule itself, point by point: what each rule's own screen test runs.

`screened_as_fed` walks a series through one rule as the backlog path (`collector.detect.backlog`) walks it:
wherever the screen says the rule is ready, the screen names the next points it calls quiet (or, for a screen
that holds between checks, the points that surely HOLD); a twin of the rule is fed those points one by one and
must give only those verdicts, and the rule that takes them in bulk (`advance`) must be left in the twin's
state, exactly; the next point is fed to both, with the same verdict. `curve` draws the series the screen tests
and the backlog tests (`test_backlog.py`) share: a plausible curve for a metric with trouble planted.
"""

from __future__ import annotations

import copy
import math
from collections import deque
from collections.abc import Callable
from enum import Enum

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.core.facts import RunFacts
from collector.detect.base import HOLD, Window
from collector.detect.screening import ScreenContext

# RL metrics drawn as a GRPO run logs them (`rl_curve`), mostly
RL_SHAPED = (
    "critic/score/mean",
    "critic/rewards/mean",
    "actor/entropy",
    "actor/kl_loss",
    "actor/ppo_kl",
    "timing_s/step",
)


def rl_curve(rng: np.random.Generator, metric: str, n: int) -> np.ndarray:
    """An RL metric as a GRPO run logs it, with the RL rules' trouble planted: a reward that falls (and may
    recover), an entropy that collapses or explodes, a KL that accelerates, saturates or spikes."""
    i = np.arange(n)
    t = i / max(1, n)
    noise = rng.standard_normal(n)
    at = int(rng.integers(0, n))
    span = int(rng.integers(1, max(2, n // 2)))
    after = (i >= at) & (i < at + span)
    if "score" in metric or "rewards" in metric:
        v = 0.2 + 0.6 * (1 - np.exp(-rng.uniform(1, 10) * t)) + rng.choice([0.0, 0.005, 0.03]) * noise
        if rng.random() < 0.3:  # k of 8 samples right: a few discrete levels
            v = np.round(np.clip(v, 0, 1) * 8) / 8
        v[after] -= rng.uniform(0.05, 0.6) * np.minimum(1.0, (i[after] - at + 1) / rng.integers(1, 60))
    elif "entropy" in metric:
        v = 0.3 + 1.2 * np.exp(-rng.uniform(0.5, 5) * t) + 0.02 * noise
        kind = rng.integers(0, 3)
        if kind == 0:  # collapse, sudden or gradual
            v[after] *= rng.uniform(0.001, 0.2) ** np.minimum(1.0, (i[after] - at + 1) / rng.integers(1, 40))
        elif kind == 1:  # explosion
            v[after] *= rng.uniform(2.0, 6.0)
    elif "timing" in metric:  # a minute a step (generation dominates), some steps slower
        v = 60.0 * (1 + 0.03 * np.abs(noise))
        v[after] *= rng.choice([1.2, 1.6, 2.5, 4.0])
    else:  # the KL
        v = 0.001 + rng.uniform(0, 0.02) * t + 0.0005 * np.abs(noise)
        kind = rng.integers(0, 4)
        if kind == 0:  # accelerating, then (sometimes) past the ceiling
            v[i >= at] += 0.002 * np.exp(np.minimum((i[i >= at] - at) / rng.uniform(3, 40), 8.0))
        elif kind == 1:  # rises, then levels off
            v[i >= at] += rng.uniform(0.02, 0.5) * (1 - np.exp(-(i[i >= at] - at) / rng.uniform(5, 100)))
        elif kind == 2:  # spikes
            hits = rng.integers(0, n, size=int(rng.integers(1, 6)))
            v[hits] *= rng.choice([3.0, 8.0, 30.0, 2000.0], size=len(hits))
    return v


def curve(rng: np.random.Generator, metric: str, n: int) -> np.ndarray:
    """A plausible curve for the metric, then trouble planted at random places (spikes, NaN and inf, exactly
    flat stretches, rises, zeros, new levels, periodic jumps)."""
    t = np.arange(n) / max(1, n)
    noise = rng.standard_normal(n)
    if metric in RL_SHAPED and rng.random() < 0.8:
        v = rl_curve(rng, metric, n)
    elif "loss" in metric and "kl" not in metric:
        v = 0.6 + 3.0 * np.exp(-rng.uniform(1, 8) * t) + rng.choice([0.0, 0.01, 0.05]) * noise
    elif "grad" in metric:
        v = np.abs(1.0 + 0.2 * noise)
    elif "lr" in metric:
        warm = max(1, int(n * rng.uniform(0, 0.1)))
        after = (
            1e-4 * 0.5 * (1 + np.cos(math.pi * t)) if rng.random() < 0.7 else np.full(n, 1e-4)
        )  # or constant
        v = np.where(np.arange(n) < warm, 1e-4 * (np.arange(n) + 1) / warm, after)
    elif "time" in metric:
        v = 0.1 + 0.005 * np.abs(noise)
    elif "clip_ratio" in metric:
        v = np.clip(0.2 + 0.1 * noise, 0, 1)
    else:
        v = 1.0 + 0.1 * noise + rng.uniform(-1, 1) * t
    for _ in range(rng.integers(0, 6)):  # trouble
        at = int(rng.integers(0, n))
        span = int(rng.integers(1, max(2, n // 5)))
        kind = rng.integers(0, 7)
        if kind == 0:
            v[at] *= rng.choice([3.0, 10.0, 100.0, 1e4])  # a spike
        elif kind == 1:
            v[at] = rng.choice([np.nan, np.inf, -np.inf])
        elif kind == 2:
            v[at : at + span] = v[at]  # a plateau, exactly flat
        elif kind == 3:
            v[at : at + span] += np.linspace(0, rng.uniform(0.1, 5.0), len(v[at : at + span]))  # a rise
        elif kind == 4:
            v[at : at + span] = 0.0
        elif kind == 5:
            v[at : at + span] *= rng.uniform(0.3, 3.0)  # a new level
        else:
            v[at : at + span : max(1, int(rng.integers(2, 20)))] *= 8  # periodic slow steps or jumps
    return v


def drawn(
    seed: int,
    metric: str,
    n: int,
    trouble: Callable[[np.random.Generator, np.ndarray], np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, RunFacts, np.ndarray]:
    """(steps, values, facts, excused steps) of one random run of `metric`: its finite points (non-finite
    values never reach a rule), logged every 1-5 steps, and the run's facts as a rule may read them (warm-up,
    schedule, length, vocabulary, save and evaluation steps, RL or not, fresh initialisation, lr now).
    `trouble(rng, values)` plants a rule's own trouble in the curve, which `curve` seldom draws."""
    rng = np.random.default_rng(seed)
    values = curve(rng, metric, n)
    if trouble is not None:
        values = trouble(rng, values)
    every = int(rng.choice([1, 1, 2, 5]))
    steps = (np.arange(1, n + 1) * every)[np.isfinite(values)]
    values = values[np.isfinite(values)]
    info: dict = {"trainer": {}}
    if rng.random() < 0.5:
        info["trainer"]["total_training_steps"] = int(n * every * rng.choice([1, 2]))
    if rng.random() < 0.4:
        info["trainer"]["warmup_steps"] = int(rng.integers(1, max(2, n // 10)))
    if rng.random() < 0.5:
        scheduler = str(rng.choice(["cosine", "linear", "constant", "polynomial"]))
        info["optim"] = {"lr_scheduler_type": scheduler, "lr": 1e-4}
    if rng.random() < 0.3:
        info["model"] = {"vocab_size": 32000}
    if rng.random() < 0.3:
        info["trainer"]["save_freq"] = int(rng.choice([50, 100]))
    facts = RunFacts()
    facts.set_run_info(info)
    facts.is_rl = bool(rng.random() < 0.3)
    facts.fresh_init = rng.choice([None, True, False]) if "model" in info else None
    if rng.random() < 0.5:  # the lr as the engine last noted it: near its peak, or decayed
        facts.note_lr(1e-4)
        facts.note_lr(float(rng.choice([1e-4, 5e-6])))
    saved = rng.integers(1, int(steps[-1]) + 2, size=int(rng.integers(0, 4))) if len(steps) else []
    facts.note_checkpoints(sorted(int(s) for s in saved))
    return steps, values, facts, np.unique(np.asarray(sorted(facts.checkpoint_steps), dtype=np.int64))


def calm(
    values, info: dict | None = None, every: int = 1
) -> tuple[np.ndarray, np.ndarray, RunFacts, np.ndarray]:
    """(steps, values, facts, excused steps) of a healthy series: what a screen should mostly take in bulk."""
    values = np.asarray(values, dtype=np.float64)
    facts = RunFacts()
    facts.set_run_info(info or {})
    return np.arange(1, len(values) + 1) * every, values, facts, np.empty(0, dtype=np.int64)


def state(obj: object) -> object:
    """What a rule holds, as plain comparable data: a window's lazily worked-out MAD and noise are worked out
    (a window that has not needed them yet holds the same statistics), NaN compares equal to NaN."""
    if isinstance(obj, float | np.floating):
        return "nan" if math.isnan(obj) else float(obj)
    if obj is None or isinstance(obj, bool | int | str | np.integer):
        return obj
    if isinstance(obj, Enum):
        return repr(obj)
    if isinstance(obj, Window):
        worked = copy.deepcopy(obj)
        worked.mad()
        worked.diff_noise()
        return {name: state(getattr(worked, name)) for name in Window.__slots__}
    if isinstance(obj, deque):
        return ("deque", obj.maxlen, [state(x) for x in obj])
    if isinstance(obj, list | tuple):
        return [state(x) for x in obj]
    if isinstance(obj, dict):
        return [(state(k), state(v)) for k, v in obj.items()]  # in order: a rule may prune the oldest
    if isinstance(obj, set | frozenset):
        return sorted(state(x) for x in obj)
    if hasattr(obj, "__dataclass_params__") and obj.__dataclass_params__.frozen:
        return obj  # a rule's settings
    names = list(getattr(obj, "__dict__", {})) or [
        n for c in type(obj).__mro__ for n in getattr(c, "__slots__", ())
    ]
    return (type(obj).__name__, {name: state(getattr(obj, name)) for name in names})


def screened_as_fed(
    rule, steps: np.ndarray, values: np.ndarray, facts: RunFacts, excused: np.ndarray, horizon: int = 256
) -> int:
    """Walk the points through `rule` as the backlog path does (see the module docstring), asserting at every
    stop; returns how many points the screen took in bulk. At every other stop a screen that holds between its
    checks answers `between` instead of `quiet` (the backlog asks it while the rule's episode is open)."""
    screen = type(rule).screen
    twin = copy.deepcopy(rule)  # fed every point
    ctx = ScreenContext(facts, np.asarray(excused, dtype=np.int64))
    steps, values = np.asarray(steps, dtype=np.int64), np.asarray(values, dtype=np.float64)
    taken, i, stops, n = 0, 0, 0, len(values)
    while i < n:
        if screen.ready(rule, ctx):
            s, v = steps[i : i + horizon], values[i : i + horizon]
            before = state(rule)
            holding = screen.holds_between and stops % 2 == 1
            k = screen.between(rule, s, v, ctx) if holding else screen.quiet(rule, s, v, ctx)
            stops += 1
            assert state(rule) == before, f"{type(screen).__name__} changed the rule while screening"
            assert 0 <= k <= len(v)
            for j in range(k):
                verdict = twin.feed(int(s[j]), float(v[j]), facts)
                allowed = verdict is HOLD or (verdict is None and not holding)
                assert allowed, (
                    f"{type(screen).__name__} called step {int(s[j])} (value {float(v[j])!r}) "
                    f"{'a hold' if holding else 'quiet'}, feeding it gave {verdict!r}"
                )
            if k:  # (the backlog path never advances over no points)
                screen.advance(rule, s[:k], v[:k], ctx)
                assert state(rule) == state(twin), (
                    f"{type(screen).__name__}.advance over steps {int(s[0])}-{int(s[k - 1])} left the rule "
                    f"otherwise than feeding them one by one"
                )
            taken, i = taken + k, i + k
            if k == len(v):
                continue  # a horizon's worth (or the rest) taken: screen further
        step, value = int(steps[i]), float(values[i])
        assert state(rule.feed(step, value, facts)) == state(twin.feed(step, value, facts))
        i += 1
    assert state(rule) == state(twin)
    return taken


def screen_property(test: Callable) -> Callable:
    """A screen's property test: `test(seed, n, horizon)` over random runs of 30-1,500 points, the screen asked
    about 1-300 points at a time (the backlog path asks about 256, then up to 65,536)."""
    runs = given(seed=st.integers(0, 2**32 - 1), n=st.integers(30, 1500), horizon=st.integers(1, 300))
    return settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])(runs(test))


def zeros(rng: np.random.Generator, values: np.ndarray) -> np.ndarray:
    """`trouble`: stretches at exactly zero or a hair above it (a gradient norm with nothing to learn, a reward
    spread with every sample scored alike)."""
    for _ in range(int(rng.integers(1, 4))):
        at, span = int(rng.integers(0, len(values))), int(rng.integers(1, 40))
        values[at : at + span] = rng.choice([0.0, 1e-9, 1e-3])
    return values
