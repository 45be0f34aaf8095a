"""A run's advice: which checkpoint to keep and what to delete (`/checkpoints`), and its health checklist
(`/health`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from collector.api import checkpoints as api_checkpoints
from collector.api.http import TOKEN, JSONWithNaN, StoreDep

router = APIRouter(dependencies=TOKEN)


@router.get("/api/runs/{run:path}/checkpoints")
def checkpoints(
    store: StoreDep,
    run: str,
    metric: Annotated[str | None, Query(description="the evaluation metric that decides")] = None,
    direction: Annotated[str | None, Query(description="min or max: which way is better")] = None,
) -> JSONWithNaN:
    return JSONWithNaN(api_checkpoints.checkpoints(store, run, metric or None, direction or None))


@router.get("/api/runs/{run:path}/health")
def run_health(store: StoreDep, run: str) -> JSONWithNaN:
    return JSONWithNaN(api_checkpoints.health(store, run))
