"""The run's health checklist: a short list of pass / fail / unknown checks at start, at checkpoints, at the end.

Stable interface: `health_checklist(series, checkpoints, status, run_info, latest_marker=None, config=None)
-> list[dict]`; `config` is the run's resolved `DetectConfig` (its grad-norm normal range; None: the defaults).
`series` is keyed by role (`loss`, `val_loss`, `grad_norm`, `lr`, `step_time`; see
`collector.core.roles`) with (steps, values) in step order; `checkpoints` are the checkpoint index items
(step, path, complete, bytes[, inferred]); `status` is status.json's content (or None); `run_info` is run.json
or trainer_state info; `latest_marker` is the step in `latest_checkpointed_iteration.txt` (None when the
format has no marker). Each item: `id`, `phase` ("start" | "checkpoint" | "end"), `title`, `state`
("pass" | "fail" | "unknown"), `evidence` (one sentence with the numbers). Pure: no I/O.
"""

from __future__ import annotations

import math
from statistics import median

from collector.core.facts import run_settings
from collector.detect.base import fmt
from collector.settings.config import DetectConfig

START_STEPS = 100  # "the first 100 steps"
Series = dict[str, tuple[list[int], list[float]]]


CHECKS = {  # id -> (phase, title), in checklist order
    "start_loss_falling": ("start", "Loss falls in the first 100 steps"),
    "start_lr_warmup": ("start", "Learning rate rises during warmup"),
    "start_grad_norm_range": ("start", "grad_norm mostly within {low}-{high} in the first 100 steps"),
    "start_step_time_stable": ("start", "Time per step stable in the first 100 steps"),
    "checkpoint_val_loss": ("checkpoint", "Validation loss not rising at checkpoints"),
    "checkpoint_complete": ("checkpoint", "Every checkpoint complete (huggingface/ folder written)"),
    "checkpoint_latest_marker": (
        "checkpoint",
        "Latest-checkpoint marker points at the newest complete checkpoint",
    ),
    "end_step_count": ("end", "Step count as expected"),
    "end_final_loss": ("end", "Final loss finite and below the starting loss"),
    "end_checkpoints_saved": ("end", "A checkpoint saved at the final step"),
    "end_status_completed": ("end", "Status says completed"),
}


def _item(id_: str, state: str, evidence: str, **title_values: str) -> dict:
    phase, title = CHECKS[id_]
    title = title.format(**title_values) if title_values else title
    return {"id": id_, "phase": phase, "title": title, "state": state, "evidence": evidence}


def _first(series: Series, role: str, until: int = START_STEPS) -> tuple[list[int], list[float]]:
    steps, values = series.get(role, ([], []))
    pairs = [(s, v) for s, v in zip(steps, values, strict=False) if s <= until]
    return [s for s, _ in pairs], [v for _, v in pairs]


def _finite(values: list[float]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def health_checklist(
    series: Series,
    checkpoints: list[dict],
    status: dict | None,
    run_info: dict | None,
    latest_marker: int | None = None,
    config: DetectConfig | None = None,
) -> list[dict]:
    """The checklist items, in the order start, checkpoint, end (see the module docstring)."""
    facts = run_settings(run_info)
    grad = (config or DetectConfig()).rules.grad_spike
    return [
        _loss_falling(series),
        _lr_warmup(series, facts),
        _grad_in_range(series, grad.normal_min, grad.normal_max),
        _step_time_stable(series),
        _val_not_rising(series, checkpoints),
        _checkpoints_complete(checkpoints),
        _marker_updated(checkpoints, latest_marker),
        *_end_items(series, checkpoints, status, run_info or {}, facts),
    ]


def _loss_falling(series: Series) -> dict:
    steps, values = _first(series, "loss")
    values = _finite(values)
    if len(values) < 4:
        return _item(
            "start_loss_falling",
            "unknown",
            f"only {len(values)} finite loss point(s) in the first {START_STEPS} steps",
        )
    third = max(1, len(values) // 3)
    early, late = median(values[:third]), median(values[-third:])
    state = "pass" if late < early else "fail"
    return _item(
        "start_loss_falling",
        state,
        f"loss median {fmt(early)} over the first {third} point(s), {fmt(late)} over the last {third} (to step {steps[-1]})",
    )


def _lr_warmup(series: Series, facts: dict) -> dict:
    pairs = [(s, v) for s, v in zip(*_first(series, "lr"), strict=True) if v is not None and math.isfinite(v)]
    if len(pairs) < 2:
        return _item(
            "start_lr_warmup", "unknown", f"{len(pairs)} lr point(s) in the first {START_STEPS} steps"
        )
    steps, values = [s for s, _ in pairs], [v for _, v in pairs]
    seen = f"lr {fmt(values[0])} at step {steps[0]} -> {fmt(values[-1])} at step {steps[-1]}"
    warmup = facts.get("warmup_steps")
    if warmup:
        in_warmup = [v for s, v in pairs if s <= warmup]
        ok = len(in_warmup) < 2 or in_warmup[-1] > in_warmup[0]
        return _item("start_lr_warmup", "pass" if ok else "fail", f"{warmup} warmup steps configured; {seen}")
    peak_at = max(range(len(values)), key=lambda i: values[i])
    if peak_at > 0 and values[peak_at] > values[0]:  # warmup, then possibly decay within the first 100 steps
        peak = f"to {fmt(values[peak_at])} at step {steps[peak_at]}"
        return _item(
            "start_lr_warmup", "pass", f"no warmup length configured, but the lr rises {peak}: {seen}"
        )
    return _item("start_lr_warmup", "unknown", f"no warmup configured or seen: {seen}")


def _grad_in_range(series: Series, low: float, high: float) -> dict:
    band = {"low": fmt(low), "high": fmt(high)}
    _, values = _first(series, "grad_norm")
    if not values:
        return _item(
            "start_grad_norm_range",
            "unknown",
            "the run logs no grad_norm in its first 100 steps",
            **band,
        )
    inside = sum(1 for v in values if v is not None and low <= v <= high)
    share = inside / len(values)
    finite = _finite(values)
    spread = f"min {fmt(min(finite))}, max {fmt(max(finite))}" if finite else "no finite value"
    state = "pass" if share >= 0.8 else "fail"
    return _item(
        "start_grad_norm_range",
        state,
        f"{inside} of {len(values)} points in range ({share:.0%}); {spread}",
        **band,
    )


def _step_time_stable(series: Series) -> dict:
    _, values = _first(series, "step_time")
    values = _finite(values)
    if len(values) < 5:
        return _item(
            "start_step_time_stable",
            "unknown",
            f"{len(values)} step-time point(s) in the first {START_STEPS} steps",
        )
    rest = values[1:]  # the first step pays for compilation and warm caches
    mid = median(rest)
    steady = sum(1 for v in rest if v <= 2 * mid)
    share = steady / len(rest)
    state = "pass" if share >= 0.9 else "fail"
    return _item(
        "start_step_time_stable",
        state,
        f"median {fmt(mid)} s; {steady} of {len(rest)} steps within 2x the median (first step left out)",
    )


def _val_not_rising(series: Series, checkpoints: list[dict]) -> dict:
    steps, values = series.get("val_loss", ([], []))
    evals = [(s, v) for s, v in zip(steps, values, strict=False) if v is not None and math.isfinite(v)]
    saved = sorted(int(c["step"]) for c in checkpoints)
    if not evals or not saved:
        return _item(
            "checkpoint_val_loss",
            "unknown",
            "no validation loss" if not evals else "no checkpoints",
        )
    rose = []
    best = None
    for step in saved:
        before = [v for s, v in evals if s <= step]
        if not before:
            continue
        value = before[-1]
        if best is not None and value > best * 1.01:
            rose.append(f"step {step}: {fmt(value)} > best {fmt(best)}")
        best = value if best is None else min(best, value)
    if not rose:
        return _item(
            "checkpoint_val_loss",
            "pass",
            f"validation loss at each of {len(saved)} checkpoint(s) at or near its best so far (last {fmt(evals[-1][1])} at step {evals[-1][0]})",
        )
    return _item(
        "checkpoint_val_loss",
        "fail",
        f"{len(rose)} checkpoint(s) saved with the validation loss above its best: " + "; ".join(rose[:4]),
    )


def _checkpoints_complete(checkpoints: list[dict]) -> dict:
    if not checkpoints:
        return _item("checkpoint_complete", "unknown", "no checkpoints found")
    if all(c.get("inferred") for c in checkpoints):
        return _item(
            "checkpoint_complete",
            "unknown",
            f"{len(checkpoints)} checkpoint(s) inferred from the run's trainer_state.json "
            f"({', '.join(sorted({c.get('inferred_from') or 'its steps' for c in checkpoints}))}), none seen on disk",
        )
    broken = [int(c["step"]) for c in checkpoints if not c.get("complete")]
    if broken:
        return _item(
            "checkpoint_complete",
            "fail",
            f"incomplete: step(s) {', '.join(map(str, sorted(broken)[:8]))} of {len(checkpoints)}",
        )
    return _item("checkpoint_complete", "pass", f"all {len(checkpoints)} checkpoint(s) complete")


def _marker_updated(checkpoints: list[dict], latest_marker: int | None) -> dict:
    complete = sorted(int(c["step"]) for c in checkpoints if c.get("complete") and not c.get("inferred"))
    if latest_marker is None:
        return _item(
            "checkpoint_latest_marker",
            "unknown",
            "no latest_checkpointed_iteration.txt marker (or the format has none)",
        )
    if not complete:
        return _item(
            "checkpoint_latest_marker",
            "fail",
            f"the marker says step {latest_marker} but no complete checkpoint exists",
        )
    state = "pass" if latest_marker == complete[-1] else "fail"
    return _item(
        "checkpoint_latest_marker",
        state,
        f"marker {latest_marker}, newest complete checkpoint {complete[-1]}",
    )


def _end_items(
    series: Series, checkpoints: list[dict], status: dict | None, info: dict, facts: dict
) -> list[dict]:
    state_word = str((status or {}).get("status", (status or {}).get("state", ""))).lower() or None
    total = (status or {}).get("total_steps") or facts.get("total_steps")
    current = (status or {}).get("current_step") or (status or {}).get("step") or info.get("global_step")
    last_logged = max((max(s) for s, _ in series.values() if s), default=None)
    current = current if isinstance(current, int) else last_logged
    ended = state_word in ("completed", "failed", "stopped") or (
        state_word is None and total is not None and current == total
    )
    items = []

    if total is None or current is None:
        items.append(_item("end_step_count", "unknown", f"total steps {total}, current step {current}"))
    elif not ended:
        items.append(_item("end_step_count", "unknown", f"run not finished: step {current} of {total}"))
    else:
        items.append(
            _item(
                "end_step_count",
                "pass" if current == total else "fail",
                f"step {current} of {total}",
            )
        )

    _, losses = series.get("loss", ([], []))
    if len(losses) < 4:
        items.append(_item("end_final_loss", "unknown", f"{len(losses)} loss point(s)"))
    else:
        tail = losses[-min(5, len(losses)) :]
        finite_tail = _finite(tail)
        start = median(_finite(losses[:5]) or [math.nan])
        if len(finite_tail) < len(tail):
            items.append(
                _item(
                    "end_final_loss",
                    "fail",
                    f"non-finite loss among the last {len(tail)} points",
                )
            )
        else:
            final = median(finite_tail)
            good = final < start and final > 0
            items.append(
                _item(
                    "end_final_loss",
                    "pass" if good else "fail",
                    f"final loss {fmt(final)} (median of the last {len(tail)}), starting loss {fmt(start)}"
                    + ("" if final > 0 else "; a loss of 0 is not a trained model"),
                )
            )

    if not ended or current is None:
        items.append(
            _item(
                "end_checkpoints_saved",
                "unknown",
                "run not finished" if not ended else "final step unknown",
            )
        )
    else:
        final_ckpt = [c for c in checkpoints if int(c["step"]) == current]
        inferred = final_ckpt and all(c.get("inferred") for c in final_ckpt)
        if inferred:
            items.append(
                _item(
                    "end_checkpoints_saved",
                    "unknown",
                    f"checkpoint {current} inferred, not seen on disk",
                )
            )
        elif final_ckpt and all(c.get("complete") for c in final_ckpt):
            items.append(
                _item(
                    "end_checkpoints_saved",
                    "pass",
                    f"{len(checkpoints)} checkpoint(s); the final step {current} is saved and complete",
                )
            )
        else:
            items.append(
                _item(
                    "end_checkpoints_saved",
                    "fail",
                    f"no complete checkpoint at the final step {current}",
                )
            )

    if state_word == "completed":
        items.append(_item("end_status_completed", "pass", "status.json: completed"))
    elif state_word == "failed":
        items.append(_item("end_status_completed", "fail", f"status.json: failed{_error_text(status)}"))
    elif state_word == "stopped":
        reason = str((status or {}).get("stop_reason") or "")[:200]
        items.append(_item("end_status_completed", "fail", f"status.json: stopped on request ({reason})"))
    elif state_word is None and ended:
        items.append(
            _item(
                "end_status_completed",
                "pass",
                f"no status file; the trainer state reached its last step {total}",
            )
        )
    else:
        items.append(_item("end_status_completed", "unknown", f"status: {state_word or 'none'}"))
    return items


def _error_text(status: dict | None) -> str:
    error = (status or {}).get("error")
    return f" ({str(error)[:200]})" if error else ""
