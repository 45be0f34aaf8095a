"""Screens of the training-loss rules (`loss_spike`, `no_learning` on a loss, `loss_plateau`): see
`collector.detect.screens` for the protocol. In an RL run these rules hold every point without changing
state, so every point is quiet and taking them changes nothing.
"""

from __future__ import annotations

import math
from itertools import islice

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from collector.detect.screens import Screen, block_medians, extend_window, first, floats


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


class NoLearningLossScreen(Screen):
    """Quiet: away from ln(vocab), and either fallen well below the highest loss or spread over the last
    points by more than `flat_rel` of their largest magnitude (which bounds the mean's)."""

    def ready(self, rule, ctx) -> bool:
        return ctx.facts.is_rl or len(rule.recent) == rule.recent.maxlen

    def quiet(self, rule, steps, values, ctx) -> int:
        if ctx.facts.is_rl:
            return len(values)
        cfg = rule.cfg
        hot = np.zeros(len(values), dtype=bool)
        vocab = ctx.facts.settings.get("vocab_size")
        if vocab and vocab > 1:
            uniform = math.log(vocab)
            hot |= np.abs(values - uniform) <= cfg.ln_vocab_rel * uniform
        highest = np.maximum(rule.highest, np.maximum.accumulate(values))
        dropped = (highest > 0) & (values < (1 - cfg.learned_drop) * highest)
        size = rule.recent.maxlen
        windows = sliding_window_view(np.concatenate([floats(rule.recent), values]), size)[1:]
        spread = windows.max(axis=1) - windows.min(axis=1)
        bound = cfg.flat_rel * np.maximum(np.abs(windows).max(axis=1) * (1 + 1e-9), 1e-12)
        hot |= ~dropped & (spread <= bound)
        return first(hot)

    def advance(self, rule, steps, values, ctx) -> None:
        if ctx.facts.is_rl or not len(values):
            return
        size = rule.recent.maxlen
        rule.recent.extend(values[-size:].tolist())
        rule.recent_steps.extend(steps[-size:].tolist())
        rule.highest = max(rule.highest, float(values.max()))
        vocab = ctx.facts.settings.get("vocab_size")
        if vocab and vocab > 1:
            rule.at_uniform = 0
        rule.flat_points = 0


class LossPlateauScreen(Screen):
    """Points between the checks (every tenth of a window) only append (and hold, so an open episode does not
    stop them being taken). A check whose window median is below the best earlier window's by the margin
    (verdict None, the common case while the loss still falls) is taken in bulk; the first other check is fed."""

    holds_between = True  # see `between`

    def _checks(self, rule, values: np.ndarray, medians: bool = True):
        """(index of each check among `values`, its window length, its window median)."""
        cfg, n = rule.cfg, len(values)
        i = np.arange(n)
        seen = rule.seen + i + 1
        half = np.maximum(np.minimum(seen // 10, cfg.max_window), rule.min_half)
        filled = np.minimum(rule.values.maxlen, len(rule.values) + i + 1)
        at = i[(filled >= 2 * half) & (seen % np.maximum(1, half // 10) == 0)]
        halves = half[at]
        now = np.empty(len(at))
        if len(at) and medians:
            arr = np.concatenate([floats(rule.values), values])
            ends = len(rule.values) + at + 1
            cuts = [0, *(np.flatnonzero(np.diff(halves)) + 1).tolist(), len(at)]  # halves never shrink
            for a, b in zip(cuts, cuts[1:], strict=False):
                now[a:b] = block_medians(arr, ends[a:b], int(halves[a]))
        return at, halves, now

    def _walk(self, rule, steps, at, halves, now, apply: bool) -> int:
        """Replay the checks' bookkeeping (on copies unless `apply`); the number of leading checks whose verdict
        is None."""
        checks = rule.checks if apply else type(rule.checks)(rule.checks)
        best, medians, margin = rule.best, rule.medians, rule.cfg.min_rel_improvement
        for j in range(len(at)):
            seen, half, median = rule.seen + int(at[j]) + 1, int(halves[j]), float(now[j])
            while checks and checks[0][0] <= seen - half:
                _, step, old = checks.popleft()
                if best is None or old < best[1]:
                    best = (step, old)
            if not (best is None or median < best[1] - margin * abs(best[1])):
                return j
            checks.append((seen, int(steps[at[j]]), median))
            if apply:
                medians[(seen, half)] = median
                if len(medians) > 64:
                    for key in list(medians)[:32]:
                        del medians[key]
                rule.best, rule.flat = best, 0
        return len(at)

    def between(self, rule, steps, values, ctx) -> int:
        if ctx.facts.is_rl:
            return len(values)
        at, _, _ = self._checks(rule, values, medians=False)
        return int(at[0]) if len(at) else len(values)

    def _first_median(self, rule, values: np.ndarray, c: int, half: int) -> float:
        """The window median of a check at index `c` of `values` (the deque's tail read only as far as needed)."""
        end = c + 1
        if end >= half:
            window = values[end - half : end]
        else:
            need = half - end
            tail = np.fromiter(islice(reversed(rule.values), need), dtype=np.float64, count=need)[::-1]
            window = np.concatenate([tail, values[:end]])
        return float(block_medians(window, np.array([half]), half)[0])

    def quiet(self, rule, steps, values, ctx) -> int:
        if ctx.facts.is_rl:
            return len(values)
        at, halves, _ = self._checks(rule, values, medians=False)
        if not len(at):
            return len(values)
        # a flat loss stops at its very next check: find that out with one median, not a horizon's worth
        first = np.array([self._first_median(rule, values, int(at[0]), int(halves[0]))])
        if self._walk(rule, steps, at[:1], halves[:1], first, apply=False) == 0:
            return int(at[0])
        at, halves, now = self._checks(rule, values)
        j = self._walk(rule, steps, at, halves, now, apply=False)
        return int(at[j]) if j < len(at) else len(values)

    def advance(self, rule, steps, values, ctx) -> None:
        if ctx.facts.is_rl or not len(values):
            return
        at, halves, now = self._checks(rule, values)
        self._walk(rule, steps, at, halves, now, apply=True)
        size = rule.values.maxlen
        rule.steps.extend(steps[-size:].tolist())
        rule.values.extend(values[-size:].tolist())
        rule.seen += len(values)
