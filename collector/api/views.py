"""The JSON the API returns, built from the store. The CLI's `--json` calls the same functions, so the two
never drift. Each function takes the store and plain arguments and returns JSON-able data (floats may be
NaN or infinite: the API writes them as bare `NaN` / `Infinity`, which Python's json module reads)."""

from __future__ import annotations

import functools
import math

from collector.advice.errors import error_episodes
from collector.advice.verl_saves import verl_save_freq
from collector.api import alert_actions, run_files
from collector.api.run_state import run_status
from collector.core.roles import RL_ROLES, role_of
from collector.detect import registry
from collector.detect.config import DetectConfig
from collector.detect.rules import UNSAFE_CHECKPOINT_RULES
from collector.detect.runlevel import STALLED
from collector.detect.thresholds import thresholds_for
from collector.ingest.fs import root_state
from collector.store import alerts as store_alerts
from collector.store import read as store_read
from collector.store.db import Store

VERSION = "0.1.0"


class NotFound(LookupError):
    """The named run, alert or metric does not exist; the message says which."""


def _open_counts(counts: dict, run: str) -> dict:
    return counts.get(run, {"error": 0, "warn": 0, "info": 0})


def _latest_by_role(stats: list[dict], role: str) -> float | None:
    best = None
    for s in stats:
        if role_of(s["metric"]) == role and (best is None or s["last_step"] > best["last_step"]):
            best = s
    return best["last_value"] if best else None


# What checkpoint advice reads besides the checkpoint index: evaluation series and these alerts' steps.
_EVAL_ROLES = ("val_loss", "val_score", "eval_metric")
_BAD_RULES = tuple(sorted(UNSAFE_CHECKPOINT_RULES))
# (database, run) -> (what the recommendation was built from, the recommended step): the overview would
# otherwise rebuild every run's advice (every evaluation series, a TOML read) on every refresh.
_RECOMMENDED: dict[tuple[str, str], tuple[tuple, int | None]] = {}


def _recommended_step(store: Store, r: dict, stats: list[dict], signature: tuple | None) -> int | None:
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
            if role_of(s["metric"]) in _EVAL_ROLES
        ),
        _detect_config(store, r["path"]),  # the resolver re-reads a changed runwatch.toml
    )
    key = (str(store.path), r["id"])
    cached = _RECOMMENDED.get(key)
    if cached is not None and cached[0] == inputs:
        return cached[1]
    rec = checkpoints(store, r["id"]).get("recommended")
    step = rec["step"] if rec else None
    _RECOMMENDED[key] = (inputs, step)
    return step


def runs(store: Store) -> list[dict]:
    """Every run with its state, latest losses, open alerts and recommended checkpoint step."""
    counts = store_read.open_alert_counts(store)
    signatures = store_read.advice_signatures(store, _BAD_RULES)
    stats_by_run: dict[str, list[dict]] = {}
    for s in store_read.metric_stats(store):
        stats_by_run.setdefault(s["run"], []).append(s)
    with_checkpoints = store_alerts.runs_with_checkpoints(store)
    stalled = store_read.runs_with_open_alert(store, STALLED)
    errors = store_read.open_error_alerts(store)
    out = []
    for r in store_read.runs(store):
        stats = stats_by_run.get(r["id"], [])
        summary = _run_summary(
            store,
            r,
            stats,
            counts,
            r["id"] in with_checkpoints,
            r["id"] in stalled,
            signatures.get(r["id"]),
        )
        out.append(summary | anomaly(errors.get(r["id"])))
    return out


def anomaly(error_alert: dict | None) -> dict:
    """`anomaly_detected` and `anomaly_reason` of a run from its first unresolved error alert (the
    trainer's own state, `status`, is left as it is)."""
    if error_alert is None:
        return {"anomaly_detected": False, "anomaly_reason": None}
    a = error_alert
    where = f" on {a['metric']}" if a["metric"] else ""
    return {
        "anomaly_detected": True,
        "anomaly_reason": f"{a['rule']}{where} at step {a['first_step']}: {a['message']}",
    }


@functools.lru_cache(maxsize=4096)
def _save_freq(config: str | None) -> int | None:
    """verl's save frequency from a run's stored config text, parsed once per distinct text (every overview
    refresh asks it for each run)."""
    return verl_save_freq(store_read.parse_json(config))


def _run_summary(
    store: Store,
    r: dict,
    stats: list[dict],
    counts: dict,
    has_checkpoints: bool,
    stalled: bool,
    signature: tuple | None,
) -> dict:
    recommended = None
    # A lone trainer_state.json or a verl log naming its save_freq has no checkpoint folders to index (its
    # advice infers them); a run with evaluations and no checkpoint seen is told its best evaluation's step.
    if (
        has_checkpoints
        or r["format"] == "hf_trainer_state"
        or any(role_of(s["metric"]) in _EVAL_ROLES for s in stats)
        or _save_freq(r["config"]) is not None
    ):
        recommended = _recommended_step(store, r, stats, signature)
    state = root_state(r["path"])["state"]
    return {
        "id": r["id"],
        "path": r["path"],
        "format": r["format"],
        "status": run_status(r, stalled, state != "disconnected"),
        "root_state": state,
        "last_step": r["last_step"],
        "total_steps": r["total_steps"],
        "updated_at": r["updated_at"],
        "last_point_at": r["last_point_at"],
        "train_loss": _latest_by_role(stats, "loss"),
        "val_loss": _latest_by_role(stats, "val_loss"),
        "open_alerts": _open_counts(counts, r["id"]),
        "recommended_step": recommended,
        "judged_to": r["detected_to"],  # a stored backlog being judged: the step alerts are up to; else None
    }


def run(store: Store, run_id: str) -> dict:
    """One run: its summary plus config, status file content, metrics with point counts, sources."""
    found = store_read.runs(store, run_id)
    if not found:
        raise NotFound(f"no run {run_id!r}")
    r = found[0]
    stats = store_read.metric_stats(store, run_id)
    has_checkpoints = bool(store_alerts.checkpoints(store, run_id))
    stalled = run_id in store_read.runs_with_open_alert(store, STALLED)
    signature = store_read.advice_signatures(store, _BAD_RULES).get(run_id)
    out = _run_summary(
        store, r, stats, store_read.open_alert_counts(store), has_checkpoints, stalled, signature
    )
    out |= anomaly(store_read.open_error_alerts(store).get(run_id))
    out["config"] = store_read.parse_json(r["config"])
    out["status_info"] = store_read.parse_json(r["status_info"])
    out["metrics"] = [
        {
            "metric": s["metric"],
            "points": s["points"],
            "last_step": s["last_step"],
            "role": role_of(s["metric"]),
        }
        for s in stats
    ]
    out["sources"], out["skipped_files"] = run_files.files_of(store, run_id)
    out["failing_files"] = run_files.failing_of(store, run_id)
    out["decorations"] = panel_decorations(_detect_config(store, r["path"]))
    return out


def panel_decorations(config: DetectConfig) -> dict[str, dict]:
    """Role -> what a chart of that role draws beside the data, from the run's resolved thresholds:
    `normal_band` [low, high] (the healthy range) and `warning_line` (above it is trouble)."""
    return registry.decorations(config)


def run_view(
    store: Store,
    run_id: str,
    points: int = 2000,
    start: int | None = None,
    end: int | None = None,
    with_series: bool = True,
) -> dict:
    """What a run page draws first, in one answer: `run`'s fields plus `series` (every metric over
    [start, end], at most `points` buckets each; empty without `with_series`), `alerts` (all states, newest
    first) and `checkpoint_steps` (the indexed checkpoints' steps, without computing advice)."""
    out = run(store, run_id)
    names = [m["metric"] for m in out["metrics"]]
    series = metrics(store, run_id, names, points, start, end)["series"] if with_series and names else []
    index = store_alerts.checkpoints(store, run_id)
    return out | {
        "series": series,
        "alerts": alerts_with_actions(store, store_alerts.list_alerts(store, run=run_id)),
        "checkpoint_steps": sorted(c["step"] for c in index),
    }


def problem_files(store: Store, run_id: str | None = None) -> list[dict]:
    """`run_files.problem_files` of one run (NotFound for an unknown one) or of all runs."""
    if run_id is not None:
        _require_run(store, run_id)
    return run_files.problem_files(store, run_id)


def _require_run(store: Store, run_id: str) -> None:
    if not store_read.runs(store, run_id):
        raise NotFound(f"no run {run_id!r}")


def metrics(
    store: Store,
    run_id: str,
    metric_names: list[str],
    points: int = 2000,
    start: int | None = None,
    end: int | None = None,
    after: int | None = None,
) -> dict:
    """`{"run", "series": [...]}`: each named metric raw or downsampled (see `store_read.series`)."""
    _require_run(store, run_id)
    if points < 1:
        raise ValueError(f"points must be at least 1, got {points}")
    series = [store_read.series(store, run_id, m, points, start, end, after) for m in metric_names]
    return {"run": run_id, "series": series}


def epochs(store: Store, run_id: str, metric: str) -> dict:
    """Per-epoch statistics of `metric` when the run logs an epoch metric (else an empty list)."""
    _require_run(store, run_id)
    names = [s["metric"] for s in store_read.metric_stats(store, run_id)]
    epoch_metric = next((m for m in names if role_of(m) == "epoch"), None)
    rows = store_read.epochs(store, run_id, metric, epoch_metric) if epoch_metric else []
    return {"run": run_id, "metric": metric, "epoch_metric": epoch_metric, "epochs": rows}


def alerts(
    store: Store,
    run: str | None = None,
    rule: str | None = None,
    severity: str | None = None,
    state: str = "all",
) -> list[dict]:
    """Alerts matching the filters (state `open`, `acked`, `resolved` or `all`), newest first, each with its
    `action` (`collector.api.alert_actions`)."""
    if state not in (*store_alerts.STATES, "all"):
        raise ValueError(f"state must be open, acked, resolved or all, not {state!r}")
    return alerts_with_actions(
        store, store_alerts.list_alerts(store, run=run, rule=rule, severity=severity, state=state)
    )


def alert(store: Store, alert_id: int) -> dict:
    try:
        return alerts_with_actions(store, [store_alerts.get_alert(store, alert_id)])[0]
    except store_alerts.AlertNotFound as e:
        raise NotFound(str(e)) from None


def alerts_with_actions(store: Store, listed: list[dict]) -> list[dict]:
    """Each alert (as the store lists it) with its `action`, from the same checkpoint advice as the run's
    checkpoint page; the collector's alert sinks ask it too, so a delivered event and the API agree."""
    return alert_actions.with_actions(store, listed, checkpoints, _detect_config)


def set_alert_state(store: Store, alert_id: int, state: str, note: str | None) -> dict:
    try:
        return store_alerts.set_state(store, alert_id, state, note)
    except store_alerts.AlertNotFound as e:
        raise NotFound(str(e)) from None


def _detect_config(store: Store, run_path: str | None) -> DetectConfig:
    """The thresholds detection uses for this run (the one resolver of `collector.detect.thresholds`)."""
    return thresholds_for(store.path).for_run(run_path)


def checkpoints(store: Store, run_id: str, metric: str | None = None, direction: str | None = None) -> dict:
    """The checkpoint index with the recommendation, deletable steps and bytes freed (advice's shape).

    `metric`/`direction` choose the deciding evaluation (else the run's `[advice]` config, else the run's
    own best metric or validation loss); raises ValueError for a direction other than min or max.
    """
    from collector.advice import recommend as advice

    found = store_read.runs(store, run_id)
    if not found:
        raise NotFound(f"no run {run_id!r}")
    r = found[0]
    config = store_read.parse_json(r["config"])
    index = store_alerts.checkpoints(store, run_id)
    stats = store_read.metric_stats(store, run_id)
    evals_by_metric: dict[str, list[tuple[int, float]]] = {}
    for s in stats:
        if role_of(s["metric"]) in _EVAL_ROLES or s["metric"] == metric:
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
        config=_detect_config(store, r["path"]),
        run=context,
    )
    status = store_read.parse_json(r["status_info"])
    return result | ({"status": status.get("state", status.get("status"))} if status else {})


def health(store: Store, run_id: str) -> list[dict]:
    """The run's health checklist (see `collector.advice.health`)."""
    from collector.advice import health as health_mod

    found = store_read.runs(store, run_id)
    if not found:
        raise NotFound(f"no run {run_id!r}")
    by_role: dict[str, tuple[list[int], list[float]]] = {}
    for s in store_read.metric_stats(store, run_id):
        role = role_of(s["metric"])
        if role in ("loss", "val_loss", "grad_norm", "lr", "step_time") and role not in by_role:
            series = store_read.series(store, run_id, s["metric"], points=5000)
            by_role[role] = (series["steps"], series["values"])
    run_info = store_read.parse_json(found[0]["config"])
    status = store_read.parse_json(found[0]["status_info"])
    return health_mod.health_checklist(
        by_role,
        store_alerts.checkpoints(store, run_id),
        status,
        run_info,
        found[0]["latest_marker"],
        config=_detect_config(store, found[0]["path"]),
    )


def compare(store: Store, run_ids: list[str]) -> dict:
    """The runs side by side and the config keys whose values differ between them."""
    summaries = [run(store, r) for r in run_ids]
    flat = {s["id"]: _flatten(s.get("config") or {}) for s in summaries}
    keys = sorted({k for f in flat.values() for k in f})
    diff = []
    for key in keys:
        values = {rid: flat[rid].get(key) for rid in flat}
        if len({repr(v) for v in values.values()}) > 1:
            diff.append({"key": key, "values": values})
    return {"runs": summaries, "config_diff": diff}


def _flatten(obj: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in obj.items():
        if k == "log_history":
            continue  # the whole history is not a setting
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def finite(value: float | None) -> float | None:
    """NaN and infinities as None (for table output where a blank reads better)."""
    return None if value is None or not math.isfinite(value) else value
