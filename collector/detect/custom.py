"""Users' own threshold rules from runwatch.toml: `metric op value` for `for_points` points in a row.

The alert's rule id is `custom:<id>`. `falling` / `rising` compare each point with the one before (a
per-epoch metric falling for 10 epochs is `op = "falling"`, `for_points = 10`).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from fnmatch import fnmatchcase

import numpy as np

from collector.core.facts import RunFacts
from collector.core.severity import Severity
from collector.detect.base import Finding, Verdict, fmt
from collector.detect.screening import Screen, first


@dataclass(frozen=True)
class CustomRule:
    """A user's threshold rule: `metric op value` for `for_points` points in a row."""

    id: str
    metric: str  # exact name or glob pattern
    op: str
    value: float = 0.0
    for_points: int = 1
    severity: str = "warn"
    message: str = ""


_OPS = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
}


def custom_matches(rule: CustomRule, metric: str) -> bool:
    """Whether a custom rule applies to a metric: exact name or glob pattern (`val/*accuracy*`)."""
    return rule.metric == metric or fnmatchcase(metric, rule.metric)


class CustomScreen(Screen):
    """Quiet: the points where the user's condition does not hold (compared as the rule compares them)."""

    def quiet(self, rule, steps, values, ctx) -> int:
        op = rule.rule.op
        if op in ("falling", "rising"):
            before = np.concatenate([[np.nan if rule.previous is None else rule.previous], values[:-1]])
            hot = values < before if op == "falling" else values > before
        else:
            hot = np.asarray(_OPS[op](values, rule.rule.value), dtype=bool)
        return first(hot)

    def advance(self, rule, steps, values, ctx) -> None:
        if len(values):
            rule.count = 0
            rule.previous = float(values[-1])


class CustomThreshold:
    """One user rule on one metric."""

    screen = CustomScreen()

    def __init__(self, metric: str, rule: CustomRule) -> None:
        self.metric, self.rule = metric, rule
        self.rule_id = f"custom:{rule.id}"
        self.clear_after = 1
        self.count = 0
        self.first = 0
        self.previous: float | None = None

    def rewind(self, step: int) -> None:
        self.count = 0
        self.previous = None

    def feed(self, step: int, value: float, facts: RunFacts) -> Verdict:
        rule = self.rule
        if rule.op == "falling":
            holds = self.previous is not None and value < self.previous
        elif rule.op == "rising":
            holds = self.previous is not None and value > self.previous
        else:
            holds = _OPS[rule.op](value, rule.value)
        self.previous = value
        if not holds:
            self.count = 0
            return None
        if self.count == 0:
            self.first = step
        self.count += 1
        if self.count < rule.for_points:
            return None
        condition = rule.op if rule.op in ("falling", "rising") else f"{rule.op} {fmt(rule.value)}"
        return Finding(
            Severity(rule.severity),
            value,
            f"{self.metric} {condition} for {self.count} points (since step {self.first}, now {fmt(value)} at step "
            f"{step}): custom rule {rule.id!r}." + (f" {rule.message}" if rule.message else ""),
            {"op": rule.op, "threshold": rule.value, "for_points": rule.for_points, "points": self.count},
            first_step=self.first,
        )
