"""A run's metric series: downsampled or raw (`/metrics`), per epoch (`/epochs`), and as server-sent events
(`/stream`: the live feed, or a paced playback of the stored history, `collector.api.playback`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from itertools import groupby
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from collector.api import models, playback
from collector.api import series as api_series
from collector.api.http import TOKEN, JSONWithNaN, RunsDep, StoreDep
from collector.runs.lookup import find_run
from collector.store import read as store_read
from collector.store.db import Store

STREAM_BATCH = 2000  # points per read while streaming
LIVE_POLL_S = 0.1  # how often the live stream looks for new points once caught up

router = APIRouter(dependencies=TOKEN)


@router.get("/api/runs/{run:path}/metrics", response_model=models.SeriesAnswer)
def metrics(
    store: StoreDep,
    run: str,
    metric: Annotated[list[str], Query(description="metric name; repeat for several")],
    points: Annotated[
        int, Query(ge=1, description="at most this many buckets; raw when fewer points")
    ] = 2000,
    start: int | None = None,
    end: int | None = None,
    after: Annotated[int | None, Query(description="raw points with step > after (live polling)")] = None,
) -> JSONWithNaN:
    return JSONWithNaN(api_series.metrics(store, run, metric, points, start, end, after))


@router.get("/api/runs/{run:path}/epochs", response_model=models.Epochs)
def epochs(store: StoreDep, run: str, metric: str) -> JSONWithNaN:
    return JSONWithNaN(api_series.epochs(store, run, metric))


@router.get(
    "/api/runs/{run:path}/stream",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {"schema": models.EVENT_STREAM}}}},
)
async def stream(
    request: Request,
    runs: RunsDep,
    run: str,
    metric: Annotated[list[str] | None, Query()] = None,
    start_step: Annotated[
        int | None, Query(description="play back the stored history from this step (default: live only)")
    ] = None,
    end_step: Annotated[
        int | None, Query(description="last step played back (default: the run's last)")
    ] = None,
    speed: Annotated[
        float, Query(description="playback speed, a multiple of real time: 0.1 to 10 (see docs)")
    ] = 1.0,
) -> StreamingResponse:
    store = runs.store
    last = (await run_in_threadpool(find_run, store, run))["last_step"]
    last = -1 if last is None else last
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    if start_step is None and end_step is None:
        events = _live_events(request, store, run, metric, last)
        return StreamingResponse(events, media_type="text/event-stream", headers=headers)
    try:
        playback.check_request(start_step, end_step, speed)
    except playback.PlaybackError as e:
        raise HTTPException(422, f"run {run!r}: {e}") from None
    end = end_step if end_step is not None else last
    events = playback.playback_events(request, runs, run, metric, start_step or 0, end, speed)
    return StreamingResponse(events, media_type="text/event-stream", headers=headers)


async def _live_events(
    request: Request, store: Store, run: str, metrics: list[str] | None, after: int
) -> AsyncIterator[bytes]:
    """Server-sent events of the live feed: every point past `after` in step order, as it is stored."""
    while True:
        if await request.is_disconnected():
            return
        rows = await run_in_threadpool(store_read.points_from, store, run, metrics, after, STREAM_BATCH)
        if len(rows) == STREAM_BATCH and rows[0][0] != rows[-1][0]:
            # The last step may continue past this batch: leave it for the next read, whole.
            last_step = rows[-1][0]
            rows = [r for r in rows if r[0] != last_step]
        if not rows:
            await asyncio.sleep(LIVE_POLL_S)
            continue
        for step, group in groupby(rows, key=lambda r: r[0]):
            chunk = "".join(
                "data: " + json.dumps({"step": step, "metric": m, "value": v}, allow_nan=True) + "\n\n"
                for _, m, v in group
            )
            yield chunk.encode()
            after = step
