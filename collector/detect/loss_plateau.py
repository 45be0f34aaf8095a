"""`loss_plateau`: the training loss's window median no longer below the best earlier window's by a margin, for
long enough while the lr is still high enough to learn. Fed one finite point at a time (see
`collector.detect.base` for the verdict protocol); its backlog screen (`LossPlateauScreen`) is beside it. In an
RL run the rule holds every point without changing state."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from itertools import islice

import numpy as np

from collector.core.facts import RunFacts
from collector.core.severity import Severity
from collector.detect.base import (
    HOLD,
    MAD_TO_SIGMA,
    Finding,
    Rule,
    Verdict,
    deviations_sorted,
    fmt,
    median_of_sorted,
)
from collector.detect.screening import Screen, block_medians, floats


@dataclass(frozen=True)
class LossPlateauRule:
    enabled: bool = True
    # seed default: 50 logged steps; counted in logged points, so a run logging every 10 steps waits 500
    # steps; the window grows to a tenth of the run so far (up to max_window) so slow steady progress counts
    patience_points: int = 50
    max_window: int = 1000
    # progress = the last window's median below the best earlier window's by more than this (relative)
    min_rel_improvement: float = 0.0
    noise_sigmas: float = (
        2.0  # worse than the window before by this many noise sigmas is a rise, not a plateau
    )
    hold_checks: int = 5  # checks (every tenth of a window) that must fail in a row before alerting
    end_lr_fraction: float = 0.1  # no plateau alert once lr has decayed below 10 % of its peak
    clear_after: int = 10  # checks showing progress before the episode closes


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


class LossPlateau(Rule):
    """The median training loss of the last window is no lower than the best median of any earlier window
    that does not overlap it, check after check (slow, steady progress keeps setting new bests; a flat,
    noisy loss soon stops doing so).

    The window is `patience_points` logged points, or a tenth of the points so far when that is longer,
    capped at `max_window` points; it is judged every tenth of a window, so the cost per point stays small.
    """

    rule_id = "loss_plateau"
    roles = ("loss",)
    settings = LossPlateauRule
    severities = (Severity.INFO,)
    screen = LossPlateauScreen()
    meaning = "the loss had stopped improving there"
    recurs = True  # incidents: a loss that keeps levelling off is one trouble, one incident per metric

    def __init__(self, metric: str, cfg: LossPlateauRule) -> None:
        self.metric, self.cfg = metric, cfg
        self.clear_after = cfg.clear_after
        self.min_half = max(2, cfg.patience_points)
        size = 2 * max(2, cfg.patience_points, cfg.max_window)
        self.steps: deque[int] = deque(maxlen=size)
        self.values: deque[float] = deque(maxlen=size)
        self.seen = 0
        self.flat = 0
        self.checks: deque[tuple[int, int, float]] = deque()  # (seen, step, window median) not yet "earlier"
        self.best: tuple[int, float] | None = None  # (step, median) of the best earlier window
        # window medians by (seen at its end, its length): a check's earlier half was a check's later half
        self.medians: dict[tuple[int, int], float] = {}

    def rewind(self, step: int) -> None:
        while self.steps and self.steps[-1] >= step:
            self.steps.pop()
            self.values.pop()
            self.seen -= 1
        self.checks.clear()
        self.medians.clear()
        self.flat = 0

    def feed(self, step: int, value: float, facts: RunFacts) -> Verdict:
        if facts.is_rl:
            return HOLD
        cfg = self.cfg
        self.steps.append(step)
        self.values.append(value)
        self.seen += 1
        half = self.seen // 10  # max(2, patience_points, min(max_window, seen // 10)), without the calls
        if half > cfg.max_window:
            half = cfg.max_window
        if half < self.min_half:
            half = self.min_half
        if len(self.values) < 2 * half or self.seen % max(1, half // 10):
            return HOLD
        values = list(self.values)[-2 * half :]
        latest = sorted(values[half:])
        now = median_of_sorted(latest)
        before = self.medians.get((self.seen - half, half))
        if before is None:
            before = median_of_sorted(sorted(values[:half]))
        self.medians[(self.seen, half)] = now
        if len(self.medians) > 64:  # only the last dozen checks can be a later check's earlier half
            for key in list(self.medians)[:32]:
                del self.medians[key]
        while self.checks and self.checks[0][0] <= self.seen - half:  # no longer overlaps the current window
            _, at, old = self.checks.popleft()
            if self.best is None or old < self.best[1]:
                self.best = (at, old)
        self.checks.append((self.seen, step, now))
        best = self.best
        if best is None or now < best[1] - cfg.min_rel_improvement * abs(best[1]):
            self.flat = 0
            return None
        # a median of n points wobbles by about 1.25 sigma / sqrt(n): worse than the window before by more
        # than that noise is a rise, which is loss_spike's to judge, not a plateau
        sigma = MAD_TO_SIGMA * median_of_sorted(deviations_sorted(latest, now))
        noise = 1.25 * sigma * math.sqrt(2 / half)
        if now - before > cfg.noise_sigmas * noise:
            self.flat = 0
            return HOLD
        self.flat += 1
        if self.flat < cfg.hold_checks:
            return HOLD
        if facts.episode_open("no_learning", self.metric) or facts.episode_open("loss_spike", self.metric):
            return HOLD  # a loss that does not move at all is no_learning; one recovering from a spike is not flat
        lr_fraction = facts.lr_fraction()
        if lr_fraction is not None and lr_fraction < cfg.end_lr_fraction:
            return HOLD  # flat at the end of a decayed schedule is convergence, not a plateau
        steps = self.steps
        since = steps[len(steps) - half]
        val_best = facts.val_best_step()
        if val_best is not None and val_best >= steps[len(steps) - 2 * half]:
            return HOLD  # the validation loss still improves: the model still learns what matters
        return Finding(
            Severity.INFO,
            value,
            f"{self.metric} has not improved over the last {half} logged points: median {fmt(now)} from step "
            f"{since} to {step}, no lower than {fmt(best[1])}, the median of the {half} points to step {best[0]}. "
            f"Likely causes: lr too low or already decayed, the model has learned what this data can teach, "
            f"a data loader repeating the same batches. Check the lr schedule and the validation loss; stop early "
            f"if the validation loss is flat too.",
            {
                "median_now": now,
                "best_median": best[1],
                "best_window_end_step": best[0],
                "window_points": half,
                "window_start_step": since,
            },
        )
