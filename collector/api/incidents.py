"""Incidents as the API answers them (`GET /api/incidents`, `GET /api/runs/{run}/incidents`, the run view's
`incidents`): `collector.runs.incidents.stored_incidents` over the stored alerts, each with the `action` of
its most severe alert that has one (the same object `GET /api/alerts` gives that alert). Acknowledging or
resolving an incident (`POST /api/incidents/{id}/ack`, `/resolve`) acts on its alerts, the evidence."""

from __future__ import annotations

from collector.core.severity import SEVERITIES, Severity
from collector.runs.incidents import stored_incidents
from collector.runs.lookup import NotFound, find_run
from collector.runs.service import RunService
from collector.store import alerts as store_alerts
from collector.store import lake_reader
from collector.store.db import Store

STATES = (*store_alerts.STATES, "all")


def incidents(
    runs: RunService,
    run: str | None = None,
    severity: str | None = None,
    state: str = "all",
    rule: str | None = None,
    acted: list[dict] | None = None,
) -> list[dict]:
    """The incidents (of `run`, else of every run) at `severity` (exactly), in `state`, naming `rule`, the most
    recent first; NotFound for an unknown run, ValueError for a state or severity that is not one. `acted`:
    the run's alerts already given their actions (`RunService.with_actions`), so its advice is not built twice."""
    if state not in STATES:
        raise ValueError(f"state must be open, acked, resolved or all, not {state!r}")
    if severity is not None and severity not in SEVERITIES:
        raise ValueError(f"severity must be info, warn or error, not {severity!r}")
    store = runs.store
    if run is not None:
        find_run(store, run)
    found = [
        i.to_dict()
        for i in stored_incidents(store, run, acted)
        if (state == "all" or i.state == state)
        and (severity is None or i.severity == severity)
        and (rule is None or rule in i.rules)
    ]
    listed = with_actions(runs, sorted(found, key=lambda i: (-i["last_step"], i["run"], -i["id"])), acted)
    return with_changes(store, listed)


def with_changes(store: Store, listed: list[dict]) -> list[dict]:
    """On a team's lake, each incident with `change`: the last ack or resolve of its alerts asked through the
    lake and what became of it (`models.AlertChangeState`: the collector that owns the run applies it, or
    refuses it saying why); None where none was asked, and everywhere alone (a change is applied at once)."""
    if not store.lake_reader:
        return listed
    cur = store.cursor()
    asked = lake_reader.alert_changes(cur, sorted({a for i in listed for a in i["alert_ids"]}))
    for i in listed:
        last = max(
            (asked[a] for a in i["alert_ids"] if a in asked), key=lambda c: c["asked_at"], default=None
        )
        i["change"] = None if last is None else last | lake_reader.owner(cur, i["run"])
    return listed


def with_actions(runs: RunService, listed: list[dict], acted: list[dict] | None = None) -> list[dict]:
    """Each incident with `action`: its most severe alert's that has one, the earliest among equals (None
    where none is due). `acted`: their alerts already given their actions, else they are read and given here."""
    if acted is None:
        wanted = sorted({a for i in listed for a in i["alert_ids"]})
        acted = runs.with_actions(store_alerts.list_alerts(runs.store, ids=wanted)) if wanted else []
    alerts = {a["id"]: a for a in acted}
    for i in listed:
        acting = [alerts[a] for a in i["alert_ids"] if a in alerts and alerts[a].get("action") is not None]
        worst = max(acting, key=lambda a: Severity(a["severity"]).rank, default=None)  # max keeps the first
        i["action"] = worst["action"] if worst is not None else None
    return listed


def set_incident_state(runs: RunService, incident_id: int, state: str, note: str | None) -> dict:
    """Acknowledge (`acked`) or resolve (`resolved`) an incident: each of its alerts that is not yet so (to
    ack: the open ones; to resolve: all not resolved) gets that state, `note` and a history entry, as
    `POST /api/alerts/{id}/ack|resolve` would give it. Returns `changed` (those alerts' ids) and `incident`
    (as `incidents` lists it, afterwards: a running run's incident whose alerts are all resolved stays open
    for its keep-firing window). NotFound for an id that is no incident.
    On a team's lake the change is asked of the collector that owns the run, as for one alert: `changed` is
    empty, `requested` names the alerts asked, `state_requested` the state; every reader shows it once that
    collector has applied and published it."""
    if state not in ("acked", "resolved"):
        raise ValueError(f"an incident can be set to acked or resolved, not {state!r}")
    store = runs.store
    try:
        run = store_alerts.get_alert(store, incident_id)["run"]
    except store_alerts.AlertNotFound:
        raise NotFound(f"no incident with id {incident_id}") from None
    incident = _incident_with(store, run, incident_id)
    if incident["id"] != incident_id:
        raise NotFound(
            f"no incident with id {incident_id}: alert {incident_id} is evidence of incident {incident['id']}"
        )
    wanted = {"open"} if state == "acked" else {"open", "acked"}
    alerts = store_alerts.list_alerts(store, ids=sorted(incident["alert_ids"]))
    changed = [a["id"] for a in alerts if a["state"] in wanted]
    if store.lake_reader:
        lake_reader.ask_alert_states(store.cursor(), changed, state, note)
        found = with_changes(store, with_actions(runs, [incident]))[0]
        return {"incident": found, "changed": [], "requested": changed, "state_requested": state}
    for alert_id in changed:
        store_alerts.set_state(store, alert_id, state, note)
    after = _incident_with(store, run, incident_id)
    return {"incident": with_actions(runs, [after])[0], "changed": changed}


def _incident_with(store: Store, run: str, alert_id: int) -> dict:
    """The run's incident holding alert `alert_id`."""
    return next(i.to_dict() for i in stored_incidents(store, run) if alert_id in i.alert_ids)
