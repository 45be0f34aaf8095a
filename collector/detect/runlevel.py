"""Rules that need no window: a non-finite value (`nonfinite`) and a run gone silent (`stalled`)."""

from __future__ import annotations

from collector.core.severity import Severity
from collector.detect.base import Finding, fmt
from collector.detect.config import NonfiniteRule, StalledRule

NONFINITE = "nonfinite"
STALLED = "stalled"
# rules without a per-metric window whose episodes make a checkpoint saved inside them unsafe to keep
UNSAFE_RUN_LEVEL_RULES = frozenset({NONFINITE})


def nonfinite_finding(
    metric: str, step: int, value: float, cfg: NonfiniteRule, role: str | None, rl: bool = False
) -> Finding:
    """NaN or Inf in a metric: an error, except a gradient norm's, which alone is a step the loss scaler
    skipped (a notice that becomes a warning, then an error, as they add up in one episode)."""
    if role == "grad_norm":
        return Finding(
            Severity.INFO,
            value,
            f"{metric} is {fmt(value)} at step {step}: with fp16 and a dynamic loss scaler the optimizer skips "
            f"this step and lowers the scale (normal, a few times at the start). Many in a row mean the scale "
            f"collapsed: switch to bf16 or lower the lr.",
            {"value": str(value), "kind": "skipped_step"},
            warn_after_points=cfg.grad_warn_after,
            error_after_points=cfg.grad_error_after,
        )
    if rl:
        return Finding(
            Severity.ERROR,
            value,
            f"{metric} is {fmt(value)} at step {step} (an RL run). Likely causes: a group whose rewards are all "
            f"equal (advantages normalised by a zero std), a token whose log-probability is -inf under the new "
            f"policy (the importance ratio overflows), a reward function returning NaN, lr too high. Check the "
            f"rewards and response lengths of this step's batch and the actor's grad norm; resume from the last "
            f"good checkpoint and skip this batch if it repeats.",
            {"value": str(value)},
        )
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
