"""`/api/alerts`: the alerts (with their actions), one alert with its history, acknowledge and resolve."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from collector.api import alerts as api_alerts
from collector.api import models
from collector.api.http import TOKEN, JSONWithNaN, RunsDep, StoreDep

router = APIRouter(dependencies=TOKEN)


# A note is a person's few lines; a bigger one (megabytes) ran DuckDB out of memory on the insert: a 500.
NOTE_MAX_CHARS = 10_000


class Note(BaseModel):
    note: str | None = Field(None, max_length=NOTE_MAX_CHARS)


@router.get("/api/alerts", response_model=list[models.Alert])
def alerts(
    runs: RunsDep,
    run: str | None = None,
    rule: str | None = None,
    severity: str | None = None,
    state: str = "all",
) -> JSONWithNaN:
    return JSONWithNaN(api_alerts.alerts(runs, run, rule, severity, state))


@router.get("/api/alerts/{alert_id}", response_model=models.AlertDetail)
def one_alert(runs: RunsDep, alert_id: int) -> JSONWithNaN:
    return JSONWithNaN(api_alerts.alert(runs, alert_id))


@router.post("/api/alerts/{alert_id}/ack", response_model=models.AlertDetail)
def ack(store: StoreDep, alert_id: int, body: Note | None = None) -> JSONWithNaN:
    return JSONWithNaN(api_alerts.set_alert_state(store, alert_id, "acked", body.note if body else None))


@router.post("/api/alerts/{alert_id}/resolve", response_model=models.AlertDetail)
def resolve(store: StoreDep, alert_id: int, body: Note | None = None) -> JSONWithNaN:
    return JSONWithNaN(api_alerts.set_alert_state(store, alert_id, "resolved", body.note if body else None))
