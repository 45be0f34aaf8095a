"""`lr_anomaly`: a learning rate at or below zero after warmup, or off the cosine curve the config asks for; its
backlog screen (`LrAnomalyScreen`) is beside it."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from collector.core.facts import RunFacts
from collector.core.severity import Severity
from collector.detect.base import HOLD, Finding, Rule, Verdict, fmt
from collector.detect.screening import Screen, first


@dataclass(frozen=True)
class LrAnomalyRule:
    enabled: bool = True
    end_fraction: float = 0.02  # lr reaching zero in the last 2 % of the run is a schedule ending
    zero_for: int = 3  # points of lr <= 0 before alerting when the run length is unknown
    cosine_tolerance: float = (
        0.25  # off the configured curve (cosine, linear, constant) by over 25 % of the base lr
    )
    cosine_for: int = 3
    rise_tolerance: float = 0.02  # lr rising more than 2 % above its peak after warmup
    clear_after: int = 3


def expected_lr(
    scheduler: str, step: int, base: float | None, min_lr_ratio: float, warmup: int, total: int | None
) -> float | None:
    """The lr a linear warmup then `scheduler` ("cosine", "linear" or "constant") gives at `step`; None when
    the schedule or the numbers it needs are unknown."""
    if base is None or total is None or total <= warmup:
        return None
    if warmup and step <= warmup:
        return base * step / warmup
    progress = min(1.0, (step - warmup) / (total - warmup))
    min_lr = base * min_lr_ratio
    if "cosine" in scheduler:
        return min_lr + (base - min_lr) * 0.5 * (1 + math.cos(math.pi * progress))
    if "linear" in scheduler:
        return min_lr + (base - min_lr) * (1 - progress)
    if "constant" in scheduler:
        return base
    return None


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


class LrAnomaly(Rule):
    """lr <= 0 after warmup (and before the schedule's end), or off the configured schedule (warmup included)."""

    rule_id = "lr_anomaly"
    roles = ("lr",)
    settings = LrAnomalyRule
    severities = (Severity.WARN, Severity.ERROR)
    screen = LrAnomalyScreen()
    meaning = "the learning rate was off its schedule there"

    def __init__(self, metric: str, cfg: LrAnomalyRule) -> None:
        self.metric, self.cfg = metric, cfg
        self.clear_after = cfg.clear_after
        self.peak = 0.0
        self.zeros = 0
        self.off_curve = 0

    def rewind(self, step: int) -> None:
        self.zeros = self.off_curve = 0

    def feed(self, step: int, value: float, facts: RunFacts) -> Verdict:
        cfg = self.cfg
        facts = facts.settings
        total = facts.get("total_steps")
        warmup = facts.get("warmup_steps", 0)
        near_end = total is not None and step >= total * (1 - cfg.end_fraction)
        if value < 0:
            return Finding(
                Severity.ERROR,
                value,
                f"{self.metric} = {fmt(value)} at step {step}: a negative learning rate makes the optimizer climb "
                f"the loss. Check the scheduler settings (min lr, decay steps longer than the run).",
                {"peak": self.peak},
            )
        if value == 0:
            self.zeros += 1
            started = self.peak > 0 or (warmup and step > warmup)
            if started and not near_end and self.zeros >= cfg.zero_for:
                return Finding(
                    Severity.ERROR,
                    value,
                    f"{self.metric} is 0 at step {step} ({self.zeros} points in a row) after reaching "
                    f"{fmt(self.peak)}, before the end of the run{f' at step {total}' if total else ''}: the weights "
                    f"stop changing. Likely causes: a decay schedule shorter than the run, a scheduler stepped too "
                    f"often (per micro-batch), fp16 overflow skipping every step. Check total/decay steps and the scheduler.",
                    {"peak": self.peak, "total_steps": total, "points": self.zeros},
                )
            return HOLD
        self.zeros = 0
        self.peak = max(self.peak, value)
        base = facts.get("base_lr") or (self.peak if step > warmup else None)
        expected = expected_lr(
            facts.get("scheduler", ""), step, base, facts.get("min_lr_ratio", 0.0), warmup, total
        )
        if expected is None or base is None:
            return None
        if abs(value - expected) <= cfg.cosine_tolerance * base:
            self.off_curve = 0
            return None
        self.off_curve += 1
        if self.off_curve < cfg.cosine_for:
            return HOLD
        return Finding(
            Severity.WARN,
            value,
            f"{self.metric} = {fmt(value)} at step {step}, but the config's {facts.get('scheduler')} schedule (base "
            f"{fmt(base)}, warmup {warmup} steps, {total} steps) expects {fmt(expected)}. Likely causes: the scheduler is not the one "
            f"configured, total steps differ from the real run length, a resume restored another scheduler state. "
            f"Check the scheduler type and total steps in the resolved config.",
            {
                "expected": expected,
                "base_lr": base,
                "warmup_steps": warmup,
                "total_steps": total,
                "points": self.off_curve,
            },
        )
