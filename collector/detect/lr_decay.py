"""`lr_not_decaying`: the run's config asks for a decaying lr schedule (cosine, linear, polynomial, inverse
square root, exponential), yet the lr has stayed flat at its peak for a long stretch well past warm-up: the
scheduler is most likely not stepping. A notice; `lr_anomaly` judges a run whose length is known against its
whole curve, so this rule speaks only while the run's total steps are unknown. See `collector.detect.base` for
the verdict protocol; its backlog screen (`LrNotDecayingScreen`) is beside it.
"""

from __future__ import annotations

from dataclasses import dataclass

from collector.core.facts import RunFacts
from collector.core.severity import Severity
from collector.detect.base import Finding, Rule, Verdict, fmt
from collector.detect.screening import Screen, ScreenContext

_DECAYING = ("cosine", "linear", "poly", "inverse_sqrt", "exponential")
_STEADY = ("constant", "wsd", "plateau")  # constant_with_warmup, warmup-stable-decay, reduce_lr_on_plateau


@dataclass(frozen=True)
class LrNotDecayingRule:
    enabled: bool = True
    # within 0.1 % of its peak is "at its peak": a scheduler that is not stepped leaves the lr exactly where
    # it was, while a cosine falls 0.1 % in its first 2 % (a linear one in its first 0.1 %)
    flat_rel: float = 0.001
    min_points: int = 50  # logged lr points past warm-up, all at the peak, before it speaks...
    min_steps: int = 1000  # ...over at least this many steps past the end of warm-up...
    # ...and this many times the warm-up: a cosine of unknown length is told from a stuck one unless its run is
    # over 50x `min_steps` and 500x its warm-up (then this notice may come early: it says what to check)
    warmup_multiple: float = 10.0
    clear_after: int = 1  # one point below the peak: the schedule is decaying after all


def decays(facts: RunFacts) -> bool:
    """Whether the run's config asks for a decaying schedule and its length is unknown (this rule's case)."""
    scheduler = str(facts.settings.get("scheduler") or "")
    if facts.settings.get("total_steps") or any(word in scheduler for word in _STEADY):
        return False
    return any(word in scheduler for word in _DECAYING)


class LrNotDecayingScreen(Screen):
    """Quiet: every point of a run this rule does not judge (no decaying schedule, or a known length)."""

    def quiet(self, rule: LrNotDecaying, steps, values, ctx: ScreenContext) -> int:
        return 0 if decays(ctx.facts) else len(values)

    def advance(self, rule: LrNotDecaying, steps, values, ctx: ScreenContext) -> None:
        pass  # the rule ignores those points: nothing changes


class LrNotDecaying(Rule):
    """The lr flat at its peak for `min_points` points and `max(min_steps, warmup_multiple x warmup)` steps
    past warm-up while the config's scheduler decays (and the run's length is unknown)."""

    rule_id = "lr_not_decaying"
    roles = ("lr",)
    settings = LrNotDecayingRule
    severities = (Severity.INFO,)
    meaning = "the learning rate was not decaying as the config's schedule asks there"
    screen = LrNotDecayingScreen()

    def __init__(self, metric: str, cfg: LrNotDecayingRule) -> None:
        self.metric, self.cfg = metric, cfg
        self.clear_after = cfg.clear_after
        self.rewind(0)

    def rewind(self, step: int) -> None:
        self.peak = 0.0
        self.level = 0.0  # the lr where the flat stretch began (a slow warm-up rises past it: a new stretch)
        self.since: int | None = None  # the first step of the flat stretch at the peak
        self.points = 0  # flat points past warm-up
        self.decayed = False  # the lr has fallen below its peak once: the schedule decays

    def feed(self, step: int, value: float, facts: RunFacts) -> Verdict:
        if self.decayed or not decays(facts):
            return None
        cfg = self.cfg
        if value <= 0:
            return None  # a zero or negative lr is lr_anomaly's
        if self.since is None or value > self.level * (1 + cfg.flat_rel):
            self.level, self.since, self.points = value, step, 0  # still warming up: the stretch starts here
            self.peak = max(self.peak, value)
            return None
        self.peak = max(self.peak, value)
        if value < self.peak * (1 - cfg.flat_rel):
            self.decayed = True
            return None
        warmup = int(facts.settings.get("warmup_steps") or 0)
        if step <= warmup:
            return None
        self.points += 1
        start = max(self.since, warmup)
        needed = max(cfg.min_steps, int(cfg.warmup_multiple * warmup))
        if self.points < cfg.min_points or step - start < needed:
            return None
        scheduler = facts.settings.get("scheduler")
        return Finding(
            Severity.INFO,
            value,
            f"{self.metric} has stayed at its peak {fmt(self.peak)} for {self.points} logged points (steps "
            f"{start}-{step}{f', warm-up ended at step {warmup}' if warmup else ''}), but the config asks for a "
            f"{scheduler} schedule, which decays after warm-up. Likely causes: the scheduler is not stepped "
            f"(scheduler.step() missing, or called on another optimizer), a resume restored a constant scheduler, "
            f"the scheduler in use is not the configured one. Check the resolved config and that the scheduler "
            f"steps once per optimizer step.",
            {"peak": self.peak, "scheduler": scheduler, "warmup_steps": warmup, "points": self.points},
            first_step=start,
        )
