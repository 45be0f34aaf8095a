"""Which checkpoint to keep, which ones can go, and how much disk that frees. Pure: no I/O.

Stable interface:

- `advice_for_run(checkpoints, evals_by_metric, bad_episodes, run_info, latest_step, metric=None,
  direction=None, config=None, run=None) -> dict`: THE entry point (API, CLI, report): chooses the deciding
  evaluation (`evaluations.choose_metric`, or `metric`, or the `[advice]` config), infers the saves nobody has
  seen (HF trainer_state: `hf_saves`; verl `trainer.save_freq`: `verl_saves`) and recommends, in
  `recommend_checkpoint`'s shape. `run` (`RunContext`) is what else the advice weighs: the run's last logged
  step, its state, RL or not, its error episodes.
- `recommend_checkpoint(AdviceInput) -> dict` with exactly the keys `recommended` ({step, path, reason} or
  None), `checkpoints` ([{step, path, complete, bytes, value, inferred, inferred_from, evaluated_at}]: `value`
  the evaluation at the checkpoint's step, else the latest one since the previous checkpoint, never a later
  one; `evaluated_at` its step), `deletable` ([steps]), `kept` ([{step, why}]: each seen checkpoint not
  deletable and why it is kept), `frees_bytes`, `metric`, `direction`,
  `no_recommendation` (why `recommended` is None, else None), `never_learned` (a `no_learning` error from the
  run's first steps covers every checkpoint: none is better than the base model) and `interrupted_save` (the
  step whose save a failed run most likely interrupted, else None). `AdviceInput` says what each input is.
- `keep_for_actions(advice, resumes) -> dict`: the advice with the checkpoints the run's alerts' actions resume
  from kept (out of `deletable`, into `kept`): the delete list is made here and nowhere else.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from collector.advice import errors as errors_mod
from collector.advice import reasons
from collector.advice.evaluations import (
    best_by_every_evaluation,
    choose_metric,
    evaluation_of,
    tie_margin,
)
from collector.advice.hf_saves import (
    hf_checkpoints_from_state,
    is_trainer_state,
    run_best_step,
)
from collector.advice.verl_saves import verl_checkpoints_from_config
from collector.core.roles import eval_metric_direction, role_of
from collector.settings.config import DetectConfig


@dataclass(frozen=True)
class RunContext:
    """What the advice weighs besides checkpoints and evaluations: the run's last logged step, its state
    (`completed`, `failed`, ...), whether it is an RL run, and its error episodes (`errors.error_episodes`)."""

    last_step: int | None = None
    state: str | None = None
    rl: bool = False
    errors: list[dict] = field(default_factory=list)


def advice_for_run(
    checkpoints: list[dict],
    evals_by_metric: dict[str, list[tuple[int, float]]],
    bad_episodes: list[tuple[int, int]],
    run_info: dict | None,
    latest_step: int | None,
    metric: str | None = None,
    direction: str | None = None,
    config: DetectConfig | None = None,
    run: RunContext | None = None,
) -> dict:
    """Checkpoint advice for one run, in `recommend_checkpoint`'s shape.

    `evals_by_metric` holds every evaluation-like metric of the run as (step, value) lists; `latest_step`
    is what a resume would load (HF: trainer_state `global_step`; verl: the checkpoint marker). The metric
    is `metric` when given (its direction from `direction`, else from its name), else the `[advice]` metric
    of `config` (with its direction) when the run has evaluations of it, else `choose_metric`'s
    pick from the run info (HF `metric_for_best_model`, or the metric matching `best_metric`) with
    `direction` overriding when given. With no checkpoint seen and run info from a trainer_state.json
    (`global_step` and `save_steps` or `best_model_checkpoint`), the checkpoints are inferred from it
    (`hf_checkpoints_from_state`: recommendable, never deletable); with none seen and verl's
    `trainer.save_freq` in the run info, from that and `run.last_step` (`verl_checkpoints_from_config`).
    Raises ValueError for a direction other than "min" or "max".
    """
    ctx = run or RunContext()
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
    interrupted = None
    if not is_trainer_state(info) and not any(not c.get("inferred") for c in checkpoints):
        # a verl run whose checkpoint folders nobody has seen: the saves its save frequency implies
        implied, interrupted = verl_checkpoints_from_config(info, ctx.last_step, ctx.state)
        checkpoints = list(checkpoints) + implied
    advice = recommend_checkpoint(
        AdviceInput(
            checkpoints,
            evals_by_metric.get(chosen, []),
            bad_episodes,
            chosen,
            chosen_direction,
            latest_step,
            best_step=run_best_step(info),
            errors=ctx.errors,
            rl=ctx.rl,
            interrupted=interrupted,
            all_evals=evals_by_metric,
        )
    )
    no_val = not any(role_of(n) in ("val_loss", "val_score") for n in evals_by_metric)
    if not metric and no_val and evals_by_metric.get(chosen) and advice["recommended"]:
        advice["recommended"]["reason"] += (
            f" (The run logs no validation loss or score; its evaluation {chosen} decided.)"
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


@dataclass(frozen=True)
class AdviceInput:
    """What `recommend_checkpoint` weighs for one run.

    `checkpoints`: items with step, path, complete, bytes (optionally `inferred`, `inferred_from`,
    `state_only`, `problem`); `evals`: (step, value) of the deciding `metric`, better in `direction` ("min" or
    "max"); `bad_episodes`: (first_step, last_step) of `nonfinite` and `grad_spike` episodes; `latest_step`: what
    a resume would load; `best_step`: the run's own best checkpoint (HF `best_model_checkpoint`); `errors`: the
    run's error episodes (`errors.error_episodes`); `rl`: an RL run; `interrupted`: the save a failed run was
    making; `all_evals`: every evaluation the run logs, by metric (loss or score: the best checkpoint by any of
    them is never deletable)."""

    checkpoints: list[dict]
    evals: list[tuple[int, float]]
    bad_episodes: list[tuple[int, int]] = field(default_factory=list)
    metric: str = "val_loss"
    direction: str = "min"
    latest_step: int | None = None
    best_step: int | None = None
    errors: list[dict] = field(default_factory=list)
    rl: bool = False
    interrupted: int | None = None
    all_evals: dict[str, list[tuple[int, float]]] = field(default_factory=dict)


def recommend_checkpoint(given: AdviceInput) -> dict:
    """The checkpoint to keep by `given.metric` (better in `given.direction`), explained in one sentence.

    Candidates are the complete checkpoints outside every bad episode; an inferred checkpoint (`inferred`
    true, completeness unknown) and a seen one holding only its trainer_state.json (`state_only`: the run
    saved it, its weights are not here) count as one for the recommendation, are never deletable and free
    nothing anyone has measured; the reason then says the weights are not here. Values closer to the best
    than the evaluations' own noise (`evaluations.tie_margin`) are a tie, which goes to a checkpoint evaluated
    at its own step, then the run's own best (`best_step`), then the later one; the reason states the rule.
    Without any usable evaluation the latest good checkpoint is recommended, and the reason says so. With no
    checkpoint at all (none seen, none inferred) but two or more evaluations after step 0, the best one's step
    is recommended with path None. `deletable` never holds the recommended checkpoint, the latest one (resume
    needs it: `latest_step`, else the newest complete one), a newest incomplete one (it may still be being
    written), nor a checkpoint that is the best by any evaluation the run logs (`all_evals`, complete or
    not). When the choice lies inside an error episode (`errors`), the best (or latest) checkpoint outside
    every error episode is recommended instead and the reason says why; with none outside, the best-evaluated
    one (without evaluations the earliest, the least time in the trouble) is kept and the reason says where
    it lies. A `no_learning` error from the run's first steps over every checkpoint recommends none
    (`never_learned`). Raises ValueError for a direction other than "min" or "max".
    """
    checkpoints, bad_episodes, metric, direction = (
        given.checkpoints,
        given.bad_episodes,
        given.metric,
        given.direction,
    )
    latest_step, best_step, rl, interrupted = given.latest_step, given.best_step, given.rl, given.interrupted
    evals = given.evals
    if direction not in ("min", "max"):
        raise ValueError(f"direction must be 'min' or 'max', got {direction!r}")
    finite_evals = sorted((int(s), float(v)) for s, v in evals if v is not None and math.isfinite(v))
    rows = []
    previous = None
    for item in sorted(checkpoints, key=lambda c: int(c["step"])):
        step = int(item["step"])
        eval_step, value = evaluation_of(finite_evals, step, previous)
        previous = step
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

    errs = given.errors or []
    never = errors_mod.never_learned(errs, good)
    recommended, no_rec = None, None
    if never is not None:
        no_rec = errors_mod.never_learned_text(never)
    elif good:

        def choose(cands: list[dict]) -> tuple[dict, str, dict | None]:
            return _choose(cands, skipped_bad, metric, direction, rows, finite_evals, best_step, rl)

        best, reason, tie = choose(good)
        inside = errors_mod.covering(best["step"], errs)
        if inside is not None:
            best, reason, tie = _outside_errors(best, reason, tie, inside, good, errs, choose, rows)
        recommended = {"step": best["step"], "path": best["path"], "reason": reason, "tie": tie}
    elif not rows and len([e for e in finite_evals if e[0] > 0]) >= 2:
        # a step-0 evaluation is the base model's (no checkpoint is saved there); one evaluation is no choice
        recommended = reasons.best_evaluation_only([e for e in finite_evals if e[0] > 0], metric, direction)
        inside = errors_mod.covering(recommended["step"], errs)
        if inside is not None:
            recommended["reason"] += f" Mind that {errors_mod.inside_text(recommended['step'], inside)}."
    if recommended is not None and interrupted is not None:
        recommended["reason"] += reasons.interrupted_text(interrupted, rows)

    best_by_any = best_by_every_evaluation({metric: evals, **given.all_evals}, (r["step"] for r in rows))
    keep = {latest_step, recommended["step"] if recommended else None} | set(best_by_any)
    keep_newest = bool(rows) and not rows[-1]["complete"]
    if keep_newest:
        keep.add(newest)
    deletable = [
        r["step"] for r in rows if r["step"] not in keep and not r["inferred"] and not r["_state_only"]
    ]
    seen = [r for r in rows if not r["inferred"]]
    frees = sum(r["bytes"] for r in seen if r["step"] in deletable) if seen or not rows else None
    kept = _kept(seen, deletable, recommended, latest_step, best_by_any, newest if keep_newest else None)
    return {
        "recommended": recommended,
        "checkpoints": [
            {k: r[k] for k in ("step", "path", "complete", "bytes", "value", "inferred")}
            | {"inferred_from": r["_from"] if r["inferred"] else None, "evaluated_at": r["_eval_step"]}
            for r in rows
        ],
        "deletable": deletable,
        "kept": kept,
        "frees_bytes": frees,
        "metric": metric,
        "direction": direction,
        "no_recommendation": None
        if recommended
        else (no_rec or reasons.why_none(rows, skipped_bad))
        + reasons.kept_incomplete_text(rows, best_by_any),
        "never_learned": never is not None,
        "interrupted_save": interrupted,
    }


def _kept(
    seen: list[dict],
    deletable: list[int],
    recommended: dict | None,
    latest: int | None,
    best_by_any: dict[int, str],
    writing: int | None,
) -> list[dict]:
    """Each seen checkpoint that is not deletable, with why it is kept (`{step, why}`, the reasons joined)."""
    out = []
    for r in seen:
        if r["step"] in deletable:
            continue
        why = [
            *(["the recommended checkpoint"] if recommended and r["step"] == recommended["step"] else []),
            *(["the latest: a resume loads it"] if r["step"] == latest else []),
            *([f"the best by {best_by_any[r['step']]}"] if r["step"] in best_by_any else []),
            *(["the newest, not complete: it may still be being written"] if r["step"] == writing else []),
            *(["only its trainer_state.json is here"] if r["_state_only"] else []),
        ]
        out.append({"step": r["step"], "why": "; ".join(why)})
    return out


def keep_for_actions(advice: dict, resumes: list[tuple[int, str]]) -> dict:
    """`advice` (`recommend_checkpoint`'s shape) with the checkpoints an alert's action resumes from taken out
    of `deletable` (`resumes`: (step, rule) of each action that still counts: its incident open, or its run
    still going), `frees_bytes` counted again and `kept` saying why: one voice, an action never names a
    checkpoint the advice calls safe to delete."""
    rules: dict[int, list[str]] = {}
    for step, rule in resumes:
        if rule not in rules.setdefault(step, []):
            rules[step].append(rule)
    kept = {k["step"]: k for k in advice.get("kept", [])}
    for step, names in sorted(rules.items()):
        if step not in advice["deletable"] and step not in kept:
            continue  # not a seen checkpoint of the advice (inferred, or none at that step)
        why = f"the {' and '.join(names)} action{'s resume' if len(names) > 1 else ' resumes'} from it"
        kept[step] = {"step": step, "why": "; ".join(w for w in (kept.get(step, {}).get("why"), why) if w)}
    deletable = [s for s in advice["deletable"] if s not in rules]
    frees = advice["frees_bytes"]
    if frees is not None:
        frees = sum(
            c["bytes"] or 0 for c in advice["checkpoints"] if not c["inferred"] and c["step"] in deletable
        )
    return advice | {
        "deletable": deletable,
        "frees_bytes": frees,
        "kept": sorted(kept.values(), key=lambda k: k["step"]),
    }


def _choose(
    cands: list[dict],
    skipped_bad: list[dict],
    metric: str,
    direction: str,
    rows: list[dict],
    evals: list[tuple[int, float]],
    best_step: int | None,
    rl: bool,
) -> tuple[dict, str, dict | None]:
    """The best-evaluated of `cands` (ties: evaluated at its own step, the run's own best, the later), else
    the latest of them, with the sentence that says why, and the tie it broke (None without one): the other
    tied steps, the evaluations' noise that made them equal and the rule that chose."""
    scored = [r for r in cands if r["value"] is not None]
    if not scored:
        best = cands[-1]
        why = reasons.no_evaluation(metric, evals, rl)
        return best, reasons.latest_reason(best, skipped_bad, rows, why), None
    sign = 1 if direction == "min" else -1
    top = min(sign * r["value"] for r in scored)
    noise = tie_margin(evals)
    # values closer to the best than the evaluations' own noise are a tie: evaluated at its own step first,
    # then the run's own best, then the later checkpoint (more training for the same result)
    tied = [r for r in scored if sign * r["value"] - top <= noise]
    best = min(tied, key=lambda r: (r["_eval_step"] != r["step"], r["step"] != best_step, -r["step"]))
    reason = reasons.scored_reason(best, scored, skipped_bad, metric, direction, rows, evals)
    tie = None
    if len(tied) > 1:
        own = [r for r in tied if r["_eval_step"] == r["step"]]
        if best["step"] == best_step:
            rule = "the run's own best checkpoint"
        elif 0 < len(own) < len(tied):
            rule = "the checkpoint evaluated at its own step, the latest such"
        else:
            rule = "the later checkpoint (more training, the same result)"
        reason = reason[:-1] + reasons.tie_text(noise, tied, best, rule)
        tie = {"steps": [r["step"] for r in tied if r is not best], "noise": noise, "rule": rule}
    return best, reason, tie


def _outside_errors(
    best: dict,
    reason: str,
    tie: dict | None,
    inside: dict,
    good: list[dict],
    errs: list[dict],
    choose: Callable[[list[dict]], tuple[dict, str, dict | None]],
    rows: list[dict],
) -> tuple[dict, str, dict | None]:
    """`best` lies inside the error episode `inside`: the best checkpoint outside every error episode instead,
    saying why; with none, `best` (or, without evaluations, the earliest good one) with that caveat."""
    where = errors_mod.inside_text(best["step"], inside)
    clean = [r for r in good if errors_mod.covering(r["step"], errs) is None]
    if clean:
        pick, text, pick_tie = choose(clean)
        earlier = "an earlier" if pick["step"] < best["step"] else "a"
        return (
            pick,
            f"{text[:-1]}. Passed over: {where}; {earlier} checkpoint outside every error episode is kept instead.",
            pick_tie,
        )
    if all(r["value"] is None for r in good) and good[0] is not best:
        # no evaluation to go by: the earliest one spent the least time in the trouble
        best = good[0]
        where = errors_mod.inside_text(best["step"], errors_mod.covering(best["step"], errs))
        reason, tie = (
            (
                f"Step {best['step']} is the earliest saved checkpoint, and none was saved outside every error "
                f"episode (no evaluation to go by){reasons.inferred_text(rows)}{reasons.weights_text(best, rows)}."
            ),
            None,
        )
    return (
        best,
        f"{reason[:-1]}. Keep it only with a caveat: {where}, and no checkpoint was saved outside every error episode.",
        tie,
    )


def _inside(step: int, episodes: list[tuple[int, int]]) -> tuple[int, int] | None:
    for first, last in episodes:
        if first <= step <= last:
            return (first, last)
    return None
