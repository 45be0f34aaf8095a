"""`/api/incidents` and `/api/runs/{run}/incidents`: the alerts grouped by trouble (`collector.api.incidents`);
acknowledge and resolve an incident (all of its alerts)."""

from __future__ import annotations

from fastapi import APIRouter

from collector.api import incidents as api_incidents
from collector.api import models
from collector.api.http import TOKEN, JSONWithNaN, RunsDep
from collector.api.routes.alerts import Note

router = APIRouter(dependencies=TOKEN)


@router.get("/api/incidents", response_model=list[models.Incident])
def incidents(
    runs: RunsDep,
    run: str | None = None,
    severity: str | None = None,
    state: str = "all",
    rule: str | None = None,
) -> JSONWithNaN:
    return JSONWithNaN(api_incidents.incidents(runs, run, severity, state, rule))


@router.get("/api/runs/{run:path}/incidents", response_model=list[models.Incident])
def run_incidents(
    runs: RunsDep, run: str, severity: str | None = None, state: str = "all", rule: str | None = None
) -> JSONWithNaN:
    return JSONWithNaN(api_incidents.incidents(runs, run, severity, state, rule))


@router.post("/api/incidents/{incident_id}/ack", response_model=models.IncidentChange)
def ack(runs: RunsDep, incident_id: int, body: Note | None = None) -> JSONWithNaN:
    note = body.note if body else None
    return JSONWithNaN(api_incidents.set_incident_state(runs, incident_id, "acked", note))


@router.post("/api/incidents/{incident_id}/resolve", response_model=models.IncidentChange)
def resolve(runs: RunsDep, incident_id: int, body: Note | None = None) -> JSONWithNaN:
    note = body.note if body else None
    return JSONWithNaN(api_incidents.set_incident_state(runs, incident_id, "resolved", note))
