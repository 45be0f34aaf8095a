"""The backlog path (`collector.detect.backlog`) against the incremental engine: the same episodes, exactly.

Random runs (spikes, NaN and inf, plateaus, rises, zero stretches, resumes that rewind steps, re-reads,
warm-up, several metrics, RL runs, custom rules, run settings) go through `RunDetector.update` and through
`judge_backlog` (in random slices); every episode's final state must match, and so must what both detectors
say about a live tail fed afterwards (the rules' state after the bulk path is the engine's). GRPO runs get a
property test of their own, their metrics shaped to cross the RL rules' thresholds both ways. And each rule of
the registry with a screen gets one alone (the other rules off): its screen against itself, on its roles'
metrics; every episode reaches only the severities its class declares.
"""

from __future__ import annotations

import math
from dataclasses import fields, replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.core.model import Points
from collector.core.roles import RL_ROLES
from collector.detect import registry, screening
from collector.detect.backlog import judge_backlog
from collector.detect.custom import CustomRule
from collector.detect.engine import RunDetector
from collector.detect.kl import KlSpike
from collector.detect.rl import EntropyCollapse
from collector.detect.rule_settings import Rules
from collector.detect.spikes import GradSpike
from collector.settings.config import DetectConfig
from tests.collector.detect.screen_check import curve

SFT = (
    "train/loss",
    "train/grad_norm",
    "train/lr",
    "train/time(s)",
    "train/lr(1e-3)",
    "train/mfu",
    "mean_token_accuracy",
    "eval_accuracy",
)
RL = ("critic/score/mean", "critic/score/std", "actor/entropy", "actor/kl_loss", "response_length/clip_ratio")
# what a verl GRPO run logs beside them: a second reward and KL, its optimiser's metrics
GRPO = (
    *RL,
    "critic/rewards/mean",
    "actor/ppo_kl",
    "actor/grad_norm",
    "actor/lr",
    "timing_s/step",
    "actor/pg_loss",
    "eval_accuracy",  # a validation score logged with every step (val_score_decline judges it in RL runs)
)
# a metric of each role the registered rules read: the per-rule property test feeds its rule these
ROLE_METRICS = {
    "grad_norm": "train/grad_norm",
    "loss": "train/loss",
    "val_loss": "val/loss",
    "lr": "train/lr",
    "step_time": "train/time(s)",
    "kl": "actor/kl_loss",
    "entropy": "actor/entropy",
    "clip_ratio": "response_length/clip_ratio",
    "reward": "critic/score/mean",
    "reward_std": "critic/score/std",
    "val_score": "val-core/gsm8k/reward/mean@1",
    "accuracy": "eval_accuracy",
    "eval_metric": "eval_rouge1",
}


def _run(
    seed: int, n: int, rl: bool = False, must: tuple[str, ...] = ()
) -> tuple[Points, dict, DetectConfig, list[int]]:
    """A whole run as the store would hand it out: rows in file order, resumes and re-reads included (`rl`: a
    GRPO run's metrics only, besides the `must` metrics)."""
    rng = np.random.default_rng(seed)
    if rl:
        metrics = [str(m) for m in rng.choice(GRPO, size=int(rng.integers(1, len(GRPO) + 1)), replace=False)]
    else:
        metrics = [str(m) for m in rng.choice(SFT, size=int(rng.integers(1, len(SFT) + 1)), replace=False)]
    if not rl and rng.random() < 0.25:
        metrics += [str(m) for m in rng.choice(RL, size=int(rng.integers(1, len(RL) + 1)), replace=False)]
    metrics += [m for m in must if m not in metrics]
    every = int(rng.choice([1, 1, 1, 2, 5]))
    steps = np.arange(1, n + 1) * every
    data = {m: curve(rng, m, n) for m in metrics}
    val_every = int(rng.choice([0, 10, 50]))
    points = Points()
    resumes = sorted(rng.integers(1, n, size=int(rng.integers(0, 3))).tolist())
    i = 0
    while i < n:
        for m in metrics:
            points.add(int(steps[i]), m, float(data[m][i]))
        if val_every and i % val_every == val_every - 1:
            points.add(
                int(steps[i]), "val/loss", float(1.0 + rng.uniform(-0.2, 0.5) * (i / n) + 0.01 * rng.random())
            )
        if rng.random() < 0.002:  # a re-read of the last step
            points.add(int(steps[i]), metrics[0], float(data[metrics[0]][i]))
        if resumes and i == resumes[0]:
            resumes.pop(0)
            back = int(rng.integers(1, min(i, 300) + 1))
            for m in metrics:  # the resumed run logs other values from the rewound step on
                data[m][i - back + 1 : i + 1] *= rng.uniform(0.9, 1.1)
            i -= back
        i += 1
    info: dict = {}
    if rng.random() < 0.5:
        info = {"trainer": {"total_training_steps": int(steps[-1]) * int(rng.choice([1, 2]))}}
        if rng.random() < 0.3:  # a live run, or a config that leaves the length to the trainer
            del info["trainer"]["total_training_steps"]
        if rng.random() < 0.5:
            info["trainer"]["warmup_steps"] = int(rng.integers(1, max(2, n // 10)))
        if rng.random() < 0.5:
            info["optim"] = {
                "lr_scheduler_type": str(rng.choice(["cosine", "linear", "constant"])),
                "lr": 1e-4,
            }
        if rng.random() < 0.3:
            info["model"] = {"vocab_size": 32000}
        if rng.random() < 0.3:
            info["trainer"]["save_freq"] = int(rng.choice([50, 100]))
    custom = ()
    if rng.random() < 0.3:
        op = str(rng.choice([">", "<", "==", "falling", "rising"]))
        custom = (
            CustomRule("c1", str(rng.choice(metrics)), op, float(rng.uniform(0, 2)), int(rng.integers(1, 5))),
        )
    checkpoints = sorted(rng.integers(1, int(steps[-1]) + 1, size=int(rng.integers(0, 4))).tolist())
    return points, info, DetectConfig(custom=custom), checkpoints


def _final(events) -> dict:
    """Each episode's last state (NaN compared as text)."""
    return {(e.rule, e.metric, e.first_step): e.to_dict() for e in events}


def _both(points: Points, info: dict, config: DetectConfig, checkpoints: list[int], cuts: list[int]):
    """(incremental engine, backlog path) detectors fed the same run in the same slices (what one call hands
    out is a batch: an incident's episodes fold only within one), and each one's final episodes."""
    slow, fast = RunDetector("r", config, info), RunDetector("r", config, info)
    for d in (slow, fast):
        d.note_checkpoints(checkpoints)
    want: dict = {}
    got: dict = {}
    bounds = [0, *sorted(set(cuts)), len(points)]
    for a, b in zip(bounds, bounds[1:], strict=False):
        if b > a:
            part = Points(points.step[a:b], points.metric[a:b], points.value[a:b], points.wall_time[a:b])
            want.update(_final(slow.update(part)))
            got.update(_final(judge_backlog(fast, part.step, part.metric, part.value)))
    return slow, fast, want, got


def _declared(episodes: dict) -> list[tuple[str, str]]:
    """The (rule, severity) of every episode whose severity no rule in it declares (an incident's episode
    carries the severities of the rules it joined: a KL spike after a KL rise)."""
    wrong = []
    for e in episodes.values():
        classes = [registry.get(r) for r in (e["evidence"].get("rules") or [e["rule"]])]
        if all(classes) and not any(e["severity"] in cls.severities for cls in classes):
            wrong.append((e["rule"], e["severity"]))
    return wrong


def _tail(points: Points, n: int = 120) -> Points:
    """Live points after the run: the same metrics a little later, a spike among them."""
    last = max(points.step)
    latest = dict(zip(points.metric, points.value, strict=True))
    tail = Points()
    for i in range(1, n + 1):
        for m, v in latest.items():
            v = v if math.isfinite(v) else 1.0
            tail.add(last + i, m, v * (25.0 if i == n // 2 else 1.0 + 0.01 * math.sin(i)))
    return tail


def _same(points, info, config, checkpoints, cuts) -> bool:
    slow, fast, want, got = _both(points, info, config, checkpoints, cuts)
    if want != got:
        return False
    tail = _tail(points)
    return _final(slow.update(tail)) == _final(fast.update(tail)) and _final(slow.open_episodes()) == _final(
        fast.open_episodes()
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(30, 2500),
    cuts=st.lists(st.integers(0, 12000), max_size=3),
)
def test_backlog_path_finds_what_the_engine_finds(seed: int, n: int, cuts: list[int]) -> None:
    points, info, config, checkpoints = _run(seed, n)
    slow, fast, want, got = _both(points, info, config, checkpoints, [c for c in cuts if c < len(points)])
    assert got == want
    assert not _declared(want)
    tail = _tail(points)
    assert _final(fast.update(tail)) == _final(slow.update(tail))
    assert _final(fast.open_episodes()) == _final(slow.open_episodes())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(30, 2500),
    cuts=st.lists(st.integers(0, 20000), max_size=3),
)
def test_backlog_path_finds_what_the_engine_finds_in_rl_runs(seed: int, n: int, cuts: list[int]) -> None:
    """GRPO runs: rewards that fall and recover, entropy collapsing or exploding, KL accelerating, saturating
    and spiking (the RL screens' hot and quiet points)."""
    points, info, config, checkpoints = _run(seed, n, rl=True)
    slow, fast, want, got = _both(points, info, config, checkpoints, [c for c in cuts if c < len(points)])
    assert got == want
    assert not _declared(want)
    tail = _tail(points)
    assert _final(fast.update(tail)) == _final(slow.update(tail))
    assert _final(fast.open_episodes()) == _final(slow.open_episodes())


SCREENED = [cls for cls in registry.RULES if cls.screen is not None]


def _only(rule_id: str) -> Rules:
    """Every rule off but `rule_id`."""
    defaults = Rules()
    return Rules(
        **{f.name: replace(getattr(defaults, f.name), enabled=f.name == rule_id) for f in fields(Rules)}
    )


@pytest.mark.parametrize("rule", SCREENED, ids=lambda cls: cls.__name__)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(30, 2500),
    cuts=st.lists(st.integers(0, 12000), max_size=3),
)
def test_each_registered_rule_alone_its_screen_finds_what_it_finds(
    rule: type, seed: int, n: int, cuts: list[int]
) -> None:
    rl = bool(set(rule.roles) & RL_ROLES) or seed % 2 == 1
    points, info, config, checkpoints = _run(seed, n, rl=rl, must=tuple(ROLE_METRICS[r] for r in rule.roles))
    config = DetectConfig(rules=_only(rule.rule_id), custom=config.custom)
    slow, fast, want, got = _both(points, info, config, checkpoints, [c for c in cuts if c < len(points)])
    assert got == want
    assert not _declared(want)
    tail = _tail(points)
    assert _final(fast.update(tail)) == _final(slow.update(tail))
    assert _final(fast.open_episodes()) == _final(slow.open_episodes())


def test_a_long_run_with_planted_trouble() -> None:
    """The bench's shape, long enough for every bulk path (windows full, trend checks, plateau checks)."""
    rng = np.random.default_rng(7)
    n = 60_000
    steps = np.arange(1, n + 1)
    loss = 0.6 + 5.0 * np.exp(-6.0 * steps / n) + 0.05 * rng.standard_normal(n)
    grad = np.clip(1.0 + 0.1 * rng.standard_normal(n), 0.5, 1.6)
    grad[[8_000, 21_000, 40_000]] = [25.0, 40.0, 45.0]
    loss[33_000] = np.nan
    points = Points()
    for i in range(n):
        points.add(int(steps[i]), "train/loss", float(loss[i]))
        points.add(int(steps[i]), "train/grad_norm", float(grad[i]))
        if i % 1000 == 999:
            points.add(int(steps[i]), "val/loss", 0.7 + 5.0 * math.exp(-6.0 * steps[i] / n))
    slow, fast, want, got = _both(points, {}, DetectConfig(), [], [len(points) // 3])
    assert {(k[0], k[2]) for k in want} >= {
        ("grad_spike", 8_001),
        ("grad_spike", 40_001),
        ("nonfinite", 33_001),
    }
    assert got == want


class _Blind(screening.Screen):
    """A broken screen: it never sees trouble (what the property tests exist to catch), and takes points as
    the rule's real screen does."""

    def __init__(self, real: screening.Screen) -> None:
        self.real = real

    def ready(self, rule, ctx) -> bool:
        return self.real.ready(rule, ctx)

    def quiet(self, rule, steps, values, ctx) -> int:
        return len(values)

    def advance(self, rule, steps, values, ctx) -> None:
        self.real.advance(rule, steps, values, ctx)


@pytest.mark.parametrize(
    ("metric", "rule", "usual", "trouble"),
    [
        ("train/grad_norm", GradSpike, 1.0, 30.0),
        ("actor/kl_loss", KlSpike, 0.01, 0.5),
        ("actor/entropy", EntropyCollapse, 1.0, 0.01),
    ],
)
def test_the_comparison_catches_a_screen_that_misses_a_finding(
    monkeypatch: pytest.MonkeyPatch, metric: str, rule: type, usual: float, trouble: float
) -> None:
    points = Points()
    for s in range(1, 400):
        points.add(s, metric, trouble if s == 300 else usual * (1.0 + 0.01 * math.sin(s)))
    assert _same(points, {}, DetectConfig(), [], [])
    monkeypatch.setattr(rule, "screen", _Blind(rule.screen))
    assert not _same(points, {}, DetectConfig(), [], [])
