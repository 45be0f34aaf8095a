"""`loss_above_uniform`: a language model's training loss far above ln(vocab size), the loss of a uniform guess
over the vocabulary, for several logged points in a row: the model predicts worse than guessing, so training has
diverged. A run whose loss jumped there before its first logged point (an lr far too high, from step 1) gives no
jump for `loss_spike` to see; this rule needs no baseline, only the vocabulary size (run.json's `vocab_size`,
which verl's run.json and `trainer.hf.RunwatchCallback` write). See `collector.detect.base` for the verdict
protocol; its backlog screen (`AboveUniformScreen`) is beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from collector.core.facts import RunFacts
from collector.core.severity import Severity
from collector.detect.base import HOLD, Finding, Rule, Verdict, fmt
from collector.detect.screening import Screen, ScreenContext, first


@dataclass(frozen=True)
class LossAboveUniformRule:
    enabled: bool = True
    # this many times ln(vocab): a cross-entropy in nats above ln(V) is already worse than uniform; 2x leaves
    # room for a loss logged in bits (fairseq: ln(V) / ln 2 = 1.44 ln(V) at a fresh initialisation)
    times_uniform: float = 2.0
    for_points: int = 3  # logged points in a row above it (one bad batch is loss_spike's)
    clear_after: int = 3


def threshold(facts: RunFacts, cfg: LossAboveUniformRule) -> float | None:
    """The loss above which a point counts; None when the vocabulary size is unknown (or the run is RL, whose
    "loss" is a policy loss, not a cross-entropy)."""
    vocab = facts.settings.get("vocab_size")
    if facts.is_rl or not vocab or vocab < 2:
        return None
    return cfg.times_uniform * math.log(vocab)


class AboveUniformScreen(Screen):
    """Quiet: the points at or below the threshold while no stretch above it is under way (each gives None and
    leaves the rule as it was)."""

    def ready(self, rule: LossAboveUniform, ctx: ScreenContext) -> bool:
        return rule.above == 0

    def quiet(self, rule: LossAboveUniform, steps, values, ctx: ScreenContext) -> int:
        limit = threshold(ctx.facts, rule.cfg)
        return len(values) if limit is None else first(np.asarray(values) > limit)

    def advance(self, rule: LossAboveUniform, steps, values, ctx: ScreenContext) -> None:
        pass  # below the threshold with no stretch under way: nothing changes


class LossAboveUniform(Rule):
    """The training loss above `times_uniform` x ln(vocab size) for `for_points` logged points in a row."""

    rule_id = "loss_above_uniform"
    roles = ("loss",)
    settings = LossAboveUniformRule
    severities = (Severity.ERROR,)
    unsafe_checkpoint = True
    meaning = "the training loss was above a uniform guess there: the weights had diverged"
    screen = AboveUniformScreen()

    def __init__(self, metric: str, cfg: LossAboveUniformRule) -> None:
        self.metric, self.cfg = metric, cfg
        self.clear_after = cfg.clear_after
        self.rewind(0)

    def rewind(self, step: int) -> None:
        self.above = 0  # points in a row above the threshold
        self.since = 0
        self.highest = 0.0

    def feed(self, step: int, value: float, facts: RunFacts) -> Verdict:
        limit = threshold(facts, self.cfg)
        if limit is None:
            return None
        if value <= limit:
            self.above = 0
            return None
        if self.above == 0:
            self.since, self.highest = step, value
        self.above += 1
        self.highest = max(self.highest, value)
        if self.above < self.cfg.for_points:
            return HOLD
        vocab = facts.settings["vocab_size"]
        lr = facts.settings.get("base_lr")
        told_lr = f" (this run's is {fmt(lr)})" if lr else ""
        return Finding(
            Severity.ERROR,
            value,
            f"{self.metric} = {fmt(value)} at step {step}, above {fmt(self.cfg.times_uniform)} x ln(vocab size "
            f"{vocab}) = {fmt(limit)} for {self.above} logged points since step {self.since} (highest "
            f"{fmt(self.highest)}): the model predicts worse than a uniform guess, so training diverged. Likely "
            f"causes: a learning rate far too high{told_lr}, no gradient clipping, fp16 overflow, a loss summed "
            f"over tokens instead of averaged. Stop the run; restart from a checkpoint before step {self.since} "
            f"(or from the start) with a lower learning rate and gradient clipping.",
            {"ln_vocab": math.log(vocab), "vocab_size": vocab, "points": self.above, "highest": self.highest},
            first_step=self.since,
        )
