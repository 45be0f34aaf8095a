"""A run's checkpoint advice as the API answers it (`GET /api/runs/{run}/checkpoints`), and the recommended
step the overview shows, rebuilt only when something the advice reads has changed."""

from __future__ import annotations

from collector.advice.errors import error_episodes
from collector.advice.evaluations import quality_direction
from collector.api.run_state import run_status
from collector.core.roles import RL_ROLES, role_of
from collector.detect.config import DetectConfig
from collector.detect.rules import UNSAFE_CHECKPOINT_RULES
from collector.detect.thresholds import thresholds_for
from collector.runs.lookup import find_run
from collector.store import alerts as store_alerts
from collector.store import read as store_read
from collector.store.db import Store

# What checkpoint advice reads besides the checkpoint index: evaluation series and these alerts' steps.
EVAL_ROLES = ("val_loss", "val_score", "eval_metric")
BAD_RULES = tuple(sorted(UNSAFE_CHECKPOINT_RULES))
# (database, run) -> (what the recommendation was built from, the recommended step): the overview would
# otherwise rebuild every run's advice (every evaluation series, a TOML read) on every refresh.
_RECOMMENDED: dict[tuple[str, str], tuple[tuple, int | None]] = {}


def is_evaluation(metric: str) -> bool:
    """Whether the advice reads this metric's series: a validation loss or score, another evaluation, or one
    that judges the weights (eval_accuracy, ROUGE, BLEU; `evaluations.quality_direction`)."""
    return role_of(metric) in EVAL_ROLES or quality_direction(metric) is not None


def detect_config(store: Store, run_path: str | None) -> DetectConfig:
    """The thresholds detection uses for this run (the one resolver of `collector.detect.thresholds`)."""
    return thresholds_for(store.path).for_run(run_path)


def recommended_step(store: Store, r: dict, stats: list[dict], signature: tuple | None) -> int | None:
    """The run's recommended checkpoint step, rebuilt only when something advice reads has changed: its
    checkpoint index, bad-step alerts or replaced points (`signature`), its evaluation series' counts and
    last values, its config, status and latest marker, or its resolved thresholds."""
    inputs = (
        signature,
        hash(r["config"]),
        hash(r["status_info"]),
        r["latest_marker"],
        r["format"],
        tuple(
            (s["metric"], s["points"], s["last_step"], repr(s["last_value"]))
            for s in stats
            if is_evaluation(s["metric"])
        ),
        detect_config(store, r["path"]),  # the resolver re-reads a changed runwatch.toml
    )
    key = (str(store.path), r["id"])
    cached = _RECOMMENDED.get(key)
    if cached is not None and cached[0] == inputs:
        return cached[1]
    rec = checkpoints(store, r["id"]).get("recommended")
    step = rec["step"] if rec else None
    _RECOMMENDED[key] = (inputs, step)
    return step


def checkpoints(store: Store, run_id: str, metric: str | None = None, direction: str | None = None) -> dict:
    """The checkpoint index with the recommendation, deletable steps and bytes freed (advice's shape).

    `metric`/`direction` choose the deciding evaluation (else the run's `[advice]` config, else the run's
    own best metric or validation loss); raises ValueError for a direction other than min or max.
    """
    from collector.advice import recommend as advice

    r = find_run(store, run_id)
    config = store_read.parse_json(r["config"])
    index = store_alerts.checkpoints(store, run_id)
    stats = store_read.metric_stats(store, run_id)
    evals_by_metric: dict[str, list[tuple[int, float]]] = {}
    for s in stats:
        if is_evaluation(s["metric"]) or s["metric"] == metric:
            series = store_read.series(store, run_id, s["metric"], points=10**9)
            evals_by_metric[s["metric"]] = list(zip(series["steps"], series["values"], strict=True))
    alerts = store_alerts.list_alerts(store, run=run_id)
    bad = [(a["first_step"], a["last_step"]) for a in alerts if a["rule"] in UNSAFE_CHECKPOINT_RULES]
    latest = r["latest_marker"]  # verl: what a resume would load, never offered for deletion
    if latest is None and r["format"] == "hf_trainer_state":
        latest = (config or {}).get("global_step")
    context = advice.RunContext(
        last_step=max((s["last_step"] for s in stats), default=None),
        state=run_status(r, stalled=False),
        rl=any(role_of(s["metric"]) in RL_ROLES for s in stats),
        errors=error_episodes(alerts, stats),
    )
    result = advice.advice_for_run(
        index,
        evals_by_metric,
        bad,
        config,
        latest,
        metric=metric,
        direction=direction,
        config=detect_config(store, r["path"]),
        run=context,
    )
    status = store_read.parse_json(r["status_info"])
    return result | ({"status": status.get("state", status.get("status"))} if status else {})


def health(store: Store, run_id: str) -> list[dict]:
    """The run's health checklist (see `collector.advice.health`)."""
    from collector.advice import health as health_mod

    r = find_run(store, run_id)
    by_role: dict[str, tuple[list[int], list[float]]] = {}
    for s in store_read.metric_stats(store, run_id):
        role = role_of(s["metric"])
        if role in ("loss", "val_loss", "grad_norm", "lr", "step_time") and role not in by_role:
            series = store_read.series(store, run_id, s["metric"], points=5000)
            by_role[role] = (series["steps"], series["values"])
    return health_mod.health_checklist(
        by_role,
        store_alerts.checkpoints(store, run_id),
        store_read.parse_json(r["status_info"]),
        store_read.parse_json(r["config"]),
        r["latest_marker"],
        config=detect_config(store, r["path"]),
    )
