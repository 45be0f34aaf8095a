"""The alerts as the API answers them (`GET /api/alerts`, one alert, ack and resolve), each with its `action`
(`collector.api.alert_actions`), built from the same checkpoint advice as the run's checkpoint page."""

from __future__ import annotations

from collector.api import alert_actions
from collector.api import checkpoints as api_checkpoints
from collector.runs.lookup import NotFound
from collector.store import alerts as store_alerts
from collector.store.db import Store


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
    """One alert with its history and `action`; NotFound for an unknown id."""
    try:
        return alerts_with_actions(store, [store_alerts.get_alert(store, alert_id)])[0]
    except store_alerts.AlertNotFound as e:
        raise NotFound(str(e)) from None


def alerts_with_actions(store: Store, listed: list[dict]) -> list[dict]:
    """Each alert (as the store lists it) with its `action`, from the same checkpoint advice as the run's
    checkpoint page; the collector's alert sinks ask it too, so a delivered event and the API agree."""
    return alert_actions.with_actions(
        store, listed, api_checkpoints.checkpoints, api_checkpoints.detect_config
    )


def set_alert_state(store: Store, alert_id: int, state: str, note: str | None) -> dict:
    """Acknowledge or resolve an alert (with an optional note); the alert as stored. NotFound for an unknown id."""
    try:
        return store_alerts.set_state(store, alert_id, state, note)
    except store_alerts.AlertNotFound as e:
        raise NotFound(str(e)) from None
