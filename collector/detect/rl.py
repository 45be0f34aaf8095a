"""RL rules: what a PPO/GRPO run's reward, entropy, response lengths and KL do, named as verl names them.

`reward_collapse` (the reward's rolling median falling far below its best, every sample of a group getting
the same reward), `entropy_collapse` (policy entropy toward 0, or exploding), `response_truncation` (nearly
every response cut at the length limit), each with its backlog screen before it; the KL's rules (`kl_spike`,
`kl_rise`) are in `collector.detect.kl`. Each class is fed one finite point at a time; see
`collector.detect.base`.

The screens compare with the rule's own arithmetic: medians taken as `statistics.median` takes them (the middle
value, or the two middle values' sum halved), the same products and differences, so a bound is exact. The one
sum numpy adds in another order (the reward's longer-run deviation) gets a hair's margin towards hot.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from itertools import pairwise
from statistics import median

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from collector.core.facts import RunFacts
from collector.core.severity import Severity
from collector.detect.base import (
    HOLD,
    MAD_TO_SIGMA,
    Action,
    Finding,
    Rule,
    Verdict,
    fmt,
)
from collector.detect.screening import Screen, first, floats, row_medians
from collector.detect.trends import ZeroStreak, ZeroStreakScreen


@dataclass(frozen=True)
class RewardCollapseRule:
    enabled: bool = True
    window: int = 10  # rolling median length
    patience: int = 20  # points the rolling median has been falling below its best
    # ...or, while this share of the run's points is fewer, the points since the decline began (a window at
    # least): a GRPO run of 40 logs whose reward fell for its last 17 has fallen for good, not dipped
    patience_share: float = 0.25
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


_MARGIN = 1e-9  # relative: far above a sum's rounding, far below any threshold's meaning
_CHUNK = 2048  # points whose longer-run deviation is worked out at once (100 values each)
_DECLINE_POINTS = 1000  # the recent points a reward's decline is traced back through to where it began
_LONG_NOISE = 1.2533 / math.sqrt(
    2
)  # mean |step-to-step change| -> a normal sigma (E|x1 - x2| = 2 sigma / sqrt pi)


class RewardCollapseScreen(Screen):
    """Quiet: the rolling median at or above the best so far less the drop the rule needs. The needed drop is
    first bounded below by the short window's MAD and the observed range alone (exact: the rule's noise is the
    larger of that MAD and the longer run's deviation, so its drop is no smaller); only where that bound is
    not enough is the longer run's mean step-to-step change worked out too."""

    def ready(self, rule, ctx) -> bool:
        return (
            len(rule.recent) == rule.recent.maxlen
            and len(rule.long) == rule.long.maxlen
            and rule.best is not None
            and rule.low is not None
        )

    def _rolling(self, rule, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the rolling windows, one row per point, and their medians)."""
        windows = sliding_window_view(np.concatenate([floats(rule.recent), values]), rule.recent.maxlen)[1:]
        return windows, row_medians(windows)

    def _needed(self, rule, spread, best, low) -> np.ndarray:
        cfg = rule.cfg
        noise = 1.25 * spread / math.sqrt(rule.recent.maxlen)
        return np.maximum(np.maximum(cfg.drop_sigma * noise, cfg.min_rel_drop * (best - low)), 1e-12)

    def quiet(self, rule, steps, values, ctx) -> int:
        windows, rolling = self._rolling(rule, values)
        best = np.maximum(rule.best, np.maximum.accumulate(rolling))  # the rule updates them before judging
        low = np.minimum(rule.low, np.minimum.accumulate(rolling))
        spread = row_medians(np.abs(windows - rolling[:, None])) * MAD_TO_SIGMA
        hot = rolling < best - self._needed(rule, spread, best, low)
        maybe = np.flatnonzero(hot)
        if len(maybe):  # the longer run's deviation may widen the noise: work it out where it matters
            size = rule.long.maxlen
            longs_all = sliding_window_view(np.concatenate([floats(rule.long), values]), size)
            for lo in range(0, len(maybe), _CHUNK):  # up to the first hot point, a chunk at a time
                part = maybe[lo : lo + _CHUNK]
                longs = longs_all[part + 1]
                deviation = _LONG_NOISE * np.abs(np.diff(longs, axis=1)).sum(axis=1) / (size - 1)
                b = best[part]
                needed = self._needed(rule, np.maximum(spread[part], deviation), b, low[part])
                # numpy sums pairwise, Python left to right: within a hair of the bound is hot
                hot[part] = rolling[part] < b - needed + _MARGIN * (np.abs(b) + needed)
                if hot[part].any():
                    break
        return first(hot)

    def advance(self, rule, steps, values, ctx) -> None:
        if not len(values):
            return
        _, rolling = self._rolling(rule, values)
        top = int(np.argmax(rolling))  # the first of the highest: the rule moves its best on a strict rise
        if rolling[top] > rule.best:
            rule.best, rule.best_step = float(rolling[top]), int(steps[top])
        rule.low = min(rule.low, float(rolling.min()))
        rule.recent.extend(values[-rule.recent.maxlen :].tolist())
        rule.long.extend(values[-rule.long.maxlen :].tolist())
        keep = rule.seen.maxlen
        rule.seen.extend(zip(steps[-keep:].tolist(), values[-keep:].tolist(), strict=True))
        rule.fed += len(values)
        rule.falling = 0


class RewardCollapse(Rule):
    """The reward's rolling median falling well below its best for `patience` points (RL)."""

    rule_id = "reward_collapse"
    roles = ("reward",)
    settings = RewardCollapseRule
    severities = (Severity.WARN, Severity.ERROR)
    screen = RewardCollapseScreen()
    action = Action.NAME_STEP
    meaning = "the reward had collapsed there"
    # one reward logged under two names (verl's critic/score/mean and critic/rewards/mean, TRL's reward and
    # rewards/<func>/mean with one reward function) falls at the same steps: one alert names both
    one_alert_across_metrics = True
    # the rolling median crosses its line up to a window after the reward fell, while the zero gradients the
    # fall causes show at once (Sunshine535's adabalance: gradients 0 from step 70, the collapse dated 100)
    dated_late_points = RewardCollapseRule.window
    # the reward's spread at zero (RewardStdCollapse, this rule's id) during the reward's collapse is the same
    # trouble, often dated later (a stray non-zero spread restarts its streak)
    one_incident_across_metrics = True

    def __init__(self, metric: str, cfg: RewardCollapseRule) -> None:
        self.metric, self.cfg = metric, cfg
        self.clear_after = cfg.clear_after
        self.recent: deque[float] = deque(maxlen=max(2, cfg.window))
        self.long: deque[float] = deque(maxlen=max(2, cfg.noise_points))  # the series' noise, longer-run
        self.seen: deque[tuple[int, float]] = deque(maxlen=_DECLINE_POINTS)  # (step, value): where it began
        self.best: float | None = None
        self.best_step = 0
        self.low: float | None = None
        self.falling = 0
        self.first_falling = 0
        self.fed = (
            0  # points fed, a rewind's again too (the run's length: a longer one is held to `patience`)
        )

    def rewind(self, step: int) -> None:
        self.recent.clear()
        self.seen.clear()
        self.falling = 0

    def feed(self, step: int, value: float, facts: RunFacts) -> Verdict:
        cfg = self.cfg
        self.recent.append(value)
        self.long.append(value)
        self.seen.append((step, value))
        self.fed += 1
        if len(self.recent) < self.recent.maxlen:
            return HOLD
        values = list(self.recent)
        rolling = median(values)
        if self.best is None or rolling > self.best:
            self.best, self.best_step = rolling, step
        self.low = rolling if self.low is None else min(self.low, rolling)
        spread = median(abs(v - rolling) for v in values) * MAD_TO_SIGMA
        # a reward of a few discrete levels (k of n samples right) has a small MAD in a short window: the
        # longer run's mean absolute step-to-step change (x1.25/sqrt 2 for a normal sigma) measures its real
        # noise. Not its deviation around its median: a reward that fell to a new level deviates from that
        # median at every point, and the drop being judged would hide behind the noise it made itself
        spread = max(
            spread, _LONG_NOISE * sum(abs(b - a) for a, b in pairwise(self.long)) / (len(self.long) - 1)
        )
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
        if self.falling < cfg.patience and not self._lasted_in_a_short_run():
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
            first_step=self._decline_start(),
        )

    def _lasted_in_a_short_run(self) -> bool:
        """While `patience_share` of the run's points is under `patience`, whether the decline has lasted
        that share of them since it began (`_decline_start`), a window at least. `patience` points past the
        crossing, which the rolling median reaches half a window late, would be more than half of such a run
        (Sunshine535's GRPO rho=5: the reward down from step 120 for the run's last 17 of 40 logs, the
        crossing at 155); a dip shorter than a window barely moves the median and never crosses."""
        need = max(self.recent.maxlen, math.ceil(self.cfg.patience_share * self.fed))
        if need >= self.cfg.patience:
            return False
        start = self._decline_start()
        return sum(1 for s, _ in self.seen if s >= start) >= need

    def _decline_start(self) -> int:
        """The step the decline began at: the change point of the values since the best (the split whose
        earlier mean stands furthest above its later one, weighed by both sides' lengths), when it comes
        before the drop grew past the noise (`first_falling`). A slow slide (ijinyu1113's reward: from
        step 281 on, crossing the line only at 439) then points the action at the checkpoint before it."""
        since = [(s, v) for s, v in self.seen if s > self.best_step]
        w = self.recent.maxlen
        if len(since) < 2 * w:
            return self.first_falling
        values = np.asarray([v for _, v in since], dtype=np.float64)
        n = len(values)
        sums = np.cumsum(values)
        # the later side starts at index k; each side holds a window at least, or a quarter of a short stretch
        # (21 points since the best would force the split to their middle)
        side = min(w, max(3, n // 4))
        k = np.arange(side, n - side + 1)
        before = sums[k - 1] / k
        after = (sums[-1] - sums[k - 1]) / (n - k)
        score = (before - after) * np.sqrt(k * (n - k) / n)
        best = int(np.argmax(score))
        if score[best] <= 0:
            return self.first_falling
        return min(self.first_falling, since[int(k[best])][0])

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

    def finding(self, value: float, points: int, since: int, facts: RunFacts) -> Finding:
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


class EntropyCollapseScreen(Screen):
    """Quiet: not under the collapse fraction of the peak so far (the point's own value counted, as the rule
    counts it), nor above the explosion ratio of the starting level; ready once that level is known."""

    def ready(self, rule, ctx) -> bool:
        return bool(rule.start) and len(rule.start) >= rule.cfg.start_points

    def quiet(self, rule, steps, values, ctx) -> int:
        cfg = rule.cfg
        peak = np.maximum(rule.peak, np.maximum.accumulate(values))
        hot = (peak >= cfg.min_peak) & (values >= 0) & (values < cfg.collapse_fraction * peak)
        start = median(rule.start)
        if start > 0:
            hot |= values > cfg.explode_ratio * start
        return first(hot)

    def advance(self, rule, steps, values, ctx) -> None:
        if not len(values):
            return
        top = int(np.argmax(values))
        if values[top] > rule.peak:
            rule.peak, rule.peak_step = float(values[top]), int(steps[top])


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


class ResponseTruncationScreen(Screen):
    def quiet(self, rule, steps, values, ctx) -> int:
        return first(~(values < rule.cfg.clip_ratio))

    def advance(self, rule, steps, values, ctx) -> None:
        pass


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
