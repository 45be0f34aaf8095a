"""Incidents as the API answers them (`GET /api/incidents`, `GET /api/runs/{run}/incidents`, the run view's
`incidents`): `collector.detect.incidents.stored_incidents` over the stored alerts, each with the `action` of
its most severe alert that has one (the same object `GET /api/alerts` gives that alert)."""

from __future__ import annotations

from collector.core.severity import SEVERITIES, Severity
from collector.detect.incidents import stored_incidents
from collector.runs.lookup import find_run
from collector.runs.service import RunService
from collector.store import alerts as store_alerts

STATES = ("open", "acked", "resolved", "all")


def incidents(
    runs: RunService,
    run: str | None = None,
    severity: str | None = None,
    state: str = "all",
    rule: str | None = None,
) -> list[dict]:
    """The incidents (of `run`, else of every run) at `severity` (exactly), in `state`, naming `rule`, the most
    recent first; NotFound for an unknown run, ValueError for a state or severity that is not one."""
    if state not in STATES:
        raise ValueError(f"state must be open, acked, resolved or all, not {state!r}")
    if severity is not None and severity not in SEVERITIES:
        raise ValueError(f"severity must be info, warn or error, not {severity!r}")
    store = runs.store
    if run is not None:
        find_run(store, run)
    found = [
        i.to_dict()
        for i in stored_incidents(store, run)
        if (state == "all" or i.state == state)
        and (severity is None or i.severity == severity)
        and (rule is None or rule in i.rules)
    ]
    return with_actions(runs, sorted(found, key=lambda i: (-i["last_step"], i["run"], -i["id"])))


def with_actions(runs: RunService, listed: list[dict]) -> list[dict]:
    """Each incident with `action`: its most severe alert's that has one, the earliest among equals (None
    where none is due)."""
    wanted = sorted({a for i in listed for a in i["alert_ids"]})
    alerts = (
        {a["id"]: a for a in runs.with_actions(store_alerts.list_alerts(runs.store, ids=wanted))}
        if wanted
        else {}
    )
    for i in listed:
        acting = [alerts[a] for a in i["alert_ids"] if a in alerts and alerts[a].get("action") is not None]
        worst = max(acting, key=lambda a: Severity(a["severity"]).rank, default=None)  # max keeps the first
        i["action"] = worst["action"] if worst is not None else None
    return listed
