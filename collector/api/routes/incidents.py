"""`/api/incidents` and `/api/runs/{run}/incidents`: the alerts grouped by trouble (`collector.api.incidents`)."""

from __future__ import annotations

from fastapi import APIRouter

from collector.api import incidents as api_incidents
from collector.api.http import TOKEN, JSONWithNaN, RunsDep

router = APIRouter(dependencies=TOKEN)


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
