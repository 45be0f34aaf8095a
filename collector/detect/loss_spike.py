"""`loss_spike`: the training loss far above its recent robust baseline (a jump), or diverging (rising block
after block far above its best), or jumped to a new level far above its best and staying there (a level shift).
Fed one finite point at a time (see `collector.detect.base` for the verdict protocol); its backlog screen
(`LossSpikeScreen`) is beside it. In an RL run the rule holds every point without changing state."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

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
)
from collector.detect.screening import Screen, block_medians, extend_window, first, floats


@dataclass(frozen=True)
class LossSpikeRule:
    enabled: bool = True
    window: int = 50
    min_history: int = 5
    level_points: int = 10  # the baseline level: median of the last 10 points (the loss trends)
    z: float = 6.0  # noise sigmas above that level (noise from point-to-point differences over `window`)
    rel_jump: float = 0.5  # and at least 50 % above the level...
    abs_jump: float = 0.1  # ...and 0.1 nats above it
    diverge_window: int = 10  # rolling median length for the divergence check
    diverge_rel: float = 0.3  # rolling median this much above its best so far = diverging
    diverge_for: int = 10  # for this many points
    # a divergence found at this many trend checks (every half block) is an error
    diverge_error_points: int = 4
    # a level shift: every one of the three blocks this much above the best (relative, and abs_jump) without
    # climbing: the loss jumped to a new level and stayed there; a warning at once, an error after this many
    # more trend checks (every half block)
    shift_rel: float = 1.0
    shift_error_points: int = 6
    tail_ratio: float = 1.5  # and a jump above this many times the `tail_quantile` of the window's own jumps
    tail_quantile: float = 0.95
    settle_points: int = 10  # the first logged points only fill the baseline
    warn_after_points: int = 2  # one high point is a notice (info); this many in one episode a warning
    # (0: never by count) a spike episode this long is an error; by default the damage is told on the gradient
    # spike before it (grad_spike turns error), and a loss that keeps rising is the divergence check's
    error_after_points: int = 0
    clear_after: int = 5


class LossSpikeScreen(Screen):
    """Quiet: no jump of `abs_jump` above the lowest of the level points (the level's median is no lower),
    and every trend check's newest block median within the divergence margin of the best so far."""

    def ready(self, rule, ctx) -> bool:
        if ctx.facts.is_rl:
            return True
        w = rule.window
        return (
            len(w.vals) == w.vals.maxlen
            and len(w.vals) >= rule.cfg.min_history
            and len(rule.level) == rule.level.maxlen
            and rule.rising == 0
            and not rule.far_above
        )

    def _checks(self, rule, values: np.ndarray):
        """(index of each trend check among `values`, its newest block median, the best median after it)."""
        n, m, block = len(values), rule.recent.maxlen, rule.block
        len0 = len(rule.recent)
        i = np.arange(n)
        at = i[((len0 + i + 1) >= m) & ((rule.seen + i + 1) % rule.stride == 0)]
        if not len(at):
            return at, np.empty(0), np.empty(0)
        arr = np.concatenate([floats(rule.recent), values])
        latest = block_medians(arr, len0 + at + 1, block)
        start = math.inf if rule.best_rolling is None else rule.best_rolling
        best = np.minimum.accumulate(np.concatenate([[start], latest]))[1:]
        return at, latest, best

    def quiet(self, rule, steps, values, ctx) -> int:
        if ctx.facts.is_rl:
            return len(values)
        cfg = rule.cfg
        level = rule.level.maxlen
        arr = np.concatenate([floats(rule.level), values])
        lowest = sliding_window_view(arr, level)[: len(values)].min(axis=1)  # the level points before each
        hot = values - lowest >= cfg.abs_jump
        maybe = np.nonzero(hot)[0]
        if len(maybe):  # the level's median, exactly, where the lowest level point allowed a jump
            mid = block_medians(arr, maybe + level, level)
            jump = values[maybe] - mid
            hot[maybe] = (jump >= cfg.rel_jump * np.abs(mid)) & (jump >= cfg.abs_jump)
        at, latest, best = self._checks(rule, values)
        # far above the best by the smaller of the divergence's and the level shift's margins
        rel = min(cfg.diverge_rel, cfg.shift_rel)
        diverging = latest > best + np.maximum(rel * np.abs(best), cfg.abs_jump)
        hot[at[diverging]] = True
        return first(hot)

    def advance(self, rule, steps, values, ctx) -> None:
        if ctx.facts.is_rl or not len(values):
            return
        at, latest, best = self._checks(rule, values)
        if len(at):
            before = np.concatenate(
                [[math.inf if rule.best_rolling is None else rule.best_rolling], best[:-1]]
            )
            improved = np.nonzero(latest < before)[0]
            if len(improved):
                rule.best_rolling = float(best[-1])
                rule.best_step = int(steps[at[improved[-1]]])
        extend_window(rule.window, steps, values, median=False, noise=True)
        rule.level.extend(values[-rule.level.maxlen :].tolist())
        rule.recent.extend(values[-rule.recent.maxlen :].tolist())
        rule.seen += len(values)


class LossSpike(Rule):
    """The training loss far above its recent robust baseline, or diverging: rising block after block while
    far above its best, or jumped to a new level far above its best and staying there (a level shift)."""

    rule_id = "loss_spike"
    roles = ("loss",)
    settings = LossSpikeRule
    severities = (Severity.INFO, Severity.WARN, Severity.ERROR)
    screen = LossSpikeScreen()
    action = Action.SKIP_BATCHES
    meaning = "the loss had jumped there"
    recurs = True
    caused_by = ("grad_spike",)  # incidents: a loss jump after a gradient spike is that spike's incident
    follows = ("grad_spike",)  # one alert: a finding within a few points after a grad spike joins it
    follows_same_metric = False

    def __init__(self, metric: str, cfg: LossSpikeRule) -> None:
        self.metric, self.cfg = metric, cfg
        self.clear_after = cfg.clear_after
        self.window = Window(cfg.window, keep_sorted=False)  # only its point-to-point noise is read
        self.block = max(2, cfg.diverge_window)
        self.stride = max(1, self.block // 2)  # the trend is judged every half block: it moves slowly
        # three blocks of raw values: a rising trend is three block medians in increasing order, which a
        # single spike passing through a rolling window cannot fake
        self.recent: deque[float] = deque(maxlen=3 * self.block)
        self.level: deque[float] = deque(maxlen=max(1, cfg.level_points))
        self.seen = 0
        self.best_rolling: float | None = None
        self.best_step = 0
        self.rising = 0
        # the last trend check found the loss far above its best: until one finds it back, the points between
        # checks keep the verdict (a divergence whose blocks wobble does not clear and come back as a new alert)
        self.far_above = False

    def rewind(self, step: int) -> None:
        self.window.rewind(step)
        self.recent.clear()
        self.level.clear()
        self.level.extend(self.window.values()[-self.level.maxlen :])
        self.rising = 0
        self.far_above = False

    def feed(self, step: int, value: float, facts: RunFacts) -> Verdict:
        if facts.is_rl:
            return HOLD  # in RL runs "loss" is a policy loss: neither spikes nor trends mean much
        cfg = self.cfg
        enough = len(self.window.vals) >= cfg.min_history
        # the loss trends (fast, early on): its baseline is the median of the last few points, and its noise
        # comes from point-to-point differences, which a trend does not inflate
        if enough:
            mid = median_of_sorted(sorted(self.level))
            self.window.noise_due()
        else:
            mid = 0.0
        self.window.add(step, value)
        self.level.append(value)
        self.recent.append(value)
        self.seen += 1
        stride = self.stride
        latest = None  # the median of the newest block, at a trend check
        if len(self.recent) == self.recent.maxlen and self.seen % stride == 0:
            values = list(self.recent)
            latest = median_of_sorted(sorted(values[2 * self.block :]))
            if self.best_rolling is None or latest < self.best_rolling:
                self.best_rolling, self.best_step = latest, step
        if not enough:
            return HOLD
        jump = value - mid
        # the noise is worked out only for a jump big enough to matter
        big = jump >= cfg.rel_jump * abs(mid) and jump >= cfg.abs_jump
        if big:  # the noise model: above what the last `window` points reached, by a margin
            vals = list(self.window.vals)[:-1]  # the window holds this point already
            # jumps the loss made before (a trend moves every point the same way and inflates none of them)
            jumps = sorted(abs(b - a) for a, b in zip(vals, vals[1:], strict=False))
            tail = (
                jumps[min(len(jumps) - 1, int(cfg.tail_quantile * (len(jumps) - 1) + 0.5))] if jumps else 0.0
            )
            big = jump > cfg.tail_ratio * tail
        sigma = self.window.diff_noise() if big else 0.0
        z = (value - mid) / max(sigma, 0.01 * abs(mid), 1e-12) if big else 0.0
        if big and z >= cfg.z:
            if self.seen <= cfg.settle_points or facts.settling(step, 1.0):
                return HOLD  # start-up: the loss falls fast and jumps with it
            return Finding(
                Severity.INFO,
                value,
                f"{self.metric} peaked at {fmt(value)} at step {step}, {fmt(value / mid if mid else float('inf'))}x "
                f"its recent median {fmt(mid)} (robust z {fmt(z)}, a jump of {fmt(jump)}). Likely causes: a gradient spike just before, a bad batch, lr too high. "
                f"Check grad_norm around this step and the batch; if the loss does not come back within a few "
                f"steps, resume from the last good checkpoint with a lower lr.",
                {"baseline_median": mid, "noise_sigma": sigma, "z": z, "jump": jump},
                warn_after_points=cfg.warn_after_points,
                error_after_points=cfg.error_after_points or None,
                peak=True,
            )
        best = self.best_rolling
        if latest is not None:
            self.far_above = best is not None and latest > best + max(
                cfg.diverge_rel * abs(best), cfg.abs_jump
            )
        if latest is not None and self.far_above:
            k = self.block
            blocks = (
                median_of_sorted(sorted(values[:k])),
                median_of_sorted(sorted(values[k : 2 * k])),
                latest,
            )
            # each block above the one before by more than a block median's own wobble (~1.25 sigma / sqrt(k)):
            # three noisy medians fall in rising order by chance one time in six
            wobble = 1.25 * self.window.diff_noise() / math.sqrt(k)
            climbing = blocks[1] - blocks[0] > wobble and blocks[2] - blocks[1] > wobble
            # jumped to a new level and stayed: every block far above the best and not falling back (a spike's
            # recovery drops by a good part of its excess over two blocks; a level only wobbles)
            falling = blocks[0] - blocks[2] > max(2 * wobble, 0.1 * (blocks[0] - best))
            shifted = not falling and min(blocks) > best + max(cfg.shift_rel * abs(best), cfg.abs_jump)
            if not (climbing or shifted):
                self.rising = 0
                return HOLD  # far above its best but not climbing: recovering from a spike, not diverging
            self.rising += stride
            if self.rising >= cfg.diverge_for and not climbing:
                return self._level_shift(step, value, blocks)
            if self.rising >= cfg.diverge_for:
                return Finding(
                    Severity.INFO,
                    value,
                    f"{self.metric} is diverging: block medians {fmt(blocks[0])} -> {fmt(blocks[1])} -> "
                    f"{fmt(blocks[2])} to step {step}, far above its best {fmt(best)} at step {self.best_step}. "
                    f"Likely causes: lr too high, optimizer state corrupted after a spike, numerical instability. "
                    f"Stop the run and resume from the checkpoint near step {self.best_step} with a lower lr.",
                    {
                        "best_median": best,
                        "best_step": self.best_step,
                        "block_medians": list(blocks),
                        "kind": "diverging",
                    },
                    warn_after_points=2,  # still rising at the next trend check
                    error_after_points=cfg.diverge_error_points,
                )
            return HOLD
        if latest is None and (self.rising or self.far_above):
            return HOLD  # between trend checks: keep the verdict of the last one
        self.rising = 0
        return None

    def _level_shift(self, step: int, value: float, blocks: tuple[float, float, float]) -> Finding:
        """The loss jumped to a new level, far above its best, and stays there: a divergence told once, a
        warning that becomes an error as it lasts."""
        best = self.best_rolling or 0.0
        times = f"{fmt(blocks[2] / best)}x " if best > 0 else ""
        return Finding(
            Severity.WARN,
            value,
            f"{self.metric} jumped to a new level and stays there: block medians {fmt(blocks[0])} -> "
            f"{fmt(blocks[1])} -> {fmt(blocks[2])} to step {step}, {times}its best {fmt(best)} at step "
            f"{self.best_step}. A loss that jumps and stays far above its best is a divergence (an update wrecked "
            f"the weights: lr too high, optimizer state corrupted after a spike, a broken data shard), not a "
            f"spike. Stop the run and resume from the checkpoint near step {self.best_step} with a lower lr.",
            {
                "best_median": best,
                "best_step": self.best_step,
                "block_medians": list(blocks),
                "kind": "level_shift",
            },
            error_after_points=self.cfg.shift_error_points,
        )
