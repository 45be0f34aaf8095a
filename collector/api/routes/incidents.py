"""`/api/incidents` and `/api/runs/{run}/incidents`: the alerts grouped by trouble (`collector.api.incidents`);
acknowledge and resolve an incident (all of its alerts)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict

from collector.api import incidents as api_incidents
from collector.api.http import TOKEN, JSONWithNaN, RunsDep
from collector.api.routes.alerts import Note

router = APIRouter(dependencies=TOKEN)


class Incident(BaseModel):
    """One incident as `GET /api/incidents` lists it (README: `incidents`)."""

    model_config = ConfigDict(extra="allow")

    id: int
    run: str
    rule: str
    rules: list[str]
    metric: str
    metrics: list[str]
    severity: str  # info, warn, error
    state: str  # open, acked, resolved
    first_step: int
    last_step: int
    message: str
    alert_count: int
    alert_ids: list[int]
    steps: list[int]
    worst_value: float | None
    worst_step: int | None
    points: int
    escalations: list[dict[str, Any]]
    action: dict[str, Any] | None


class IncidentChange(BaseModel):
    """The answer of acknowledging or resolving an incident: the alerts whose state changed, and the
    incident afterwards."""

    changed: list[int]
    incident: Incident


@router.get("/api/incidents")
def incidents(
    runs: RunsDep,
    run: str | None = None,
    severity: str | None = None,
    state: str = "all",
    rule: str | None = None,
) -> JSONWithNaN:
    return JSONWithNaN(api_incidents.incidents(runs, run, severity, state, rule))


@router.get("/api/runs/{run:path}/incidents")
def run_incidents(
    runs: RunsDep, run: str, severity: str | None = None, state: str = "all", rule: str | None = None
) -> JSONWithNaN:
    return JSONWithNaN(api_incidents.incidents(runs, run, severity, state, rule))


@router.post("/api/incidents/{incident_id}/ack", response_model=IncidentChange)
def ack(runs: RunsDep, incident_id: int, body: Note | None = None) -> JSONWithNaN:
    note = body.note if body else None
    return JSONWithNaN(api_incidents.set_incident_state(runs, incident_id, "acked", note))


@router.post("/api/incidents/{incident_id}/resolve", response_model=IncidentChange)
def resolve(runs: RunsDep, incident_id: int, body: Note | None = None) -> JSONWithNaN:
    note = body.note if body else None
    return JSONWithNaN(api_incidents.set_incident_state(runs, incident_id, "resolved", note))
