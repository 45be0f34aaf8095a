"""RL rules: what a PPO/GRPO run's reward, entropy, response lengths and KL do, named as verl names them.

`kl_spike` (KL above a ceiling it climbed to, or far above its baseline), `reward_collapse` (the reward's rolling median falling far below its best, every sample of a group getting
the same reward), `entropy_collapse` (policy entropy toward 0, or exploding), `response_truncation` (nearly
every response cut at the length limit), `kl_rise` (the KL accelerating). Each class is fed one finite point
at a time; see `collector.detect.base`.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from statistics import median

from collector.core.facts import RunFacts
from collector.core.severity import Severity
from collector.detect.base import (
    HOLD,
    MAD_TO_SIGMA,
    Action,
    Finding,
    Rule,
    Verdict,
    Window,
    fmt,
    median_of_sorted,
    robust_z,
)
from collector.detect.screens import ResponseTruncationScreen, ZeroStreakScreen
from collector.detect.screens_rl import (
    EntropyCollapseScreen,
    KlRiseScreen,
    KlSpikeScreen,
    RewardCollapseScreen,
)
from collector.detect.trends import ZeroStreak


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
class RewardCollapseRule:
    enabled: bool = True
    window: int = 10  # rolling median length
    patience: int = 20  # points the rolling median has been falling below its best
    # drop counted only beyond this many noise sigmas (the best of many rolling medians already sits about two
    # of them high by chance: a noisy reward that merely wanders must not look collapsed)
    drop_sigma: float = 5.0
    noise_points: int = 100  # the noise is also measured over this many recent points
    min_rel_drop: float = 0.1  # and 10 % of the reward's observed range
    std_zero: float = 1e-6  # reward std at or below this: every sample got the same reward
    std_for: int = 10
    clear_after: int = 3


@dataclass(frozen=True)
class EntropyCollapseRule:
    enabled: bool = True
    collapse_fraction: float = 0.05  # policy entropy below this fraction of its highest so far: collapsed
    min_peak: float = (
        0.05  # ...once it has been at least this high (a run that starts near 0 is judged on rises)
    )
    explode_ratio: float = (
        3.0  # above this many times its starting level (median of the first points): exploding
    )
    start_points: int = 3
    error_after_points: int = 10  # collapsed (or exploding) for this many points: an error
    # an explosion is judged against the first few points only: one point above it is a notice, this many a
    # warning (a collapse warns at once)
    explode_warn_after: int = 3
    clear_after: int = 3


@dataclass(frozen=True)
class ResponseTruncationRule:
    enabled: bool = True
    clip_ratio: float = 0.9  # this share of responses (or more) cut at the length limit
    warn_after_points: int = 2  # one batch of long answers is a notice; two in one episode a warning
    error_after_points: int = 20
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


class RewardCollapse(Rule):
    """The reward's rolling median falling well below its best for `patience` points (RL)."""

    rule_id = "reward_collapse"
    roles = ("reward",)
    settings = RewardCollapseRule
    severities = (Severity.WARN, Severity.ERROR)
    screen = RewardCollapseScreen()
    action = Action.NAME_STEP
    meaning = "the reward had collapsed there"

    def __init__(self, metric: str, cfg: RewardCollapseRule) -> None:
        self.metric, self.cfg = metric, cfg
        self.clear_after = cfg.clear_after
        self.recent: deque[float] = deque(maxlen=max(2, cfg.window))
        self.long: deque[float] = deque(maxlen=max(2, cfg.noise_points))  # the series' noise, longer-run
        self.best: float | None = None
        self.best_step = 0
        self.low: float | None = None
        self.falling = 0
        self.first_falling = 0

    def rewind(self, step: int) -> None:
        self.recent.clear()
        self.falling = 0

    def feed(self, step: int, value: float, facts: RunFacts) -> Verdict:
        cfg = self.cfg
        self.recent.append(value)
        self.long.append(value)
        if len(self.recent) < self.recent.maxlen:
            return HOLD
        values = list(self.recent)
        rolling = median(values)
        if self.best is None or rolling > self.best:
            self.best, self.best_step = rolling, step
        self.low = rolling if self.low is None else min(self.low, rolling)
        spread = median(abs(v - rolling) for v in values) * MAD_TO_SIGMA
        # a reward of a few discrete levels (k of n samples right) has a small MAD in a short window: the
        # longer run's mean absolute deviation (x1.25 for a normal sigma) measures its real noise
        long_mid = median(self.long)
        spread = max(spread, 1.2533 * sum(abs(v - long_mid) for v in self.long) / len(self.long))
        # the rolling median of n points wobbles by about 1.25 sigma / sqrt(n)
        noise = 1.25 * spread / math.sqrt(len(values))
        needed = max(cfg.drop_sigma * noise, cfg.min_rel_drop * (self.best - self.low), 1e-12)
        if rolling >= self.best - needed:
            self.falling = 0
            return None
        if self.falling == 0:
            self.first_falling = step
        self.falling += 1
        # fallen to one value and held there for a whole window (every group all right or all wrong): no
        # learning signal is left; said at once, as an error, and first (zero gradients follow from it)
        if max(values) - min(values) <= 1e-9 * max(1.0, abs(self.best)):
            return self._constant(step, value)
        if self.falling < cfg.patience:
            return HOLD
        return Finding(
            Severity.WARN,
            value,
            f"{self.metric} is trending down: rolling median {fmt(rolling)} at step {step}, below its best "
            f"{fmt(self.best)} (step {self.best_step}) for {self.falling} points. Likely causes: policy collapse "
            f"or reward hacking turned against the reward model, lr too high, KL penalty too weak, entropy "
            f"collapse. Check sampled responses, entropy and KL; keep the checkpoint near step {self.best_step}.",
            {
                "best_rolling_median": self.best,
                "best_step": self.best_step,
                "rolling_median": rolling,
                "noise": noise,
            },
            first_step=self.first_falling,
        )

    def _constant(self, step: int, value: float) -> Finding:
        return Finding(
            Severity.ERROR,
            value,
            f"{self.metric} has collapsed to a constant {fmt(value)} (the same value for {len(self.recent)} points "
            f"to step {step}), far below its best {fmt(self.best)} (step {self.best_step}): every sampled response "
            f"gets the same reward, so the advantages and the policy's gradients are zero and nothing is learned. "
            f"Likely causes: the policy collapsed to one output, a reward function or verifier returning a "
            f"constant (a format the parser no longer matches). Check sampled responses and the reward function "
            f"on them; resume from the checkpoint near step {self.best_step}.",
            {
                "best_rolling_median": self.best,
                "best_step": self.best_step,
                "rolling_median": value,
                "kind": "constant",
            },
            first_step=self.first_falling,
        )


class RewardStdCollapse(ZeroStreak):
    """Reward spread at zero: every sample in a group got the same reward, so there is no learning signal."""

    rule_id = "reward_collapse"
    roles = ("reward_std",)
    settings = RewardCollapseRule
    severities = (Severity.WARN, Severity.ERROR)
    screen = ZeroStreakScreen("std_zero")
    action = Action.NAME_STEP
    meaning = RewardCollapse.meaning

    def is_zero(self, value: float) -> bool:
        return not value > self.cfg.std_zero

    def points_needed(self) -> int:
        return self.cfg.std_for

    def finding(self, value: float, points: int, since: int) -> Finding:
        return Finding(
            Severity.WARN,
            value,
            f"{self.metric} = {fmt(value)} for {points} points (since step {since}): every sampled "
            f"response gets the same reward, so the advantages are zero and the policy stops learning. Likely "
            f"causes: the task is too easy or too hard for the model, a reward function returning a constant, "
            f"sampling temperature too low. Check the reward function on a few responses.",
            {"threshold": self.cfg.std_zero, "points": points},
            first_step=since,
            # twice as long with no signal at all: nothing has been learned for that long
            error_after_points=self.cfg.std_for,
        )


class EntropyCollapse(Rule):
    """Policy entropy falling toward 0 (every sample the same answer) or exploding above its start (RL)."""

    rule_id = "entropy_collapse"
    roles = ("entropy",)
    settings = EntropyCollapseRule
    severities = (Severity.INFO, Severity.WARN, Severity.ERROR)
    screen = EntropyCollapseScreen()
    action = Action.NAME_STEP
    meaning = "the policy's entropy had collapsed or run away there"

    def __init__(self, metric: str, cfg: EntropyCollapseRule) -> None:
        self.metric, self.cfg = metric, cfg
        self.clear_after = cfg.clear_after
        self.start: list[float] = []
        self.peak = 0.0
        self.peak_step = 0

    def rewind(self, step: int) -> None:
        self.peak = 0.0

    def feed(self, step: int, value: float, facts: RunFacts) -> Verdict:
        cfg = self.cfg
        if len(self.start) < cfg.start_points:
            self.start.append(value)
        if value > self.peak:
            self.peak, self.peak_step = value, step
        rl = "Check sampled responses: the policy has stopped exploring."
        if self.peak >= cfg.min_peak and 0 <= value < cfg.collapse_fraction * self.peak:
            return Finding(
                Severity.WARN,
                value,
                f"{self.metric} fell to {fmt(value)} at step {step}, under {fmt(cfg.collapse_fraction * 100)} % of its "
                f"peak {fmt(self.peak)} (step {self.peak_step}): the policy's entropy collapsed, it samples almost "
                f"one answer per prompt. Likely causes: lr too high, no entropy bonus or KL penalty, a reward that "
                f"one short pattern satisfies. {rl} Lower the actor lr, raise the KL coefficient or add an entropy "
                f"bonus, and keep the checkpoint near step {self.peak_step}.",
                {"peak": self.peak, "peak_step": self.peak_step, "kind": "collapse"},
                error_after_points=cfg.error_after_points,
            )
        start = median(self.start)
        if len(self.start) >= cfg.start_points and start > 0 and value > cfg.explode_ratio * start:
            return Finding(
                Severity.INFO,
                value,
                f"{self.metric} rose to {fmt(value)} at step {step}, {fmt(value / start)}x its starting level "
                f"{fmt(start)}: the policy's entropy is exploding (near-random tokens). Likely causes: lr too high, "
                f"an entropy bonus too large, a diverging update. Check sampled responses for gibberish; lower the "
                f"actor lr or the entropy coefficient.",
                {"start_level": start, "kind": "explosion"},
                error_after_points=cfg.error_after_points,
                warn_after_points=cfg.explode_warn_after,
            )
        return None


class ResponseTruncation(Rule):
    """Nearly every response cut at the length limit (verl `response_length/clip_ratio`, TRL
    `completions/clipped_ratio` near 1): rewards judge truncated answers (RL)."""

    rule_id = "response_truncation"
    roles = ("clip_ratio",)
    settings = ResponseTruncationRule
    severities = (Severity.INFO, Severity.WARN, Severity.ERROR)
    screen = ResponseTruncationScreen()
    meaning = "responses there are cut at the length limit, so the reward judged cut-off answers"
    recurs = True

    def __init__(self, metric: str, cfg: ResponseTruncationRule) -> None:
        self.metric, self.cfg = metric, cfg
        self.clear_after = cfg.clear_after

    def rewind(self, step: int) -> None:
        pass

    def feed(self, step: int, value: float, facts: RunFacts) -> Verdict:
        if value < self.cfg.clip_ratio:
            return None
        return Finding(
            Severity.INFO,
            value,
            f"{self.metric} = {fmt(value)} at step {step}: {fmt(value * 100)} % of responses hit the length limit, "
            f"so the reward judges cut-off answers. Likely causes: max response length too short for the task, "
            f"the policy learned to ramble (or repeats itself), no end-of-sequence reward. Check a few responses; "
            f"raise the response length limit (verl `data.max_response_length`, TRL `max_completion_length`) or "
            f"add a length penalty.",
            {"threshold": self.cfg.clip_ratio},
            warn_after_points=self.cfg.warn_after_points,
            error_after_points=self.cfg.error_after_points,
            peak=True,
        )


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
