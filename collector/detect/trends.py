"""Trend rules: what a run's curves do over many points.

`val_loss_rise` (overfitting), `loss_plateau`, `no_learning` (zero gradients, a loss that does not move or
sits at ln(vocab)). Each class is fed one finite point at a time; see `collector.detect.base` for the verdict
protocol. The RL rules are in `collector.detect.rl`.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from collector.core.facts import RunFacts
from collector.core.severity import Severity
from collector.detect.base import (
    HOLD,
    MAD_TO_SIGMA,
    Action,
    Finding,
    Rule,
    Streak,
    Verdict,
    deviations_sorted,
    eval_noise,
    fmt,
    median_of_sorted,
)
from collector.detect.screens import ZeroStreakScreen
from collector.detect.screens_loss import LossPlateauScreen, NoLearningLossScreen


@dataclass(frozen=True)
class ValLossRiseRule:
    enabled: bool = True
    patience: int = 3  # evaluations in a row above the best
    big_rise: float = 0.5  # ...or this much above it (relative)...
    big_patience: int = 2  # ...for this many evaluations (a loss that nearly doubles after the first one)
    noise_sigmas: float = 2.0  # and above the best by this many sigmas of the evaluations' own wobble
    noise_evals: int = (
        1000  # (`base.eval_noise` of the last this-many evaluations: all of a run's, as the advice)
    )
    min_delta: float = 0.01  # relative: an evaluation within 1 % of the best is not "above" it
    train_window: int = 5  # train-loss points averaged at each evaluation to tell whether it still falls
    # an error once it lasts (2x patience evaluations), is large (relative) and far beyond the evals' wobble
    error_patience: int = 6
    error_rise: float = 0.2
    error_noise_sigmas: float = 4.0


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


@dataclass(frozen=True)
class NoLearningRule:
    enabled: bool = True
    zero_grad: float = 1e-8  # grad_norm at or below this is zero
    for_points: int = 10
    flat_rel: float = 1e-6  # loss moving less than this (relative) over `for_points` points is stuck
    ln_vocab_rel: float = 0.02  # loss within 2 % of ln(vocab size) = uniform prediction
    ln_vocab_after: int = 20  # ...still after this many points
    # a loss that has fallen by this fraction from its highest has learned: flat later is a plateau or
    # convergence (a console printing 2 decimals shows a slow fall as flat), not "nothing learned"
    learned_drop: float = 0.1
    clear_after: int = 3


class ValLossRise(Rule):
    """Validation loss above its best for `patience` evaluations in a row: overfitting while the training loss
    still falls, a divergence when it rose too (said here either way)."""

    rule_id = "val_loss_rise"
    roles = ("val_loss",)
    settings = ValLossRiseRule
    severities = (Severity.INFO, Severity.WARN, Severity.ERROR)
    action = Action.KEEP_CHECKPOINT
    meaning = "the validation loss had risen above its best there"
    clear_after = 1  # one evaluation back near the best ends the episode

    def __init__(self, metric: str, cfg: ValLossRiseRule) -> None:
        self.metric, self.cfg = metric, cfg
        self.best: float | None = None
        self.best_step = 0
        self.train_at_best: float | None = None
        self.worse: deque[tuple[int, float]] = deque(maxlen=8)  # the latest evaluations above the best
        self.above = 0  # evaluations in a row above the best
        self.first_above = 0
        self.history: deque[float] = deque(maxlen=max(3, cfg.noise_evals))

    def rewind(self, step: int) -> None:
        while self.worse and self.worse[-1][0] >= step:
            self.worse.pop()
            self.above -= 1

    def feed(self, step: int, value: float, facts: RunFacts) -> Verdict:
        if facts.is_rl:
            return HOLD  # an RL run's eval "loss" is its policy objective, not a likelihood
        train_now = facts.train_loss_level()
        self.history.append(value)
        if self.best is None or value < self.best:
            self.best, self.best_step, self.train_at_best = value, step, train_now
            self.worse.clear()
            self.above = 0
            return None
        if value <= self.best + self.cfg.min_delta * abs(self.best):
            self.worse.clear()
            self.above = 0
            return None
        if self.above == 0:
            self.first_above = step
        self.worse.append((step, value))
        self.above += 1
        big = self.best > 0 and all(v >= (1 + self.cfg.big_rise) * self.best for _, v in self.worse)
        if self.above < (self.cfg.big_patience if big else self.cfg.patience):
            return HOLD
        # the noise model: evaluations wobble (a small eval set); a rise within that wobble is not a turn
        wobble = eval_noise(list(self.history), fewest=5)  # fewer: a jump is no noise
        if value - self.best < self.cfg.noise_sigmas * wobble:
            return HOLD
        train_falls = train_now is None or self.train_at_best is None or train_now < self.train_at_best
        rise = (value - self.best) / abs(self.best) if self.best else float("inf")
        train_text = (
            f"while the training loss fell from {fmt(self.train_at_best)} to {fmt(train_now)}"
            if train_now is not None and self.train_at_best is not None
            else "(no training loss to compare)"
        )
        # a validation rise is never silenced: with the training loss rising too it is a divergence, said here
        # (the training loss's own rule may not call it: a loss that jumps and stays is no spike)
        what = "the model is overfitting"
        if not train_falls:
            train_text = f"and the training loss rose too, from {fmt(self.train_at_best)} to {fmt(train_now)}"
            what = "the run is diverging, not overfitting (lr too high, a bad update, a broken data shard)"
        # one voice with the checkpoint advice: a run that picks checkpoints by another metric still at its
        # best keeps that choice, and this rise is a notice
        chosen = facts.chosen_metric_at_best()
        best_metric = facts.settings.get("best_metric")
        by_this = best_metric is not None and math.isclose(best_metric, self.best, rel_tol=1e-6)
        if (
            train_falls
            and chosen is not None
            and chosen[0] != self.metric
            and chosen[1] > self.best_step
            and not by_this
        ):
            severity = Severity.INFO
            keep = (
                f"The run picks checkpoints by {chosen[0]}, which is at its best at step {chosen[1]}: that "
                f"checkpoint stays the one to keep (it differs because it is chosen by {chosen[0]}, not "
                f"{self.metric}); watch {chosen[0]} for a turn."
            )
        else:
            severity = Severity.WARN
            keep = (
                f"Keep the checkpoint nearest step {self.best_step}; consider stopping, more data, fewer epochs, "
                f"a lower lr or more regularisation (dropout, weight decay, LoRA rank)."
                if train_falls
                else f"Keep the checkpoint nearest step {self.best_step}; stop the run and resume from it with a "
                f"lower lr."
            )
            # lasting, large and far beyond the evaluations' wobble: every further step makes it worse
            if (
                self.above >= self.cfg.error_patience
                and rise > self.cfg.error_rise
                and value - self.best > self.cfg.error_noise_sigmas * wobble
            ):
                severity = Severity.ERROR
                keep = (
                    f"It has lasted {self.above} evaluations ({step - self.first_above} steps), far beyond the "
                    f"evaluations' own wobble. {keep}"
                )
        return Finding(
            severity,
            value,
            f"{self.metric} has been above its best {fmt(self.best)} (step {self.best_step}) for "
            f"{self.above} evaluations, now {fmt(value)} at step {step} (+{rise:.1%}) {train_text}: {what}. "
            f"{keep}",
            {
                "best_step": self.best_step,
                "best_value": self.best,
                "evaluations_above": self.above,
                "train_loss_at_best": self.train_at_best,
                "train_loss_now": train_now,
                "values": [[s, v] for s, v in self.worse],
            },
            first_step=self.first_above,
        )


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


class ZeroStreak(Rule):
    """A rule that fires once a value has sat at (about) zero for enough points in a row."""

    def __init__(self, metric: str, cfg) -> None:
        self.metric, self.cfg = metric, cfg
        self.clear_after = cfg.clear_after
        self.zeros = Streak()

    def rewind(self, step: int) -> None:
        self.zeros.reset()

    def is_zero(self, value: float) -> bool:
        raise NotImplementedError

    def points_needed(self) -> int:
        raise NotImplementedError

    def finding(self, value: float, points: int, since: int) -> Finding:
        raise NotImplementedError

    def feed(self, step: int, value: float, facts: RunFacts) -> Verdict:
        if not self.is_zero(value):
            self.zeros.reset()
            return None
        points = self.zeros.hit(step)
        if points < self.points_needed():
            return HOLD
        return self.finding(value, points, self.zeros.since)


class NoLearningGrad(ZeroStreak):
    """grad_norm at (or within a hair of) zero for `for_points` points in a row."""

    rule_id = "no_learning"
    roles = ("grad_norm",)
    settings = NoLearningRule
    severities = (Severity.WARN, Severity.ERROR)
    screen = ZeroStreakScreen("zero_grad", absolute=True)
    meaning = "nothing was being learned there"
    caused_by = ("reward_collapse",)  # incidents: an RL reward with no spread gives zero gradients
    one_alert_across_metrics = True  # findings on several metrics from one step are one alert

    def is_zero(self, value: float) -> bool:
        return not abs(value) > self.cfg.zero_grad  # written so, a NaN counts as before

    def points_needed(self) -> int:
        return self.cfg.for_points

    rl = False  # an RL run: zero gradients are most often the reward's doing

    def feed(self, step: int, value: float, facts: RunFacts) -> Verdict:
        self.rl = facts.is_rl
        return super().feed(step, value, facts)

    def finding(self, value: float, points: int, since: int) -> Finding:
        if self.rl:
            # a GRPO/PPO group whose rewards are all equal has zero advantages, so zero gradients: the reward's
            # trouble (reward_collapse says it as the error), not frozen weights
            return Finding(
                Severity.WARN,
                value,
                f"{self.metric} = {fmt(value)} for {points} logged points in a row (since step {since}): the policy "
                f"is not being updated. In an RL run this is most often the reward: every response in each group "
                f"got the same reward (zero spread: all right or all wrong), so the advantages, and with them the "
                f"gradients, are zero; check the reward's spread (reward_std, critic/score) and the reward "
                f"function. Only if the rewards still vary: no trainable parameters or a detached loss.",
                {"zero_threshold": self.cfg.zero_grad, "points": points, "since_step": since, "rl": True},
                first_step=since,
            )
        return Finding(
            Severity.ERROR,
            value,
            f"{self.metric} = {fmt(value)} for {points} logged points in a row (since step {since}): "
            f"nothing is being learned. Likely causes: no trainable parameters (LoRA adapters not attached, all "
            f"weights frozen), the loss detached from the graph, every label masked. Check the count of trainable "
            f"parameters and the labels of one batch.",
            {"zero_threshold": self.cfg.zero_grad, "points": points, "since_step": since},
            first_step=since,
        )


class NoLearningLoss(Rule):
    """A training loss that does not move at all, or sits at ln(vocab size) (uniform guessing)."""

    rule_id = "no_learning"
    roles = ("loss",)
    settings = NoLearningRule
    severities = (Severity.ERROR,)
    screen = NoLearningLossScreen()
    meaning = NoLearningGrad.meaning
    caused_by = ("reward_collapse",)  # incidents: an RL reward with no spread gives zero gradients
    one_alert_across_metrics = True  # findings on several metrics from one step are one alert

    def __init__(self, metric: str, cfg: NoLearningRule) -> None:
        self.metric, self.cfg = metric, cfg
        self.clear_after = cfg.clear_after
        self.recent: deque[float] = deque(maxlen=max(2, cfg.for_points))
        self.recent_steps: deque[int] = deque(maxlen=max(2, cfg.for_points))
        self.at_uniform = 0
        self.uniform_since = 0
        self.flat_points = 0  # points in a row the loss has not moved
        self.flat_since = 0
        self.highest = 0.0  # the highest loss seen: one flat far below it has converged

    def rewind(self, step: int) -> None:
        self.recent.clear()
        self.recent_steps.clear()
        self.at_uniform = self.flat_points = 0

    def feed(self, step: int, value: float, facts: RunFacts) -> Verdict:
        if facts.is_rl:
            return HOLD
        cfg = self.cfg
        self.recent.append(value)
        self.recent_steps.append(step)
        vocab = facts.settings.get("vocab_size")
        if vocab and vocab > 1:
            uniform = math.log(vocab)
            if abs(value - uniform) <= cfg.ln_vocab_rel * uniform:
                self.uniform_since = step if self.at_uniform == 0 else self.uniform_since
                self.at_uniform += 1
            else:
                self.at_uniform = 0
            if self.at_uniform >= cfg.ln_vocab_after:
                return Finding(
                    Severity.ERROR,
                    value,
                    f"{self.metric} = {fmt(value)} at step {step}, stuck at ln(vocab size {vocab}) = {fmt(uniform)} "
                    f"for {self.at_uniform} points: the model predicts every token as equally likely. Likely causes: "
                    f"pretrained weights not loaded (random init), lr zero, labels shuffled against inputs. Check "
                    f"the model path and the load messages at start-up.",
                    {"ln_vocab": uniform, "vocab_size": vocab, "points": self.at_uniform},
                    first_step=self.uniform_since,
                )
        values = self.recent
        self.highest = max(self.highest, value)
        if len(values) < values.maxlen:
            return HOLD
        if self.highest > 0 and value < (1 - cfg.learned_drop) * self.highest:
            self.flat_points = 0
            return (
                HOLD  # it fell from where it started: learning happened (overfitting is val_loss_rise's job)
            )
        # a step bigger than this already makes the window's spread exceed what "flat" allows (flat_rel at
        # most 0.25): no need to scan the window
        rel = cfg.flat_rel
        if rel <= 0.25 and abs(value - values[-2]) > 2 * rel * (abs(value) + 1e-12):
            self.flat_points = 0
            return None
        spread = max(values) - min(values)
        if spread > cfg.flat_rel * max(abs(sum(values) / len(values)), 1e-12):
            self.flat_points = 0
            return None
        if self.flat_points == 0:
            self.flat_since, self.flat_points = self.recent_steps[0], len(values)
        else:
            self.flat_points += 1
        zero = (
            "; a loss of exactly 0 usually means every label is masked (-100) or the loss is not computed"
            if value == 0
            else ""
        )
        return Finding(
            Severity.ERROR,
            value,
            f"{self.metric} has not moved from {fmt(value)} for {self.flat_points} logged points (steps "
            f"{self.flat_since}-{step}){zero}. "
            f"Nothing is being learned. Check that the loss is connected to trainable parameters, the labels of "
            f"one batch, and the lr.",
            {"spread": spread, "points": self.flat_points},
            first_step=self.flat_since,
        )
