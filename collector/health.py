"""The run's health checklist: a short list of pass / fail / unknown checks at start, at checkpoints, at the end.

Stable interface: `health_checklist(series, checkpoints, status, run_info, latest_marker=None) -> list[dict]`.
`series` is keyed by role (`loss`, `val_loss`, `grad_norm`, `lr`, `step_time`; see
`collector.detect.roles`) with (steps, values) in step order; `checkpoints` are the checkpoint index items
(step, path, complete, bytes[, inferred]); `status` is status.json's content (or None); `run_info` is run.json
or trainer_state info; `latest_marker` is the step in `latest_checkpointed_iteration.txt` (None when the
format has no marker). Each item: `id`, `phase` ("start" | "checkpoint" | "end"), `title`, `state`
("pass" | "fail" | "unknown"), `evidence` (one sentence with the numbers). Pure: no I/O.
"""

from __future__ import annotations

import math
from statistics import median

from collector.detect.base import fmt
from collector.detect.schedule import run_facts

START_STEPS = 100  # "the first 100 steps"
GRAD_RANGE = (0.1, 10.0)
Series = dict[str, tuple[list[int], list[float]]]


def _item(id_: str, phase: str, title: str, state: str, evidence: str) -> dict:
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
) -> list[dict]:
    """The checklist items, in the order start, checkpoint, end (see the module docstring)."""
    facts = run_facts(run_info)
    return [
        _loss_falling(series),
        _lr_warmup(series, facts),
        _grad_in_range(series),
        _step_time_stable(series),
        _val_not_rising(series, checkpoints),
        _checkpoints_complete(checkpoints),
        _marker_updated(checkpoints, latest_marker),
        *_end_items(series, checkpoints, status, run_info or {}, facts),
    ]


def _loss_falling(series: Series) -> dict:
    title = "Loss falls in the first 100 steps"
    steps, values = _first(series, "loss")
    values = _finite(values)
    if len(values) < 4:
        return _item(
            "start_loss_falling",
            "start",
            title,
            "unknown",
            f"only {len(values)} finite loss point(s) in the first {START_STEPS} steps",
        )
    third = max(1, len(values) // 3)
    early, late = median(values[:third]), median(values[-third:])
    state = "pass" if late < early else "fail"
    return _item(
        "start_loss_falling",
        "start",
        title,
        state,
        f"loss median {fmt(early)} over the first {third} point(s), {fmt(late)} over the last {third} (to step {steps[-1]})",
    )


def _lr_warmup(series: Series, facts: dict) -> dict:
    title = "Learning rate rises during warmup"
    steps, values = _first(series, "lr")
    values = _finite(values)
    if len(values) < 2:
        return _item(
            "start_lr_warmup",
            "start",
            title,
            "unknown",
            f"{len(values)} lr point(s) in the first {START_STEPS} steps",
        )
    warmup = facts.get("warmup_steps")
    rising = values[-1] > values[0] and all(
        b >= a * (1 - 1e-6) for a, b in zip(values, values[1:], strict=False)
    )
    rose_at_start = values[1] > values[0]
    seen = f"lr {fmt(values[0])} at step {steps[0]} -> {fmt(values[-1])} at step {steps[-1]}"
    if warmup:
        in_warmup = [v for s, v in zip(steps, values, strict=False) if s <= warmup]
        ok = len(in_warmup) < 2 or in_warmup[-1] > in_warmup[0]
        return _item(
            "start_lr_warmup",
            "start",
            title,
            "pass" if ok else "fail",
            f"{warmup} warmup steps configured; {seen}",
        )
    if rising or rose_at_start:
        return _item(
            "start_lr_warmup",
            "start",
            title,
            "pass",
            f"no warmup length configured, but the lr rises: {seen}",
        )
    return _item("start_lr_warmup", "start", title, "unknown", f"no warmup configured or seen: {seen}")


def _grad_in_range(series: Series) -> dict:
    title = "grad_norm mostly within 0.1-10 in the first 100 steps"
    _, values = _first(series, "grad_norm")
    if not values:
        return _item(
            "start_grad_norm_range",
            "start",
            title,
            "unknown",
            "the run logs no grad_norm in its first 100 steps",
        )
    inside = sum(1 for v in values if v is not None and GRAD_RANGE[0] <= v <= GRAD_RANGE[1])
    share = inside / len(values)
    finite = _finite(values)
    spread = f"min {fmt(min(finite))}, max {fmt(max(finite))}" if finite else "no finite value"
    state = "pass" if share >= 0.8 else "fail"
    return _item(
        "start_grad_norm_range",
        "start",
        title,
        state,
        f"{inside} of {len(values)} points in range ({share:.0%}); {spread}",
    )


def _step_time_stable(series: Series) -> dict:
    title = "Time per step stable in the first 100 steps"
    _, values = _first(series, "step_time")
    values = _finite(values)
    if len(values) < 5:
        return _item(
            "start_step_time_stable",
            "start",
            title,
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
        "start",
        title,
        state,
        f"median {fmt(mid)} s; {steady} of {len(rest)} steps within 2x the median (first step left out)",
    )


def _val_not_rising(series: Series, checkpoints: list[dict]) -> dict:
    title = "Validation loss not rising at checkpoints"
    steps, values = series.get("val_loss", ([], []))
    evals = [(s, v) for s, v in zip(steps, values, strict=False) if v is not None and math.isfinite(v)]
    saved = sorted(int(c["step"]) for c in checkpoints)
    if not evals or not saved:
        return _item(
            "checkpoint_val_loss",
            "checkpoint",
            title,
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
            "checkpoint",
            title,
            "pass",
            f"validation loss at each of {len(saved)} checkpoint(s) at or near its best so far (last {fmt(evals[-1][1])} at step {evals[-1][0]})",
        )
    return _item(
        "checkpoint_val_loss",
        "checkpoint",
        title,
        "fail",
        f"{len(rose)} checkpoint(s) saved with the validation loss above its best: " + "; ".join(rose[:4]),
    )


def _checkpoints_complete(checkpoints: list[dict]) -> dict:
    title = "Every checkpoint complete (huggingface/ folder written)"
    if not checkpoints:
        return _item("checkpoint_complete", "checkpoint", title, "unknown", "no checkpoints found")
    if all(c.get("inferred") for c in checkpoints):
        return _item(
            "checkpoint_complete",
            "checkpoint",
            title,
            "unknown",
            f"{len(checkpoints)} checkpoint(s) inferred from save_steps, none seen on disk",
        )
    broken = [int(c["step"]) for c in checkpoints if not c.get("complete")]
    if broken:
        return _item(
            "checkpoint_complete",
            "checkpoint",
            title,
            "fail",
            f"incomplete: step(s) {', '.join(map(str, sorted(broken)[:8]))} of {len(checkpoints)}",
        )
    return _item(
        "checkpoint_complete", "checkpoint", title, "pass", f"all {len(checkpoints)} checkpoint(s) complete"
    )


def _marker_updated(checkpoints: list[dict], latest_marker: int | None) -> dict:
    title = "Latest-checkpoint marker points at the newest complete checkpoint"
    complete = sorted(int(c["step"]) for c in checkpoints if c.get("complete") and not c.get("inferred"))
    if latest_marker is None:
        return _item(
            "checkpoint_latest_marker",
            "checkpoint",
            title,
            "unknown",
            "no latest_checkpointed_iteration.txt marker (or the format has none)",
        )
    if not complete:
        return _item(
            "checkpoint_latest_marker",
            "checkpoint",
            title,
            "fail",
            f"the marker says step {latest_marker} but no complete checkpoint exists",
        )
    state = "pass" if latest_marker == complete[-1] else "fail"
    return _item(
        "checkpoint_latest_marker",
        "checkpoint",
        title,
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
    ended = state_word in ("completed", "failed") or (
        state_word is None and total is not None and current == total
    )
    items = []

    title = "Step count as expected"
    if total is None or current is None:
        items.append(
            _item("end_step_count", "end", title, "unknown", f"total steps {total}, current step {current}")
        )
    elif not ended:
        items.append(
            _item("end_step_count", "end", title, "unknown", f"run not finished: step {current} of {total}")
        )
    else:
        items.append(
            _item(
                "end_step_count",
                "end",
                title,
                "pass" if current == total else "fail",
                f"step {current} of {total}",
            )
        )

    title = "Final loss finite and below the starting loss"
    _, losses = series.get("loss", ([], []))
    if len(losses) < 4:
        items.append(_item("end_final_loss", "end", title, "unknown", f"{len(losses)} loss point(s)"))
    else:
        tail = losses[-min(5, len(losses)) :]
        finite_tail = _finite(tail)
        start = median(_finite(losses[:5]) or [math.nan])
        if len(finite_tail) < len(tail):
            items.append(
                _item(
                    "end_final_loss",
                    "end",
                    title,
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
                    "end",
                    title,
                    "pass" if good else "fail",
                    f"final loss {fmt(final)} (median of the last {len(tail)}), starting loss {fmt(start)}"
                    + ("" if final > 0 else "; a loss of 0 is not a trained model"),
                )
            )

    title = "A checkpoint saved at the final step"
    if not ended or current is None:
        items.append(
            _item(
                "end_checkpoints_saved",
                "end",
                title,
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
                    "end",
                    title,
                    "unknown",
                    f"checkpoint {current} inferred, not seen on disk",
                )
            )
        elif final_ckpt and all(c.get("complete") for c in final_ckpt):
            items.append(
                _item(
                    "end_checkpoints_saved",
                    "end",
                    title,
                    "pass",
                    f"{len(checkpoints)} checkpoint(s); the final step {current} is saved and complete",
                )
            )
        else:
            items.append(
                _item(
                    "end_checkpoints_saved",
                    "end",
                    title,
                    "fail",
                    f"no complete checkpoint at the final step {current}",
                )
            )

    title = "Status says completed"
    if state_word == "completed":
        items.append(_item("end_status_completed", "end", title, "pass", "status.json: completed"))
    elif state_word == "failed":
        items.append(
            _item("end_status_completed", "end", title, "fail", f"status.json: failed{_error_text(status)}")
        )
    elif state_word is None and ended:
        items.append(
            _item(
                "end_status_completed",
                "end",
                title,
                "pass",
                f"no status file; the trainer state reached its last step {total}",
            )
        )
    else:
        items.append(
            _item("end_status_completed", "end", title, "unknown", f"status: {state_word or 'none'}")
        )
    return items


def _error_text(status: dict | None) -> str:
    error = (status or {}).get("error")
    return f" ({str(error)[:200]})" if error else ""
