"""What a run's advice reads, gathered once, and what is built from it: the checkpoint advice, each alert's
action, the health checklist. Pure: a `RunInputs` comes from the store (`collector.runs.service`) or from a
file read in memory (`scripts/detect_report.py`), and the same functions judge both."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from collector.advice import action as action_mod
from collector.advice import health as health_mod
from collector.advice.errors import error_episodes
from collector.advice.evaluations import quality_direction
from collector.advice.recommend import RunContext, advice_for_run, keep_for_actions
from collector.core.roles import RL_ROLES, role_of
from collector.detect.rules import UNSAFE_CHECKPOINT_RULES
from collector.settings.config import DetectConfig

# The evaluation series the advice reads (besides a metric asked for by name).
EVAL_ROLES = ("val_loss", "val_score", "eval_metric")
# The series the health checklist reads, one of each role.
CHECKLIST_ROLES = ("loss", "val_loss", "grad_norm", "lr", "step_time")

Series = tuple[list[int], list[float]]


# Cached: the overview asks it of every run's every metric (30,000 times at 10,000 runs).
@functools.lru_cache(maxsize=4096)
def is_evaluation(metric: str) -> bool:
    """Whether the advice reads this metric's series: a validation loss or score, another evaluation, or one
    that judges the weights (eval_accuracy, ROUGE, BLEU; `evaluations.quality_direction`)."""
    return role_of(metric) in EVAL_ROLES or quality_direction(metric) is not None


@dataclass(frozen=True)
class RunInputs:
    """One run as its advice, actions and checklist read it. `series(metric, points)` reads a metric's
    (steps, values) when asked (whole, or at most `points` buckets); the rest is read once."""

    run_id: str
    path: str | None
    format: str | None
    info: dict | None  # run.json, or the trainer_state.json's info
    status: dict | None  # status.json
    state: str | None  # the run's status word (`collector.runs.status.run_status`, stalled aside)
    latest_marker: int | None  # what a resume would load (verl's marker), else None
    last_step: int | None  # the run's last logged step
    checkpoints: list[dict]  # the checkpoint index
    stats: list[dict]  # per metric: metric, points, first_step, last_step (...)
    alerts: list[dict]  # every alert of the run, all states
    thresholds: DetectConfig
    series: Callable[[str, int | None], Series]
    source_formats: list[str] = field(default_factory=list)

    def metrics_of(self, roles: tuple[str, ...]) -> list[str]:
        return [s["metric"] for s in self.stats if role_of(s["metric"]) in roles]

    def bad_episodes(self) -> list[tuple[int, int]]:
        """(first, last) step of the alerts a checkpoint saved inside of is never recommended."""
        return [
            (a["first_step"], a["last_step"]) for a in self.alerts if a["rule"] in UNSAFE_CHECKPOINT_RULES
        ]


# The run states in which a run no longer goes on (as incidents judge it: `collector.detect.incidents.run_steps`).
ENDED = ("completed", "failed", "stopped")


def advise(run: RunInputs, metric: str | None = None, direction: str | None = None) -> dict:
    """The run's checkpoint advice (`collector.advice.recommend.advice_for_run`'s shape, plus `status`,
    status.json's state, when there is one). `metric`/`direction` choose the deciding evaluation (else the
    run's `[advice]` config, else its own best metric or validation loss); ValueError for a direction other
    than min or max. A checkpoint an alert's action resumes from (`resume_points`, by the run's own advice,
    as the actions are built) is never deletable: it is `kept`, saying which action."""
    own = _advise(run, None, None)
    result = own if metric is None and direction is None else _advise(run, metric, direction)
    return keep_for_actions(result, resume_points(run, own))


def resume_points(run: RunInputs, advice: dict) -> list[tuple[int, str]]:
    """(step, rule) of each checkpoint an action of the run's alerts resumes from, for the alerts that still
    count: not resolved, or of a run still going (its incident may be waiting out its keep-firing window). A
    resolved alert of an ended run no longer keeps its checkpoint."""
    going = run.state not in ENDED
    live = [
        dict(a)  # (copies: the actions are built here only to read their steps)
        for a in run.alerts
        if action_mod.needs_action(a) and (going or a.get("state") != "resolved")
    ]
    if not live:
        return []
    add_actions(run, live, advice)
    return [(a["action"]["restart_step"], a["rule"]) for a in live if a["action"]["restart_step"] is not None]


def _advise(run: RunInputs, metric: str | None, direction: str | None) -> dict:
    """`advise` before the actions' resume points are kept."""
    evals = {}
    for s in run.stats:
        if is_evaluation(s["metric"]) or s["metric"] == metric:
            steps, values = run.series(s["metric"], None)
            evals[s["metric"]] = list(zip(steps, values, strict=True))
    latest = run.latest_marker  # verl: what a resume would load, never offered for deletion
    if latest is None and run.format == "hf_trainer_state":
        latest = (run.info or {}).get("global_step")
    context = RunContext(
        last_step=run.last_step,
        state=run.state,
        rl=bool(run.metrics_of(tuple(RL_ROLES))),
        errors=error_episodes(run.alerts, run.stats),
    )
    result = advice_for_run(
        run.checkpoints,
        evals,
        run.bad_episodes(),
        run.info,
        latest,
        metric=metric,
        direction=direction,
        config=run.thresholds,
        run=context,
    )
    status = run.status
    return result | ({"status": status.get("state", status.get("status"))} if status else {})


def add_actions(run: RunInputs, alerts: list[dict], advice: dict) -> None:
    """Give each of `alerts` (of this run, each needing one) its `action`, from the run's `advice`."""
    trainer = action_mod.trainer_of(
        run.format,
        run.source_formats,
        run.info,
        [c.get("path") for c in run.checkpoints],
        [s["metric"] for s in run.stats],
    )
    margin = run.thresholds.advice.restart_before_steps
    bad = run.bad_episodes()
    for a in alerts:
        a["action"] = action_mod.action_for_alert(a, advice, trainer, run.path, bad, margin)


def checklist(run: RunInputs) -> list[dict]:
    """The run's health checklist (`collector.advice.health`), over the first metric of each role it reads."""
    by_role: dict[str, Series] = {}
    for s in run.stats:
        role = role_of(s["metric"])
        if role in CHECKLIST_ROLES and role not in by_role:
            by_role[role] = run.series(s["metric"], 5000)
    return health_mod.health_checklist(
        by_role, run.checkpoints, run.status, run.info, run.latest_marker, config=run.thresholds
    )
