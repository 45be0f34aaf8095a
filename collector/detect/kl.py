"""The KL's rules in an RL run: `kl_spike` (the KL above a ceiling it climbed to, or far above its baseline)
and `kl_rise` (the KL accelerating block after block); one incident, each following the other. Each class is
fed one finite point at a time (see `collector.detect.base`), its backlog screen before it, comparing with the
rule's own arithmetic (medians as `statistics.median` takes them), so a bound is exact."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from statistics import median

import numpy as np

from collector.core.facts import RunFacts
from collector.core.severity import Severity
from collector.detect.base import (
    HOLD,
    Action,
    Finding,
    Rule,
    Verdict,
    Window,
    fmt,
    median_of_sorted,
    robust_z,
)
from collector.detect.screening import Screen, block_medians, extend_window, first, floats, scheduled_medians


@dataclass(frozen=True)
class KlSpikeRule:
    enabled: bool = True
    max_value: float = 1.0
    window: int = 50
    min_history: int = 5
    z: float = 8.0
    ratio: float = 5.0
    error_after_points: int = 5  # points above `max_value` in one episode that make it an error
    tail_ratio: float = 1.5  # a relative spike is also above this many times the window's `tail_quantile`
    tail_quantile: float = 0.95
    # a relative spike counts from this KL on: GRPO's KL starts at 0 and wanders at 0.001-0.05, where 20x
    # its early median is still nothing to act on (the `max_value` ceiling is judged whatever the level)
    min_level: float = 0.1
    clear_after: int = 3


@dataclass(frozen=True)
class KlRiseRule:
    enabled: bool = True
    block: int = 5  # points per block; the KL accelerates when three block medians climb by growing steps
    growth: float = 1.5  # and the newest block's median is this many times the oldest's...
    # ...and at least this high, as kl_spike's relative spikes count (GRPO/PPO KL wanders at 0.001-0.1: a
    # healthy 0.028 -> 0.03 -> 0.07 is nothing to act on)
    min_level: float = 0.1
    # the climb lasts: the next block keeps this share of the last climb, and the KL's level
    confirm_share: float = 0.75
    clear_after: int = 2


class KlRiseScreen(Screen):
    """Points between the block checks hold; a check whose three block medians do not accelerate to a level
    that matters gives None and leaves nothing to confirm. While a climb waits for its confirming check (the
    rule's `pending`), every point is fed; while an episode is open only the points before the next check are
    taken."""

    holds_between = True

    def ready(self, rule, ctx) -> bool:
        return rule.pending is None

    def _checks(self, rule, values: np.ndarray) -> np.ndarray:
        """Index of each point among `values` that the rule judges (a full window, a block's end)."""
        i = np.arange(len(values))
        full = len(rule.recent) + i + 1 >= rule.recent.maxlen
        return i[full & ((rule.seen + i + 1) % max(1, rule.cfg.block) == 0)]

    def between(self, rule, steps, values, ctx) -> int:
        at = self._checks(rule, values)
        return int(at[0]) if len(at) else len(values)

    def quiet(self, rule, steps, values, ctx) -> int:
        at = self._checks(rule, values)
        if not len(at):
            return len(values)
        cfg, k = rule.cfg, max(1, rule.cfg.block)
        arr = np.concatenate([floats(rule.recent), values])
        ends = len(rule.recent) + at + 1
        a, b, c = (block_medians(arr, ends - j * k, k) for j in (2, 1, 0))
        accelerating = (a < b) & (b < c) & ((c - b) > (b - a))
        hot = accelerating & (c >= cfg.min_level) & (c >= cfg.growth * np.maximum(a, 1e-12))
        j = first(hot)
        return int(at[j]) if j < len(at) else len(values)

    def advance(self, rule, steps, values, ctx) -> None:
        rule.recent.extend(values[-rule.recent.maxlen :].tolist())
        rule.seen += len(values)


class KlRise(Rule):
    """The KL to the reference policy accelerating: three block medians climbing by growing steps to a level
    that matters (`min_level`), confirmed by the next block keeping most of the last climb and that level (RL).
    A KL that rises and levels off (saturating) is normal, and one noisy block is not a trend."""

    rule_id = "kl_rise"
    roles = ("kl",)
    settings = KlRiseRule
    severities = (Severity.WARN,)
    screen = KlRiseScreen()
    meaning = "the policy was drifting fast away from its reference there"
    caused_by = ("kl_spike",)
    follows = ("kl_spike",)
    follows_same_metric = True

    def __init__(self, metric: str, cfg: KlRiseRule) -> None:
        self.metric, self.cfg = metric, cfg
        self.clear_after = cfg.clear_after
        self.recent: deque[float] = deque(maxlen=3 * max(1, cfg.block))
        self.seen = 0
        # the last check's three block medians and its step, when they accelerated: the next check confirms
        self.pending: tuple[float, float, float, int] | None = None

    def rewind(self, step: int) -> None:
        self.recent.clear()
        self.pending = None

    def feed(self, step: int, value: float, facts: RunFacts) -> Verdict:
        cfg = self.cfg
        self.recent.append(value)
        self.seen += 1
        if len(self.recent) < self.recent.maxlen:
            return HOLD
        if self.seen % max(1, cfg.block) != 0:
            return HOLD  # judged once per block
        k = max(1, cfg.block)
        values = list(self.recent)
        a, b, c = (median(values[i * k : (i + 1) * k]) for i in range(3))
        accelerating = a < b < c and (c - b) > (b - a)
        before, self.pending = self.pending, None
        if accelerating and c >= cfg.min_level and c >= cfg.growth * max(a, 1e-12):
            self.pending = (a, b, c, step)
        if before is None or not (
            c >= before[1] + cfg.confirm_share * (before[2] - before[1]) and c >= cfg.min_level
        ):
            return None
        a0, b0, c0, at = before
        return Finding(
            Severity.WARN,
            value,
            f"{self.metric} is accelerating: block medians {fmt(a0)} -> {fmt(b0)} -> {fmt(c0)} to step {at}, "
            f"and {fmt(c)} in the block to step {step}: the policy moves away from the reference faster and "
            f"faster. Likely causes: actor lr too high, KL coefficient too small, too many PPO epochs per batch, "
            f"reward hacking. Check sampled responses; lower the actor lr or raise the KL coefficient (verl "
            f"`actor_rollout_ref.actor.kl_loss_coef`).",
            {"block_medians": [a0, b0, c0, c]},
        )


class KlSpikeScreen(Screen):
    """Quiet: not above the ceiling the KL climbed to (above `max_value` and `ratio` x its starting level),
    nor above `ratio` x the exact median the window's recomputation schedule gives at that point (the tail
    quantile and z only narrow that down: a point past this bound is fed to the rule)."""

    def ready(self, rule, ctx) -> bool:
        w, cfg = rule.window, rule.cfg
        return (
            len(w.vals) == w.vals.maxlen
            and len(w.vals) >= cfg.min_history
            and len(rule.start) >= max(1, cfg.min_history)
        )

    def quiet(self, rule, steps, values, ctx) -> int:
        cfg = rule.cfg
        start = median_of_sorted(sorted(rule.start))
        mids = scheduled_medians(rule.window, values)
        hot = (values > cfg.max_value) & (values > cfg.ratio * start)
        hot |= (mids > 0) & (values > cfg.ratio * mids) & (values >= cfg.min_level)
        return first(hot)

    def advance(self, rule, steps, values, ctx) -> None:
        extend_window(rule.window, steps, values, median=True, noise=False)


class KlSpike(Rule):
    """KL to the reference policy above an absolute ceiling or far above its baseline (RL)."""

    rule_id = "kl_spike"
    roles = ("kl",)
    settings = KlSpikeRule
    severities = (Severity.WARN, Severity.ERROR)
    screen = KlSpikeScreen()
    action = Action.REPLAY_FROM_BEFORE
    meaning = "the policy had jumped away from its reference there"
    recurs = True
    caused_by = ("kl_rise",)  # incidents: spikes during a KL climb are the climb's incident
    follows = ("kl_rise",)  # one alert: the KL accelerating, then above its ceiling
    follows_same_metric = True

    def __init__(self, metric: str, cfg: KlSpikeRule) -> None:
        self.metric, self.cfg = metric, cfg
        self.clear_after = cfg.clear_after
        self.window = Window(cfg.window)
        self.start: list[float] = []  # the first `min_history` values: where the KL began

    def rewind(self, step: int) -> None:
        self.window.rewind(step)

    def feed(self, step: int, value: float, facts: RunFacts) -> Verdict:
        cfg = self.cfg
        enough = len(self.window.vals) >= cfg.min_history
        mid = self.window.median() if enough else 0.0
        tail = self.window.quantile(cfg.tail_quantile) if enough else 0.0
        self.window.add(step, value)
        if len(self.start) < max(1, cfg.min_history):
            self.start.append(value)
        advice = (
            "Likely causes: lr too high, too many PPO epochs per batch, KL coefficient too small, reward hacking. "
            "Check responses at this step, lower the actor lr or raise the KL penalty."
        )
        # above the ceiling is trouble when the KL climbed there; a run that starts there (a later stage of a
        # multi-stage run, measured against an earlier reference) is judged against its own level
        start = median_of_sorted(sorted(self.start))
        if value > cfg.max_value and value > cfg.ratio * start:
            return Finding(
                Severity.WARN,
                value,
                f"{self.metric} peaked at {fmt(value)} at step {step}, above {fmt(cfg.max_value)}: the policy "
                f"drifted far from the reference. {advice}",
                {"threshold": cfg.max_value},
                error_after_points=cfg.error_after_points,
                peak=True,
            )
        if not enough or not (
            mid > 0 and value > cfg.ratio * mid and value > cfg.tail_ratio * tail and value >= cfg.min_level
        ):
            return None if enough else HOLD
        mad = self.window.mad()
        z = robust_z(value, mid, mad, floor=0.05 * abs(mid))
        if z >= cfg.z:
            return Finding(
                Severity.WARN,
                value,
                f"{self.metric} peaked at {fmt(value)} at step {step}, {fmt(value / mid)}x its median {fmt(mid)}. "
                f"{advice}",
                {"baseline_median": mid, "mad": mad, "z": z},
                peak=True,
            )
        return None
