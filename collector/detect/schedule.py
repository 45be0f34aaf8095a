"""`lr_anomaly`: a learning rate at or below zero after warmup, or off the cosine curve the config asks for.

Also `run_facts(run_info)`: the few run settings the rules need (total steps, warmup, scheduler, base lr,
vocab size, save and eval frequency), found by key name anywhere in a nested run.json / trainer_state info.
"""

from __future__ import annotations

import math

from collector.detect.base import HOLD, Finding, fmt
from collector.detect.config import LrAnomalyRule

# fact -> key names that carry it (verl run.json, HF TrainingArguments / trainer_state, generic)
_FACT_KEYS: dict[str, tuple[str, ...]] = {
    "total_steps": ("total_training_steps", "total_steps", "max_steps"),
    "warmup_steps": ("lr_warmup_steps", "warmup_steps", "num_warmup_steps"),
    "warmup_ratio": ("lr_warmup_steps_ratio", "warmup_ratio"),
    "scheduler": ("lr_scheduler_type", "lr_scheduler", "warmup_style", "scheduler"),
    "base_lr": ("lr", "learning_rate"),
    "min_lr_ratio": ("min_lr_ratio",),
    "vocab_size": ("vocab_size",),
    "save_freq": ("save_freq", "save_steps"),
    "test_freq": ("test_freq", "eval_steps"),
    "logging_steps": ("logging_steps",),
    "metric_for_best_model": ("metric_for_best_model",),
    "greater_is_better": ("greater_is_better",),
}


_INT_FACTS = ("total_steps", "warmup_steps", "vocab_size", "save_freq", "test_freq", "logging_steps")
_FLOAT_FACTS = ("base_lr", "warmup_ratio", "min_lr_ratio")


def run_facts(run_info: dict | None) -> dict:
    """The settings rules use, by fact name; each from the shallowest key that carries a usable value (verl's
    config holds placeholders such as `optim.total_training_steps: -1` beside the real one); absent when unknown.
    """
    found: dict[str, tuple[int, object]] = {}
    wanted = {key: fact for fact, keys in _FACT_KEYS.items() for key in keys}

    def walk(node: object, depth: int) -> None:
        if depth > 6 or not isinstance(node, dict):
            return
        for key, value in node.items():
            fact = wanted.get(str(key).lower())
            if fact is not None:
                usable = _usable(fact, value)
                if usable is not None and (fact not in found or depth < found[fact][0]):
                    found[fact] = (depth, usable)
            if isinstance(value, dict):
                walk(value, depth + 1)

    walk(run_info or {}, 0)
    facts = {fact: value for fact, (_, value) in found.items()}
    if "warmup_steps" not in facts and "warmup_ratio" in facts and "total_steps" in facts:
        facts["warmup_steps"] = int(facts["warmup_ratio"] * facts["total_steps"])
    return facts


def _usable(fact: str, value: object) -> object:
    if fact in _INT_FACTS:
        return _positive_int(value)
    if fact in _FLOAT_FACTS:
        ok = (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and value >= 0
        )
        return float(value) if ok else None
    if value is None or isinstance(value, dict | list):
        return None
    return str(value).lower() if fact == "scheduler" else value


def _positive_int(value: object) -> int | None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        return None
    return int(value)


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


class LrAnomaly:
    """lr <= 0 after warmup (and before the schedule's end), or off the configured schedule (warmup included)."""

    rule_id = "lr_anomaly"

    def __init__(self, metric: str, cfg: LrAnomalyRule) -> None:
        self.metric, self.cfg = metric, cfg
        self.clear_after = cfg.clear_after
        self.peak = 0.0
        self.zeros = 0
        self.off_curve = 0

    def rewind(self, step: int) -> None:
        self.zeros = self.off_curve = 0

    def feed(self, step: int, value: float, run: object) -> Finding | None | object:
        cfg = self.cfg
        facts = run.facts if hasattr(run, "facts") else {}
        total = facts.get("total_steps")
        warmup = facts.get("warmup_steps", 0)
        near_end = total is not None and step >= total * (1 - cfg.end_fraction)
        if value < 0:
            return Finding(
                "error",
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
                    "error",
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
            "warn",
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
