"""Trend rules: what a run's curves do over many points.

`val_loss_rise` (overfitting) and `no_learning` (zero gradients, a loss that does not move or sits at
ln(vocab)), each with its backlog screen before it (`val_loss_rise` has none: its evaluations are few, fed in
full). `loss_plateau` is in `collector.detect.loss_plateau`, the RL rules in `collector.detect.rl`. Each class
is fed one finite point at a time; see `collector.detect.base` for the verdict protocol.
"""

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
    Streak,
    Verdict,
    eval_noise,
    fmt,
)
from collector.detect.screening import Screen, first, floats


@dataclass(frozen=True)
class ValLossRiseRule:
    enabled: bool = True
    patience: int = 3  # evaluations in a row above the best
    big_rise: float = 0.5  # ...or this much above it (relative)...
    big_patience: int = 2  # ...for this many evaluations (a loss that nearly doubles after the first one)
    noise_sigmas: float = 2.0  # and above the best by this many sigmas of the evaluations' own wobble
    noise_evals: int = 1000  # `base.eval_noise` over this many last evaluations: all, as the advice
    min_delta: float = 0.01  # relative: an evaluation within 1 % of the best is not "above" it
    train_window: int = 5  # train-loss points averaged at each evaluation to tell whether it still falls
    # an error once it lasts (2x patience evaluations), is large (relative) and far beyond the evals' wobble
    error_patience: int = 6
    error_rise: float = 0.2
    error_noise_sigmas: float = 4.0


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
    # ...unless it fell to exactly 0 from above this: a trained loss reaches 0 (at the log's rounding) only by
    # getting small first; one that jumps there is a NaN filter's 0 or masked labels, and nothing is learned
    zero_jump_from: float = 0.01
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

    def finding(self, value: float, points: int, since: int, facts: RunFacts) -> Finding:
        raise NotImplementedError

    def feed(self, step: int, value: float, facts: RunFacts) -> Verdict:
        if not self.is_zero(value):
            self.zeros.reset()
            return None
        points = self.zeros.hit(step)
        if points < self.points_needed():
            return HOLD
        return self.finding(value, points, self.zeros.since, facts)


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

    def finding(self, value: float, points: int, since: int, facts: RunFacts) -> Finding:
        if facts.is_rl:  # an RL run: zero gradients are most often the reward's doing
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
        nonzero = np.where(values != 0, np.abs(values), np.inf)
        lowest = np.minimum(rule.lowest_nonzero, np.minimum.accumulate(nonzero))
        jumped_to_zero = (windows == 0).all(axis=1) & (lowest > cfg.zero_jump_from)
        hot |= (~dropped | jumped_to_zero) & (spread <= bound)
        return first(hot)

    def advance(self, rule, steps, values, ctx) -> None:
        if ctx.facts.is_rl or not len(values):
            return
        size = rule.recent.maxlen
        rule.recent.extend(values[-size:].tolist())
        rule.recent_steps.extend(steps[-size:].tolist())
        rule.highest = max(rule.highest, float(values.max()))
        nonzero = np.abs(values[values != 0])
        if len(nonzero):
            rule.lowest_nonzero = min(rule.lowest_nonzero, float(nonzero.min()))
        vocab = ctx.facts.settings.get("vocab_size")
        if vocab and vocab > 1:
            rule.at_uniform = 0
        rule.flat_points = 0


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
        self.lowest_nonzero = (
            math.inf
        )  # ...unless it is exactly 0 and never came near 0 before (zero_jump_from)

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
        if value != 0:
            self.lowest_nonzero = min(self.lowest_nonzero, abs(value))
        if len(values) < values.maxlen:
            return HOLD
        jumped_to_zero = self.lowest_nonzero > cfg.zero_jump_from and not any(values)
        if jumped_to_zero and facts.rule_open("nonfinite"):
            return HOLD  # NaN gradients beside it: the nonfinite alert says the 0 is the NaN filter's
        if self.highest > 0 and value < (1 - cfg.learned_drop) * self.highest and not jumped_to_zero:
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
            f"; it jumped to exactly 0 (its lowest value before was {fmt(self.lowest_nonzero)}), which a loss "
            f"that is learning never does: a trainer's NaN filter logs a window of only NaN/inf losses as 0 (HF's "
            f"logging_nan_inf_filter, on by default), or every label is masked (-100) or the loss is not "
            f"computed. If it is the filter, the weights are NaN: restart from a checkpoint saved before step "
            f"{self.flat_since} with a lower lr"
            if jumped_to_zero and math.isfinite(self.lowest_nonzero)
            else "; a loss of exactly 0 usually means every label is masked (-100) or the loss is not computed"
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
