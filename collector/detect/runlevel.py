"""Rules that need no window: a non-finite value (`nonfinite`) and a run gone silent (`stalled`)."""

from __future__ import annotations

from collector.core.severity import Severity
from collector.detect.base import Finding, fmt
from collector.detect.config import StalledRule

NONFINITE = "nonfinite"
STALLED = "stalled"
# rules without a per-metric window whose episodes make a checkpoint saved inside them unsafe to keep
UNSAFE_RUN_LEVEL_RULES = frozenset({NONFINITE})


def nonfinite_finding(metric: str, step: int, value: float) -> Finding:
    """NaN or Inf in any metric: always an error."""
    return Finding(
        Severity.ERROR,
        value,
        f"{metric} is {fmt(value)} at step {step}. Likely causes: fp16 overflow (with a dynamic loss scaler a "
        f"few at the start are skipped steps; more mean the scale collapsed), lr too high, a bad batch "
        f"(empty sequence, all labels masked), division by zero in a custom loss. Check the loss and the loss "
        f"scale around this step; switch to bf16 or lower the lr if it repeats.",
        {"value": str(value)},
    )


def stall_finding(
    cfg: StalledRule, silence: float, usual: float | None, pause_expected: bool, last_step: int | None
) -> Finding | None:
    """A finding when a running run has been silent for `silence` seconds, far longer than `usual` seconds
    between points (`pause_expected`: the last step saves or validates, so a long pause is normal)."""
    limit = max(cfg.min_seconds, cfg.factor * usual) if usual else cfg.default_seconds
    if usual and pause_expected:
        limit *= cfg.save_factor
    if silence <= limit:
        return None
    severity = Severity.ERROR if silence > cfg.error_factor * limit else Severity.WARN
    usual_text = f"the usual {fmt(usual)} s between points" if usual else "no known step interval"
    return Finding(
        severity,
        silence,
        f"The status says running, but no new point for {silence / 60:.1f} min (limit {limit / 60:.1f} min, "
        f"{usual_text}); last step {last_step}. Likely causes: a hung collective (NCCL/gloo), a dead data "
        f"loader, a full disk, a killed process that left its status file. Check the process (py-spy dump), "
        f"its log tail and free disk space.",
        {"silence_s": silence, "limit_s": limit, "usual_interval_s": usual, "last_step": last_step},
    )
