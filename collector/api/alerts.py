"""The alerts as the API answers them (`GET /api/alerts`, one alert, ack and resolve), each with its `action`
(`collector.runs.service.RunService.with_actions`), built from the same checkpoint advice as the run's
checkpoint page."""

from __future__ import annotations

from collector.runs.lookup import NotFound
from collector.runs.service import RunService
from collector.store import alerts as store_alerts
from collector.store import lake_reader
from collector.store.db import Store


def alerts(
    runs: RunService,
    run: str | None = None,
    rule: str | None = None,
    severity: str | None = None,
    state: str = "all",
) -> list[dict]:
    """Alerts matching the filters (state `open`, `acked`, `resolved` or `all`), newest first, each with its
    `action`."""
    if state not in (*store_alerts.STATES, "all"):
        raise ValueError(f"state must be open, acked, resolved or all, not {state!r}")
    listed = store_alerts.list_alerts(runs.store, run=run, rule=rule, severity=severity, state=state)
    return runs.with_actions(listed)


def alert(runs: RunService, alert_id: int) -> dict:
    """One alert with its history and `action`; NotFound for an unknown id."""
    try:
        return runs.with_actions([store_alerts.get_alert(runs.store, alert_id)])[0]
    except store_alerts.AlertNotFound as e:
        raise NotFound(str(e)) from None


def set_alert_state(store: Store, alert_id: int, state: str, note: str | None) -> dict:
    """Acknowledge or resolve an alert (with an optional note); the alert as stored. NotFound for an unknown id.
    On a team's lake the change is asked of the collector that raised the alert (`state_requested`; the alert
    shows it once that collector has applied and published it)."""
    if store.lake_reader:
        if state not in ("acked", "resolved"):
            raise ValueError(f"an alert can be set to acked or resolved, not {state!r}")
        try:
            found = store_alerts.get_alert(store, alert_id)
        except store_alerts.AlertNotFound as e:
            raise NotFound(str(e)) from None
        lake_reader.ask_alert_states(store.cursor(), [alert_id], state, note)
        return found | {"state_requested": state}
    try:
        return store_alerts.set_state(store, alert_id, state, note)
    except store_alerts.AlertNotFound as e:
        raise NotFound(str(e)) from None
