"""Which checkpoint to keep, which ones can go, and how much disk that frees. Pure: no I/O.

Stable interface:

- `advice_for_run(checkpoints, evals_by_metric, bad_episodes, run_info, latest_step, metric=None,
  direction=None, config=None) -> dict`: THE entry point (API, CLI, report): chooses the metric, maps
  each checkpoint to its nearest evaluation and recommends, in `recommend_checkpoint`'s shape. The
  functions below are its parts.
- `recommend_checkpoint(checkpoints, evals, bad_episodes, metric="val_loss", direction="min",
  latest_step=None) -> dict` with exactly the keys `recommended` ({step, path, reason} or None),
  `checkpoints` ([{step, path, complete, bytes, value, inferred}]), `deletable` ([steps]), `frees_bytes`,
  `metric`, `direction`, `no_recommendation` (why `recommended` is None, else None). Input `checkpoints` items carry step, path, complete, bytes (and optionally
  `inferred`); `evals` are (step, value) of the chosen metric; `bad_episodes` are (first_step, last_step)
  of `nonfinite` and `grad_spike` episodes: a checkpoint saved inside one is never recommended.
- `choose_metric(run_info, available_metrics, evals_by_metric=None) -> (metric, direction)`: which
  evaluation metric decides (validation loss, min, by default; the HF run's own best metric when known).
- `hf_checkpoints_from_state(info, last_step) -> list[dict]` (from `hf_saves`): the checkpoints a Hugging Face run most
  likely saved, for a lone trainer_state.json copy: INFERRED (multiples of save_steps, the best model
  checkpoint, the final step), each marked `inferred: True`, completeness and bytes unknown (None).
  An inferred checkpoint can be recommended (the run most likely saved it) but is never deletable: nobody
  has seen its folder, so `frees_bytes` is None when every checkpoint is inferred.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from collector.advice.hf_saves import (
    checkpoint_step,
    hf_checkpoints_from_state,
    is_trainer_state,
    run_best_step,
)
from collector.core.roles import eval_metric_direction, role_of
from collector.detect.base import fmt
from collector.detect.config import DetectConfig


def advice_for_run(
    checkpoints: list[dict],
    evals_by_metric: dict[str, list[tuple[int, float]]],
    bad_episodes: list[tuple[int, int]],
    run_info: dict | None,
    latest_step: int | None,
    metric: str | None = None,
    direction: str | None = None,
    config: DetectConfig | None = None,
) -> dict:
    """Checkpoint advice for one run, in `recommend_checkpoint`'s shape.

    `evals_by_metric` holds every evaluation-like metric of the run as (step, value) lists; `latest_step`
    is what a resume would load (HF: trainer_state `global_step`; verl: the checkpoint marker). The metric
    is `metric` when given (its direction from `direction`, else from its name), else the `[advice]` metric
    of `config` (with its direction) when the run has evaluations of it, else `choose_metric`'s
    pick from the run info (HF `metric_for_best_model`, or the metric matching `best_metric`) with
    `direction` overriding when given. With no checkpoint seen and run info from a trainer_state.json
    (`global_step` and `save_steps` or `best_model_checkpoint`), the checkpoints are inferred from it
    (`hf_checkpoints_from_state`: recommendable, never deletable). Raises ValueError for a direction other
    than "min" or "max".
    """
    if direction is not None and direction not in ("min", "max"):
        raise ValueError(f"direction must be 'min' or 'max', got {direction!r}")
    info = run_info or {}
    settings = config.advice if config is not None else None
    unused = None  # a configured metric this run has no evaluation of
    if not metric and settings is not None and settings.metric:
        if evals_by_metric.get(settings.metric):
            metric, direction = settings.metric, direction or settings.direction
        else:
            unused = settings.metric
    if metric:
        chosen = metric
        chosen_direction = direction or _stated_direction(info, metric) or eval_metric_direction(metric)
    else:
        chosen, chosen_direction = choose_metric(info, list(evals_by_metric), evals_by_metric)
        chosen_direction = direction or chosen_direction
    if is_trainer_state(info) and not any(c.get("complete") for c in checkpoints):
        # no weights seen (a lone trainer_state.json, or checkpoint-N/ folders holding only it): the saves the
        # state file implies stand in for the ones not seen
        seen = {int(c["step"]) for c in checkpoints}
        checkpoints = list(checkpoints) + [
            c for c in hf_checkpoints_from_state(info, latest_step) if c["step"] not in seen
        ]
    advice = recommend_checkpoint(
        checkpoints,
        evals_by_metric.get(chosen, []),
        bad_episodes,
        chosen,
        chosen_direction,
        latest_step,
        best_step=run_best_step(info),
    )
    if unused and advice["recommended"]:
        advice["recommended"]["reason"] += (
            f" ({unused} (configured) has no evaluation in this run, so {chosen} decided.)"
        )
    return advice


def _stated_direction(info: dict, metric: str) -> str | None:
    """The run's own `greater_is_better` when `metric` is its `metric_for_best_model`."""
    wanted = info.get("metric_for_best_model")
    greater = info.get("greater_is_better")
    if isinstance(wanted, str) and isinstance(greater, bool) and metric in (wanted, f"eval_{wanted}"):
        return "max" if greater else "min"
    return None


def recommend_checkpoint(
    checkpoints: list[dict],
    evals: list[tuple[int, float]],
    bad_episodes: list[tuple[int, int]],
    metric: str = "val_loss",
    direction: str = "min",
    latest_step: int | None = None,
    best_step: int | None = None,
) -> dict:
    """The checkpoint to keep by `metric` (`direction` "min" or "max"), explained in one sentence.

    Each checkpoint takes the value of the evaluation nearest to its step (ties go to the earlier one).
    Only complete checkpoints outside every bad episode are candidates; an inferred checkpoint (`inferred`
    true, completeness unknown) and a seen one holding only its trainer_state.json (`state_only`: the run
    saved it, its weights are not here) count as one for the recommendation, are never deletable and free
    nothing anyone has measured; the reason then says the weights are not here. Among equal values, a
    checkpoint evaluated at its own step wins over one that only borrows a nearby evaluation, then the run's
    own best (`best_step`), then the later one. With no recommendation, `no_recommendation` says why (else
    it is None). Without any usable evaluation the
    latest good checkpoint is recommended, and the reason says so. With no checkpoint at all (none seen, none
    inferred) but two or more evaluations after step 0, the best one's step is recommended with path None.
    `deletable` never holds the recommended
    checkpoint, the latest one (resume needs it: `latest_step`, else the newest complete one) nor a newest
    incomplete one (it may still be being written).
    """
    if direction not in ("min", "max"):
        raise ValueError(f"direction must be 'min' or 'max', got {direction!r}")
    finite_evals = sorted((int(s), float(v)) for s, v in evals if v is not None and math.isfinite(v))
    rows = []
    for item in sorted(checkpoints, key=lambda c: int(c["step"])):
        step = int(item["step"])
        eval_step, value = _nearest(finite_evals, step)
        inferred = bool(item.get("inferred"))
        rows.append(
            {
                "step": step,
                "path": item.get("path"),
                # unknown stays unknown for a checkpoint nobody has seen
                "complete": None if inferred and item.get("complete") is None else bool(item.get("complete")),
                "bytes": None if inferred and item.get("bytes") is None else int(item.get("bytes") or 0),
                "value": value,
                "inferred": inferred,
                "_eval_step": eval_step,
                "_from": item.get("inferred_from"),
                "_bad": _inside(step, bad_episodes),
                "_state_only": bool(item.get("state_only")) and not inferred,
                "_problem": item.get("problem"),
            }
        )
    complete = [
        r for r in rows if r["complete"] or (r["inferred"] and r["complete"] is None) or r["_state_only"]
    ]
    newest = rows[-1]["step"] if rows else None
    if latest_step is None and complete:
        latest_step = complete[-1]["step"]
    good = [r for r in complete if r["_bad"] is None]
    skipped_bad = [r for r in complete if r["_bad"] is not None]
    scored = [r for r in good if r["value"] is not None]

    recommended = None
    if scored:
        sign = 1 if direction == "min" else -1
        best = min(
            scored,
            key=lambda r: (
                sign * r["value"],
                r["_eval_step"] != r["step"],
                r["step"] != best_step,
                -r["step"],
            ),
        )
        recommended = {
            "step": best["step"],
            "path": best["path"],
            "reason": _reason(best, scored, skipped_bad, metric, direction, rows, finite_evals),
        }
    elif not rows and len([e for e in finite_evals if e[0] > 0]) >= 2:
        # a step-0 evaluation is the base model's (no checkpoint is saved there); one evaluation is no choice
        recommended = _best_evaluation_only([e for e in finite_evals if e[0] > 0], metric, direction)
    elif good:
        best = good[-1]
        why = "no evaluation of " + metric if not finite_evals else "no evaluation near a good checkpoint"
        recommended = {
            "step": best["step"],
            "path": best["path"],
            "reason": f"Step {best['step']} is the latest {'complete' if best['complete'] else 'saved'} checkpoint "
            f"outside any bad episode ({why}, so "
            f"nothing better to go by){_skipped_text(skipped_bad)}{_inferred_text(rows)}{_weights_text(best, rows)}.",
        }

    keep = {latest_step, recommended["step"] if recommended else None}
    if rows and not rows[-1]["complete"]:
        keep.add(newest)
    deletable = [
        r["step"] for r in rows if r["step"] not in keep and not r["inferred"] and not r["_state_only"]
    ]
    seen = [r for r in rows if not r["inferred"]]
    frees = sum(r["bytes"] for r in seen if r["step"] in deletable) if seen or not rows else None
    return {
        "recommended": recommended,
        "checkpoints": [
            {k: r[k] for k in ("step", "path", "complete", "bytes", "value", "inferred")} for r in rows
        ],
        "deletable": deletable,
        "frees_bytes": frees,
        "metric": metric,
        "direction": direction,
        "no_recommendation": None if recommended else _why_none(rows, skipped_bad),
    }


def _best_evaluation_only(evals: list[tuple[int, float]], metric: str, direction: str) -> dict:
    """No checkpoint of the run was seen (a lone metrics file): the step of its best evaluation, path None."""
    sign = 1 if direction == "min" else -1
    step, value = min(evals, key=lambda e: (sign * e[1], e[0]))
    word = "lowest" if direction == "min" else "highest"
    return {
        "step": step,
        "path": None,
        "reason": f"No checkpoint of this run was seen on disk; its best evaluation is step {step}, the {word} "
        f"{metric} of {len(evals)} evaluations ({fmt(value)}): keep the checkpoint saved at (or nearest) that "
        f"step if the trainer saved one.",
    }


def _why_none(rows: list[dict], skipped_bad: list[dict]) -> str:
    """Why no checkpoint is recommended, in one sentence (the JSON never holds a bare null)."""
    if not rows:
        return (
            "No checkpoint was seen on disk and the run's files name no save steps (save_steps, "
            "best_model_checkpoint), so there is nothing to recommend."
        )
    if skipped_bad:
        return f"Every usable checkpoint was saved inside a bad episode{_skipped_text(skipped_bad)}."
    broken = "; ".join(f"checkpoint at step {r['step']}: {r['_problem'] or 'incomplete'}" for r in rows[-3:])
    return f"None of the {len(rows)} checkpoint(s) seen is complete ({broken})."


def _weights_text(best: dict, rows: list[dict]) -> str:
    """Says plainly that the recommended checkpoint's weights are not in the folder, and what is."""
    if best["complete"]:
        return ""
    name = f"checkpoint-{best['step']}"
    state_only = [r for r in rows if r["_state_only"]]
    if best["_state_only"]:
        here = "only its trainer_state.json is"
    elif state_only:
        names = " and ".join(f"checkpoint-{r['step']}'s" for r in state_only[:3])
        here = f"only {names} trainer_state.json {'is' if len(state_only) == 1 else 'are'}"
    else:
        here = "no checkpoint folder of this run was seen"
    return f"; {name}'s weights are not here: {here}"


def _nearest(evals: list[tuple[int, float]], step: int) -> tuple[int | None, float | None]:
    if not evals:
        return None, None
    eval_step, value = min(evals, key=lambda e: (abs(e[0] - step), e[0]))
    return eval_step, value


def _inside(step: int, episodes: list[tuple[int, int]]) -> tuple[int, int] | None:
    for first, last in episodes:
        if first <= step <= last:
            return (first, last)
    return None


def _skipped_text(skipped: list[dict]) -> str:
    if not skipped:
        return ""
    steps = ", ".join(str(r["step"]) for r in skipped[:5])
    return f"; not considered: step(s) {steps}, saved inside a non-finite or gradient-spike episode"


def _reason(
    best: dict,
    scored: list[dict],
    skipped: list[dict],
    metric: str,
    direction: str,
    rows: list[dict],
    evals: list[tuple[int, float]],
) -> str:
    word = "lowest" if direction == "min" else "highest"
    where = ""
    if best["_eval_step"] != best["step"]:
        where = f" (evaluated at step {best['_eval_step']}, the evaluation nearest to this save)"
    others = [
        r for r in sorted(scored, key=lambda r: r["value"], reverse=direction == "max") if r is not best
    ]
    if others:
        alt = ", ".join(f"step {r['step']} {fmt(r['value'])}" for r in others[:3])
        alternatives = f"; the alternatives were {alt}" + (
            f" and {len(others) - 3} more" if len(others) > 3 else ""
        )
    else:
        alternatives = f"; it is the only evaluated {'complete ' if best['complete'] else ''}checkpoint"
    sign = 1 if direction == "min" else -1
    top_step, top_value = min(evals, key=lambda e: (sign * e[1], e[0]))
    # a checkpoint nobody has seen whole is not called complete
    kind = "complete " if all(r["complete"] for r in scored) else "saved "
    missed = ""
    if sign * top_value < sign * best["value"]:
        missed = f"; the best evaluation overall, {fmt(top_value)} at step {top_step}, has no {kind}checkpoint near it"
    return (
        f"Step {best['step']} has the {word} {metric}, {fmt(best['value'])}{where}, among {len(scored)} {kind}"
        f"checkpoint(s){alternatives}{missed}{_skipped_text(skipped)}{_inferred_text(rows)}"
        f"{_weights_text(best, rows)}."
    )


def _inferred_text(rows: list[dict]) -> str:
    inferred = [r for r in rows if r["inferred"]]
    if not inferred:
        return ""
    # say only what the state file gave: each inferred checkpoint carries what it was inferred from
    sources = sorted({r.get("_from") or "the run's trainer_state.json" for r in inferred})
    which = (
        "the checkpoints were"
        if len(inferred) == len(rows)
        else f"{len(inferred)} of the {len(rows)} checkpoints were"
    )
    return (
        f"; {which} inferred from {' and '.join(sources)} (no folder of theirs seen on disk), so there is no "
        "deletion advice for them"
    )


def choose_metric(
    run_info: dict | None,
    available_metrics: Iterable[str],
    evals_by_metric: dict[str, list[tuple[int, float]]] | None = None,
) -> tuple[str, str]:
    """(metric, direction) that decides the best checkpoint.

    The run's own `metric_for_best_model` (HF: "wer" is logged as "eval_wer"; `greater_is_better` when
    given) wins; failing that, the evaluation metric whose value at the run's best step equals its
    `best_metric` (a trainer_state.json copy has no TrainingArguments); failing that, the validation loss
    (min), then a validation score (max). With none of these, ("val_loss", "min").
    """
    info = run_info or {}
    names = list(available_metrics)
    wanted = info.get("metric_for_best_model")
    if isinstance(wanted, str) and wanted:
        for name in (wanted, f"eval_{wanted}", f"val/{wanted}"):
            if name in names:
                greater = info.get("greater_is_better")
                if isinstance(greater, bool):
                    return name, "max" if greater else "min"
                return name, eval_metric_direction(name)
    inferred = _metric_matching_best(info, evals_by_metric or {})
    if inferred:
        return inferred, eval_metric_direction(inferred)
    for role, direction in (("val_loss", "min"), ("val_score", "max")):
        candidates = [n for n in names if role_of(n) == role]
        if candidates:
            preferred = [n for n in candidates if n in ("val/loss", "eval_loss")]
            return (preferred or sorted(candidates))[0], direction
    return "val_loss", "min"


def _metric_matching_best(info: dict, evals_by_metric: dict[str, list[tuple[int, float]]]) -> str | None:
    best_metric = info.get("best_metric")
    best_step = info.get("best_global_step") or checkpoint_step(info.get("best_model_checkpoint"))
    if not isinstance(best_metric, int | float) or best_step is None:
        return None
    for name in sorted(evals_by_metric, key=lambda n: (role_of(n) != "val_loss", n)):
        for step, value in evals_by_metric[name]:
            if step == best_step and value is not None and math.isclose(value, best_metric, rel_tol=1e-6):
                return name
    return None
