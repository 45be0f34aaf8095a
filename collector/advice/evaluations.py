"""Which evaluation judges a run's checkpoints and what each checkpoint carries. Pure: no I/O.

- `choose_metric(run_info, available_metrics, evals_by_metric=None) -> (metric, direction)`: the evaluation
  that decides the checkpoint to keep.
- `quality_direction(metric)`: "min"/"max" for an evaluation that judges the weights (a loss, an error rate, a
  score), None for what an evaluation logs about itself (runtime, log-probabilities).
- `evaluation_of(evals, step, previous)`: the evaluation a checkpoint saved at `step` carries.
- `tie_margin(evals)`: how far two evaluations of equally good weights may differ (closer is a tie).
- `best_by_every_evaluation(evals_by_metric, steps)`: the checkpoints best by some evaluation (never deletable).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from collector.advice.hf_saves import checkpoint_step
from collector.core.roles import eval_metric_direction, role_of
from collector.detect.base import eval_noise


def evaluation_of(
    evals: list[tuple[int, float]], step: int, previous: int | None
) -> tuple[int | None, float | None]:
    """The evaluation a checkpoint saved at `step` carries: the one at its step, else the latest one since the
    previous checkpoint (`previous`), the nearest state of these weights that was evaluated; never a later
    evaluation (it judged weights trained further than this save)."""
    since = [e for e in evals if (previous is None or e[0] > previous) and e[0] <= step]
    return since[-1] if since else (None, None)


def tie_margin(evals: list[tuple[int, float]]) -> float:
    """How far two evaluations of equally good weights may differ: the evaluations' own noise (`eval_noise`,
    the figure the validation alerts use), capped at 1% of the smallest value so a trend's curve is not taken
    for noise; 0 with fewer than three evaluations. Values closer than this are a tie."""
    values = [v for _, v in evals]
    return min(eval_noise(values), 0.01 * min(abs(v) for v in values)) if values else 0.0


# evaluations that say how good the weights are (a loss, an error rate, a score), as opposed to what an
# evaluation also logs about itself (runtime, samples per second, token counts, logits, log-probabilities)
_QUALITY = re.compile(
    r"(loss|wer|cer|perplexity|ppl|rouge|bleu|meteor|chrf|acc(uracy|uracies)?|f1|exact_match|pass@|score"
    r"|/reward/mean|reward(/mean)?$|margins)",
    re.IGNORECASE,
)
# among a run's quality evaluations with no validation loss or score, which decides: the first kind it logs
_PREFERRED = (
    "acc",
    "exact_match",
    "f1",
    "rouge-l",
    "rougel",
    "rouge",
    "bleu",
    "pass@",
    "score",
    "wer",
    "cer",
)


def quality_direction(metric: str) -> str | None:
    """ "min" or "max" for an evaluation that judges the weights (eval_loss, accuracy, ROUGE, BLEU, WER, a
    validation reward), None for one that does not (eval_runtime, eval_logps/chosen, a reward's std)."""
    if role_of(metric) in ("val_loss", "val_score"):
        return eval_metric_direction(metric)
    if not metric.lower().startswith(("eval", "val", "test", "predict")) or "std" in metric.lower():
        return None
    return eval_metric_direction(metric) if _QUALITY.search(metric) else None


def best_by_every_evaluation(
    evals_by_metric: dict[str, list[tuple[int, float]]], checkpoint_steps: Iterable[int]
) -> dict[int, str]:
    """The checkpoints that are best by some evaluation the run logs (loss or score, each in its own
    direction), evaluated at their own step: {step: "metric value"}. None of them is ever deletable."""
    steps = set(checkpoint_steps)
    kept: dict[int, str] = {}
    for name, series in sorted(evals_by_metric.items()):
        at_saves = [(s, v) for s, v in series if s in steps and v is not None and math.isfinite(v)]
        if not at_saves:
            continue
        direction = quality_direction(name)
        if direction is None:
            continue
        sign = 1 if direction == "min" else -1
        step, value = min(at_saves, key=lambda e: (sign * e[1], -e[0]))
        kept.setdefault(step, f"{name} {value:.4g}")
    return kept


def choose_metric(
    run_info: dict | None,
    available_metrics: Iterable[str],
    evals_by_metric: dict[str, list[tuple[int, float]]] | None = None,
) -> tuple[str, str]:
    """(metric, direction) that decides the best checkpoint.

    The run's own `metric_for_best_model` (HF: "wer" is logged as "eval_wer"; `greater_is_better` when
    given) wins; failing that, the evaluation metric whose value at the run's best step equals its
    `best_metric` (a trainer_state.json copy has no TrainingArguments); failing that, the validation loss
    (min), then a validation score (max), then the quality evaluation the run has (accuracy, exact match, F1,
    ROUGE-L, ROUGE, BLEU, pass@k, a score, WER: the first of these it logs, in its own direction; never
    eval_runtime and kin). With none of these, ("val_loss", "min").
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
    # no validation loss or score: the evaluation the run has (accuracy, ROUGE, BLEU, WER ...)
    judged = sorted(
        n for n in names if quality_direction(n) is not None and (evals_by_metric or {}).get(n, True)
    )
    for word in _PREFERRED:
        for name in judged:
            if word in name.lower():
                return name, quality_direction(name) or "max"
    if judged:
        return judged[0], quality_direction(judged[0]) or "max"
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
