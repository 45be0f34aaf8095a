"""The runs: the overview, one run, its page's first view, runs side by side, and a person's stop request.

`GET /api/runs/{run:path}` matches every deeper path too, so this router is included after every other route
of a run (`collector.api.app.ROUTERS`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel, Field

from collector.api import models
from collector.api import runs as api_runs
from collector.api import stop as api_stop
from collector.api.http import TOKEN, EncodedJSON, JSONWithNaN, RunsDep, StoreDep
from collector.api.routes.alerts import NOTE_MAX_CHARS

router = APIRouter(dependencies=TOKEN)


class StopRequest(BaseModel):
    reason: str = Field("", max_length=NOTE_MAX_CHARS)  # (the trainer reads 64 KB of the request at most)


@router.get("/api/runs", response_model=list[models.RunSummary])
def runs(
    service: RunsDep,
    max_age_s: Annotated[
        float,
        Query(
            ge=0,
            description="a team's lake: the overview read at most this long ago will do (0: built now); the "
            "X-Runwatch-Lake-Snapshot, -As-Of and -Age-S headers say which",
        ),
    ] = api_runs.OVERVIEW_MAX_AGE_S,
) -> EncodedJSON:
    body, as_of = api_runs.runs_answer(service, max_age_s)
    return EncodedJSON(body, headers=as_of)


@router.get("/api/compare", response_model=models.Compare)
def compare(service: RunsDep, run: Annotated[list[str], Query()]) -> JSONWithNaN:
    return JSONWithNaN(api_runs.compare(service, run))


@router.post("/api/runs/{run:path}/stop", response_model=models.StopAnswer)
def stop(store: StoreDep, run: str, body: StopRequest | None = None) -> JSONWithNaN:
    try:
        return JSONWithNaN(api_stop.request_stop(store, run, body.reason if body else ""))
    except ValueError as e:  # `stop refused: WHY`
        raise HTTPException(409, str(e)) from None
    except OSError as e:
        raise HTTPException(500, f"run {run!r}: the stop request could not be written ({e})") from None


@router.get("/api/runs/{run:path}/stop", response_model=models.StopState | None)
def stop_state(store: StoreDep, run: str) -> JSONWithNaN:
    """The run's last stop request and what became of it (null when none is known)."""
    return JSONWithNaN(api_stop.stop_state(store, run))


@router.get("/api/runs/{run:path}/view", response_model=models.RunView)
def run_view(
    service: RunsDep,
    run: str,
    points: Annotated[int, Query(ge=1, description="at most this many buckets per metric")] = 2000,
    start: int | None = None,
    end: int | None = None,
    series: Annotated[bool, Query(description="false: the run, alerts and checkpoints only")] = True,
) -> JSONWithNaN:
    return JSONWithNaN(api_runs.run_view(service, run, points, start, end, series))


@router.get("/api/runs/{run:path}", response_model=models.RunDetail)
def one_run(service: RunsDep, run: str) -> JSONWithNaN:
    return JSONWithNaN(api_runs.run(service, run))
