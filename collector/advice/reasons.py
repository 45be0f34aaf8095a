"""The sentences of the checkpoint advice: why a checkpoint is recommended, or why none is. Pure: no I/O.

`recommend.recommend_checkpoint` builds its rows (each a checkpoint with `step`, `path`, `complete`, `value`,
`inferred` and the private `_eval_step`, `_from`, `_state_only`, `_problem`) and asks these for the words.
"""

from __future__ import annotations

from collector.detect import registry
from collector.detect.base import fmt, noise_text

# what the advice looked for in an RL run that logs no validation score
_RL_SCORES = (
    "verl's val-core/<data source>/reward/mean@N or val/test_score/<data source>, or TRL's eval_reward"
)


def best_evaluation_only(evals: list[tuple[int, float]], metric: str, direction: str) -> dict:
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


def why_none(rows: list[dict], skipped_bad: list[dict]) -> str:
    """Why no checkpoint is recommended, in one sentence (the JSON never holds a bare null)."""
    if not rows:
        return (
            "No checkpoint was seen on disk and the run's files name no save steps (save_steps, "
            "best_model_checkpoint, verl's trainer.save_freq), so there is nothing to recommend."
        )
    if skipped_bad:
        return f"Every usable checkpoint was saved inside a bad episode{skipped_text(skipped_bad)}."
    broken = "; ".join(f"checkpoint at step {r['step']}: {r['_problem'] or 'incomplete'}" for r in rows[-3:])
    return f"None of the {len(rows)} checkpoint(s) seen is complete ({broken})."


def kept_incomplete_text(rows: list[dict], best_by: dict[int, str]) -> str:
    """The incomplete checkpoints that are still the best by some evaluation: kept, with what they miss."""
    kept = [r for r in rows if r["step"] in best_by and not r["complete"] and not r["inferred"]]
    if not kept:
        return ""
    said = "; ".join(
        f"step {r['step']} (best by {best_by[r['step']]}): {r['_problem'] or 'incomplete'}" for r in kept[:3]
    )
    return f" Kept though incomplete, never offered for deletion, as the best evaluated: {said}."


def no_evaluation(metric: str, evals: list, rl: bool) -> str:
    """Why the latest checkpoint is the choice: no evaluation to go by, naming what was looked for."""
    if evals:
        return "no evaluation near a good checkpoint"
    if rl and metric == "val_loss":  # the fallback name: an RL run is judged by a validation score
        return f"the run logs no validation score, such as {_RL_SCORES}"
    return f"no evaluation of {metric}"


def latest_reason(best: dict, skipped_bad: list[dict], rows: list[dict], why: str) -> str:
    """The latest good checkpoint, for want of an evaluation (`why`)."""
    return (
        f"Step {best['step']} is the latest {'complete' if best['complete'] else 'saved'} checkpoint outside any "
        f"bad episode ({why}, so nothing better to go by){skipped_text(skipped_bad)}{inferred_text(rows)}"
        f"{weights_text(best, rows)}."
    )


def weights_text(best: dict, rows: list[dict]) -> str:
    """Says plainly that the recommended checkpoint's weights are not in the folder, and what is."""
    if best["complete"]:
        return ""
    name = str(best.get("path") or "").rstrip("/").rsplit("/", 1)[-1] or f"checkpoint-{best['step']}"
    state_only = [r for r in rows if r["_state_only"]]
    if best["_state_only"]:
        here = "only its trainer_state.json is"
    elif state_only:
        names = " and ".join(f"checkpoint-{r['step']}'s" for r in state_only[:3])
        here = f"only {names} trainer_state.json {'is' if len(state_only) == 1 else 'are'}"
    else:
        here = "no checkpoint folder of this run was seen"
    return f"; {name}'s weights are not here: {here}"


def skipped_text(skipped: list[dict]) -> str:
    if not skipped:
        return ""
    steps = ", ".join(str(r["step"]) for r in skipped[:5])
    rules = sorted(registry.ids_with(unsafe_checkpoint=True))
    kinds = ", ".join(rules[:-1]) + f" or {rules[-1]}" if len(rules) > 1 else rules[0]
    return f"; not considered: step(s) {steps}, saved inside an episode that spoils the weights ({kinds})"


def scored_reason(
    best: dict,
    scored: list[dict],
    skipped: list[dict],
    metric: str,
    direction: str,
    rows: list[dict],
    evals: list[tuple[int, float]],
) -> str:
    """The best-evaluated checkpoint among `scored`, with the alternatives and what was left out."""
    word = "lowest" if direction == "min" else "highest"
    where = ""
    if best["_eval_step"] != best["step"]:
        where = f" (evaluated at step {best['_eval_step']}, the latest evaluation before this save; none was at its step)"
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
    if sign * top_value < min(sign * r["value"] for r in scored):
        missed = f"; the best evaluation overall, {fmt(top_value)} at step {top_step}, has no {kind}checkpoint near it"
    # a tie within the evaluations' noise is said as one (the tie's rule follows)
    has = "has" if all(sign * r["value"] >= sign * best["value"] for r in scored) else "ties for"
    return (
        f"Step {best['step']} {has} the {word} {metric}, {fmt(best['value'])}{where}, among {len(scored)} {kind}"
        f"checkpoint(s){alternatives}{missed}{skipped_text(skipped)}{inferred_text(rows)}"
        f"{weights_text(best, rows)}."
    )


def tie_text(noise: float, tied: list[dict], best: dict, rule: str) -> str:
    """The stated rule that broke a tie: values closer than the evaluations' own noise are equal."""
    steps = ", ".join(f"{r['step']} ({fmt(r['value'])})" for r in tied if r is not best)
    return (
        f"; step(s) {steps} are within the evaluations' own noise ({noise_text(noise)}) of it, a tie, which goes to "
        f"{rule}."
    )


def inferred_text(rows: list[dict]) -> str:
    inferred = [r for r in rows if r["inferred"]]
    if not inferred:
        return ""
    # say only what the run's files gave: each inferred checkpoint carries what it was inferred from
    sources = sorted({r.get("_from") or "the run's trainer_state.json" for r in inferred})
    which = (
        "the checkpoints were"
        if len(inferred) == len(rows)
        else f"{len(inferred)} of the {len(rows)} checkpoints were"
    )
    return (
        f"; {which} inferred from {' and '.join(sources)} (no folder of theirs seen on disk: check it exists), "
        "so there is no deletion advice for them"
    )


def interrupted_text(step: int | None, rows: list[dict]) -> str:
    """A failed run's save that was under way when it failed: named, and why it is not counted."""
    if step is None:
        return ""
    name = next((r["path"] for r in rows if r["inferred"]), "") or ""
    verl = name.rsplit("/", 1)[-1].startswith("global_step_")
    folder = f"global_step_{step}" if verl else f"the save at step {step}"
    return (
        f" {folder} is not counted: the run failed right after step {step - 1}, while (or before) saving it, "
        "and a save the failure interrupted is not complete."
    )
