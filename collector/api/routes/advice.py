"""A run's advice: which checkpoint to keep and what to delete (`/checkpoints`), and its health checklist
(`/health`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from collector.api import models
from collector.api.http import TOKEN, JSONWithNaN, RunsDep

router = APIRouter(dependencies=TOKEN)


@router.get("/api/runs/{run:path}/checkpoints", response_model=models.Advice)
def checkpoints(
    runs: RunsDep,
    run: str,
    metric: Annotated[str | None, Query(description="the evaluation metric that decides")] = None,
    direction: Annotated[str | None, Query(description="min or max: which way is better")] = None,
) -> JSONWithNaN:
    return JSONWithNaN(runs.advice(run, metric or None, direction or None))


@router.get("/api/runs/{run:path}/health", response_model=list[models.ChecklistItem])
def run_health(runs: RunsDep, run: str) -> JSONWithNaN:
    return JSONWithNaN(runs.health(run))
