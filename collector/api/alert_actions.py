"""Alerts as the API returns them: each with its `action` (`collector.advice.action`): for error alerts and
the alerts that name a checkpoint, the checkpoint to go back to and the command that resumes from it; null
for the others. One advice per run, so every alert of a run and its checkpoint page speak with one voice."""

from __future__ import annotations

from collections.abc import Callable

from collector.advice import action as action_mod
from collector.api import run_files
from collector.detect.config import DetectConfig
from collector.detect.rules import UNSAFE_CHECKPOINT_RULES
from collector.store import alerts as store_alerts
from collector.store import read as store_read
from collector.store.db import Store

AdviceOf = Callable[[Store, str], dict]  # the run's checkpoint advice (`api.checkpoints.checkpoints`)
ConfigOf = Callable[[Store, str | None], DetectConfig]  # the run's resolved thresholds


def with_actions(store: Store, alerts: list[dict], advice_of: AdviceOf, config_of: ConfigOf) -> list[dict]:
    """`alerts` (dicts as the store lists them), each given an `action` (None where none is due)."""
    by_run: dict[str, list[dict]] = {}
    for a in alerts:
        a["action"] = None
        if action_mod.needs_action(a):
            by_run.setdefault(a["run"], []).append(a)
    for run_id, wanting in by_run.items():
        try:
            context = _run_context(store, run_id, advice_of, config_of)
        except LookupError:  # the run went away between the two reads: its alerts keep no action
            continue
        for a in wanting:
            a["action"] = action_mod.action_for_alert(a, *context)
    return alerts


def _run_context(store: Store, run_id: str, advice_of: AdviceOf, config_of: ConfigOf) -> tuple:
    """(advice, trainer, run path, bad episodes, restart margin) of one run, as `action_for_alert` takes them."""
    found = store_read.runs(store, run_id)
    if not found:
        raise LookupError(run_id)
    r = found[0]
    advice = advice_of(store, run_id)
    index = store_alerts.checkpoints(store, run_id)
    sources, _ = run_files.files_of(store, run_id)
    trainer = action_mod.trainer_of(
        r["format"],
        [s["format"] for s in sources],
        store_read.parse_json(r["config"]),
        [c.get("path") for c in index],
        [s["metric"] for s in store_read.metric_stats(store, run_id)],
    )
    bad = [
        (a["first_step"], a["last_step"])
        for a in store_alerts.list_alerts(store, run=run_id)
        if a["rule"] in UNSAFE_CHECKPOINT_RULES
    ]
    margin = config_of(store, r["path"]).advice.restart_before_steps
    return advice, trainer, r["path"], bad, margin
