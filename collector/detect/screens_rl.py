"""Screens of the RL rules (`reward_collapse` on a reward, `entropy_collapse`, `kl_rise`, `kl_spike`): see
`collector.detect.screens` for the protocol. `response_truncation` and `reward_collapse` on a reward spread
have theirs in `screens`.

Each compares with the rule's own arithmetic: medians taken as `statistics.median` takes them (the middle
value, or the two middle values' sum halved), the same products and differences, so a bound is exact. The one
sum numpy adds in another order (the reward's longer-run deviation) gets a hair's margin towards hot.
"""

from __future__ import annotations

import math
from statistics import median

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from collector.detect.base import MAD_TO_SIGMA, median_of_sorted
from collector.detect.screens import (
    Screen,
    block_medians,
    extend_window,
    first,
    floats,
    row_medians,
    scheduled_medians,
)

_MARGIN = 1e-9  # relative: far above a sum's rounding, far below any threshold's meaning
_CHUNK = 2048  # points whose longer-run deviation is worked out at once (100 values each)


class RewardCollapseScreen(Screen):
    """Quiet: the rolling median at or above the best so far less the drop the rule needs. The needed drop is
    first bounded below by the short window's MAD and the observed range alone (exact: the rule's noise is the
    larger of that MAD and the longer run's deviation, so its drop is no smaller); only where that bound is
    not enough is the longer run's mean absolute deviation worked out too."""

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
                mid = row_medians(longs)
                deviation = 1.2533 * np.abs(longs - mid[:, None]).sum(axis=1) / size
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
        rule.falling = 0


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
