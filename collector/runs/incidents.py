"""A database's incidents: `collector.detect.incidents` (pure) over the alerts and runs the store holds. The
API, the CLI and the daemon's sinks and stop rules all ask here, so every path that stored the same alerts
answers the same."""

from __future__ import annotations

from collector.detect.incidents import Incident, incidents, run_steps
from collector.store import alerts as store_alerts
from collector.store import read as store_read
from collector.store.db import Store


def stored_incidents(
    store: Store, run: str | None = None, alerts: list[dict] | None = None
) -> list[Incident]:
    """The incidents of the alerts the store holds, of one run or all (`alerts`: those alerts, when the caller
    has just listed them). Reads the store, never writes it."""
    if alerts is None:
        alerts = store_alerts.list_alerts(store, run=run)
    return incidents(alerts, run_steps(store_read.runs(store, run), store_read.metric_stats(store, run)))
