"""Screens: what lets the backlog path (`collector.detect.backlog`) skip the points where a rule cannot fire.

A screen belongs to one rule class, which declares it (`Rule.screen`; the screens of the spike, schedule,
validation-score and zero-streak rules are here, the loss rules' in `screens_loss`, the RL rules' in
`screens_rl`, a custom rule's in `custom`), and
answers three things about one rule object, over numpy arrays of the finite points (steps, values scaled as
the engine scales them) that would be fed to it next:

- `ready(rule, ctx) -> bool`: whether the rule's state lets quiet points be taken in bulk at all (a full
  baseline window, no episode under way inside the rule...). Not ready: the next point is fed in full.
- `quiet(rule, steps, values, ctx) -> k`: pure (changes nothing): the first `k` points surely give a quiet
  verdict (None or HOLD, with no state that bulk-taking could not reproduce); point `k` may fire, and the
  backlog path feeds it to the rule, in file order, with the run's facts as they stand there.
  Conservative by design: a screen may call a quiet point hot (it is then fed one by one, which costs time),
  never a hot point quiet (that would lose a finding; the property test in
  tests/collector/detect/test_backlog.py compares every episode with the incremental engine's).
- `between(rule, steps, values, ctx) -> k` (screens with `holds_between`): while the rule's episode is open,
  how many leading points surely HOLD (a None would count towards closing the episode).
- `advance(rule, steps, values, ctx)`: take points `quiet` called quiet, leaving the rule exactly as feeding
  them one by one would have.

A rule class without a screen is fed every point in full by the backlog path: correct, only slower.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from collector.core.facts import RunFacts
from collector.detect.base import Window, median_of_sorted


@dataclass
class ScreenContext:
    """What screens may read beyond the rule: the run's facts, and every step that may be excused as a save or
    evaluation step anywhere in the backlog (a superset of what the facts will know at any of its points)."""

    facts: RunFacts
    excused: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))


class Screen:
    """The default screen: every point may fire (see the module docstring for the protocol)."""

    # whether `between` may say more than 0: while the rule's episode is open, a verdict of None closes it in
    # time, so only points that surely HOLD may be taken
    holds_between = False

    def between(self, rule, steps: np.ndarray, values: np.ndarray, ctx: ScreenContext) -> int:
        """How many leading points surely give HOLD (pure)."""
        return 0

    def ready(self, rule, ctx: ScreenContext) -> bool:
        return True

    def quiet(self, rule, steps: np.ndarray, values: np.ndarray, ctx: ScreenContext) -> int:
        return 0

    def advance(self, rule, steps: np.ndarray, values: np.ndarray, ctx: ScreenContext) -> None:
        raise NotImplementedError


def screen_of(rule) -> Screen | None:
    """The screen its class declares (`Rule.screen`); None: the rule is fed every point in full."""
    return getattr(type(rule), "screen", None)


def first(hot: np.ndarray) -> int:
    """Index of the first True (len when none)."""
    at = int(np.argmax(hot)) if len(hot) else 0
    return at if len(hot) and hot[at] else len(hot)


def floats(values) -> np.ndarray:
    return np.fromiter(values, dtype=np.float64, count=len(values))


def row_medians(rows: np.ndarray) -> np.ndarray:
    """The median of each row, exactly as `statistics.median` gives it (the middle value, or the two middle
    values' sum halved)."""
    k = rows.shape[1]
    half = k // 2
    ordered = np.partition(rows, [half] if k % 2 else [half - 1, half], axis=1)
    return ordered[:, half] if k % 2 else (ordered[:, half - 1] + ordered[:, half]) / 2


def block_medians(arr: np.ndarray, ends: np.ndarray, k: int) -> np.ndarray:
    """Median of arr[e - k : e] for each end e."""
    return row_medians(sliding_window_view(arr, k)[ends - k])


# ----- the robust window's recomputation schedule (collector.detect.base.Window) -----


def _first_due(added: int, at: int, stride: int) -> int:
    """Index of the first of the coming calls that recomputes, for a window that stays full."""
    return 0 if at < 0 else max(0, stride - (added - at))


def scheduled_medians(window: Window, values: np.ndarray) -> np.ndarray:
    """The median `Window.median()` returns before each of `values` is added, one call per value, the window
    full throughout (every value added: the points are quiet)."""
    size, stride, n = window.vals.maxlen, window._stride, len(values)
    j0 = _first_due(window._added, window._at, stride)
    mids = np.full(n, window._mid)
    if j0 < n:
        arr = np.concatenate([floats(window.vals), values])
        at = np.arange(j0, n, stride)
        ordered = np.sort(sliding_window_view(arr, size)[at], axis=1)
        half = size // 2
        meds = ordered[:, half] if size % 2 else (ordered[:, half - 1] + ordered[:, half]) / 2
        mids[j0:] = meds[(np.arange(j0, n) - j0) // stride]
    return mids


def extend_window(window: Window, steps: np.ndarray, values: np.ndarray, median: bool, noise: bool) -> None:
    """Add quiet points to a full window as one `median()` (or `noise_due()`) call then one `add` each would."""
    size, stride, n = window.vals.maxlen, window._stride, len(values)
    if not n:
        return
    arr = None
    for kind in ("median", "noise") if median and noise else ("median",) if median else ("noise",):
        at = window._at if kind == "median" else window._noise_at
        j0 = _first_due(window._added, at, stride)
        if j0 >= n:
            continue
        last = j0 + stride * ((n - 1 - j0) // stride)
        if arr is None:
            arr = np.concatenate([floats(window.vals), values])
        before = arr[last : last + size].tolist()  # the window as the call at `last` saw it
        if kind == "median":
            ordered = sorted(before)
            window._mid, window._mad, window._frozen = median_of_sorted(ordered), None, ordered
            window._at = window._added + last
        else:
            if size > 1:
                window._noise_frozen, window._noise = before, None
            window._noise_at = window._added + last
    window.vals.extend(values[-size:].tolist())
    window.steps.extend(steps[-size:].tolist())
    if window._sorted is not None:
        window._sorted = sorted(window.vals)
    window._added += n


def excused(steps: np.ndarray, ctx: ScreenContext) -> np.ndarray:
    """Points whose step (or the step before) may be a save or evaluation step."""
    ex = ctx.excused
    if len(ex):
        hot = ex[np.minimum(np.searchsorted(ex, steps), len(ex) - 1)] == steps
        hot |= ex[np.minimum(np.searchsorted(ex, steps - 1), len(ex) - 1)] == steps - 1
    else:
        hot = np.zeros(len(steps), dtype=bool)
    for freq in ctx.facts._rhythm:
        hot |= ((steps > 0) & (steps % freq == 0)) | ((steps > 1) & ((steps - 1) % freq == 0))
    return hot


# ----- the screens -----


class GradSpikeScreen(Screen):
    def ready(self, rule, ctx: ScreenContext) -> bool:
        w, cfg, facts = rule.window, rule.cfg, ctx.facts
        if len(w.vals) != w.vals.maxlen or len(w.vals) < cfg.min_history:
            return False
        if facts.fresh_init is None and (facts.settings.get("vocab_size") or 0) > 1:
            return False  # the first loss may still make it a fresh model, whose first points are held
        if facts.fresh_init and not facts.settings.get("warmup_steps") and len(w.vals) < cfg.fresh_min_points:
            return False
        # a window replaced by the recent points (a new level) happens only with spikes among them
        return 2 * sum(flag for _, _, flag in rule.recent) < rule.recent.maxlen

    def quiet(self, rule, steps, values, ctx) -> int:
        cfg = rule.cfg
        mids = scheduled_medians(rule.window, values)
        hot = (values > cfg.abs_max) | (values > cfg.ratio * mids)
        hot |= (mids > 0) & (values > 0) & (values < mids / cfg.vanish_ratio)
        warmup = ctx.facts.settings.get("warmup_steps")
        if ctx.facts.fresh_init and warmup:
            hot |= steps <= warmup
        return first(hot)

    def advance(self, rule, steps, values, ctx) -> None:
        extend_window(rule.window, steps, values, median=True, noise=False)
        recent = rule.recent
        m = recent.maxlen
        recent.extend((s, v, False) for s, v in zip(steps[-m:].tolist(), values[-m:].tolist(), strict=True))
        flags = [flag for _, _, flag in recent]
        rule.spikes = sum(flags[1:]) if len(recent) == m else sum(flags)
        h = rule.history.maxlen
        rule.history.extend(zip(steps[-h:].tolist(), values[-h:].tolist(), strict=True))
        rule.above_abs = rule.vanishing = rule.consecutive = 0


class StepTimeSpikeScreen(Screen):
    """Judged one step late: the point fed at i judges the one before it (the pending point)."""

    def ready(self, rule, ctx) -> bool:
        w = rule.window
        return (
            rule.pending is not None and len(w.vals) == w.vals.maxlen and len(w.vals) >= rule.cfg.min_history
        )

    def _judged(self, rule, steps, values) -> tuple[np.ndarray, np.ndarray]:
        s0, v0 = rule.pending
        return (np.concatenate([np.array([s0], dtype=np.int64), steps[:-1]]),
                np.concatenate([np.array([v0], dtype=np.float64), values[:-1]]))  # fmt: skip

    def quiet(self, rule, steps, values, ctx) -> int:
        cfg = rule.cfg
        j_steps, j_values = self._judged(rule, steps, values)
        mids = scheduled_medians(rule.window, j_values)
        # over `abs_max_seconds` counts only well above the median too: an RL step takes a minute every step
        absolute = (j_values > cfg.abs_max_seconds) & (j_values > cfg.abs_ratio * mids)
        hot = (j_values > cfg.ratio * mids) | absolute | excused(j_steps, ctx)
        return first(hot)

    def advance(self, rule, steps, values, ctx) -> None:
        if not len(values):
            return
        j_steps, j_values = self._judged(rule, steps, values)
        extend_window(rule.window, j_steps, j_values, median=True, noise=False)
        rule.pending = (int(steps[-1]), float(values[-1]))


class ZeroStreakScreen(Screen):
    """`no_learning` on a gradient norm, `reward_collapse` on a reward spread: fires only at (about) zero, the
    rule's setting `threshold` (of the absolute value with `absolute`)."""

    def __init__(self, threshold: str, absolute: bool = False) -> None:
        self.threshold, self.absolute = threshold, absolute

    def quiet(self, rule, steps, values, ctx) -> int:
        level = getattr(rule.cfg, self.threshold)
        return first(~((np.abs(values) if self.absolute else values) > level))

    def advance(self, rule, steps, values, ctx) -> None:
        if len(values):
            rule.zeros.reset()


class ResponseTruncationScreen(Screen):
    def quiet(self, rule, steps, values, ctx) -> int:
        return first(~(values < rule.cfg.clip_ratio))

    def advance(self, rule, steps, values, ctx) -> None:
        pass


class LrAnomalyScreen(Screen):
    """lr above zero and on its schedule (or no schedule known) is quiet."""

    def _expected(self, rule, steps, values, ctx) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(expected lr, base lr, whether both are known) per point, as `expected_lr` computes them."""
        settings = ctx.facts.settings
        total, warmup = settings.get("total_steps"), settings.get("warmup_steps", 0)
        n = len(values)
        peak = np.maximum(rule.peak, np.maximum.accumulate(values)) if n else values
        base_lr = settings.get("base_lr")
        base = np.full(n, float(base_lr)) if base_lr else np.where(steps > warmup, peak, np.nan)
        known = ~np.isnan(base)
        expected = np.full(n, np.nan)
        if total is None or total <= warmup:
            return expected, base, np.zeros(n, dtype=bool)
        scheduler = settings.get("scheduler", "")
        in_warmup = (steps <= warmup) if warmup else np.zeros(n, dtype=bool)
        with np.errstate(invalid="ignore", divide="ignore"):
            progress = np.minimum(1.0, (steps - warmup) / (total - warmup))
            min_lr = base * settings.get("min_lr_ratio", 0.0)
            if "cosine" in scheduler:
                expected = min_lr + (base - min_lr) * 0.5 * (1 + np.cos(math.pi * progress))
            elif "linear" in scheduler:
                expected = min_lr + (base - min_lr) * (1 - progress)
            elif "constant" in scheduler:
                expected = base.copy()
            if warmup:
                expected = np.where(in_warmup, base * steps / warmup, expected)
        return expected, base, known & ~np.isnan(expected)

    def quiet(self, rule, steps, values, ctx) -> int:
        expected, base, known = self._expected(rule, steps, values, ctx)
        tol = rule.cfg.cosine_tolerance * base
        # off the curve, or within a hair of the tolerance (numpy's cos may differ from math's in the last bit)
        with np.errstate(invalid="ignore"):
            off = np.abs(values - expected) > tol - 1e-9 * (np.abs(values) + np.abs(expected) + np.abs(tol))
        return first(~(values > 0) | (known & off))

    def advance(self, rule, steps, values, ctx) -> None:
        if not len(values):
            return
        _, _, known = self._expected(rule, steps, values, ctx)
        rule.zeros = 0
        rule.peak = max(rule.peak, float(values.max()))
        if known.any():
            rule.off_curve = 0


class ValScoreDeclineScreen(Screen):
    """A score the rule does not judge (a training accuracy logged every step: TRL's `mean_token_accuracy`)
    always holds and keeps no state: taken in bulk. A validation score is fed in full (its evaluations are few)."""

    def quiet(self, rule, steps, values, ctx) -> int:
        return 0 if rule.judged else len(values)

    def advance(self, rule, steps, values, ctx) -> None:
        pass
