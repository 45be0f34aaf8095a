"""Playback of a run's stored history as server-sent events, paced as the run happened.

Events, each `event: NAME` plus `data: {"event": NAME, ...}` (the name is in the JSON too, for clients that
read only `data:` lines):

- `playback_info`: `run`, `start_step`, `end_step`, `steps` (steps with points in the range), `total` (points),
  `speed`, `timing` (`wall_time`: the gaps between the points' wall times divided by `speed`; or
  `steps_per_second`: `speed` steps a second, when some point in the range has no wall time).
- `point`: `step`, `metric`, `value`, `wall_time`, in step order.
- `alert`: an alert of the run (as `GET /api/alerts` lists it) once the playback reaches its `first_step`.
- `progress`: `step`, `progress` (0-1: the share of the range's steps sent), after each step.
- `playback_complete`: `steps`, `total`, `alerts` (how many were sent); then the stream ends.

A pause in the run longer than `MAX_GAP_S` (a stall, a resume days later) plays as `MAX_GAP_S` of run time.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from itertools import groupby

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from collector.api import alerts as api_alerts
from collector.runs.service import RunService
from collector.store import read as store_read
from collector.store.db import Store

SPEED_MIN, SPEED_MAX = 0.1, 10.0
MAX_GAP_S = 10.0
BATCH = 2000  # points per read


class PlaybackError(ValueError):
    """A playback request that cannot be served; the message says which value and why (HTTP 422)."""


def check_request(start_step: int | None, end_step: int | None, speed: float) -> None:
    """Raise PlaybackError for a speed outside 0.1-10 or a range that is empty or negative."""
    if not SPEED_MIN <= speed <= SPEED_MAX:
        raise PlaybackError(
            f"speed {speed:g} is outside {SPEED_MIN:g}-{SPEED_MAX:g} (a multiple of the run's real time: "
            f"1 plays it as it happened, 10 ten times faster)"
        )
    if start_step is not None and start_step < 0:
        raise PlaybackError(f"start_step {start_step} is negative")
    if end_step is not None and start_step is not None and end_step < start_step:
        raise PlaybackError(f"end_step {end_step} is before start_step {start_step}")


def advance(
    run_clock: float, last_wall: float | None, wall: float | None, first: bool
) -> tuple[float, float | None]:
    """The run time (seconds, before dividing by the speed) at which the next step plays, and its wall time.

    With wall times: the gap since the previous step's, capped at MAX_GAP_S (a clock set back counts 0);
    without: one second a step. The first step plays at once."""
    if first:
        return run_clock, wall
    if wall is None or last_wall is None:
        return run_clock + 1.0, wall
    return run_clock + min(max(wall - last_wall, 0.0), MAX_GAP_S), wall


def _event(name: str, body: dict) -> bytes:
    return f"event: {name}\ndata: {json.dumps({'event': name, **body}, allow_nan=True, default=str)}\n\n".encode()


async def paced_steps(
    gone: Callable[[], Awaitable[bool]],
    store: Store,
    run: str,
    metrics: list[str] | None,
    start_step: int,
    end_step: int,
    speed: float,
    timed: bool,
) -> AsyncIterator[tuple[int, list[tuple]]]:
    """Each step of the range with its points `(step, metric, value, wall_time)`, in step order, each one
    when its time comes (see `advance`; `timed`: the range's points all have wall times). Ends early once
    `gone()` says the client went away."""
    sent = 0
    started = time.monotonic()
    run_clock = 0.0  # seconds of the run played so far (gaps capped at MAX_GAP_S)
    last_wall: float | None = None
    after = start_step - 1
    while after < end_step:
        if await gone():
            return
        rows = await run_in_threadpool(store_read.points_from, store, run, metrics, after, BATCH, True)
        rows = [r for r in rows if r[0] <= end_step]
        if len(rows) == BATCH and rows[0][0] != rows[-1][0]:
            rows = [r for r in rows if r[0] != rows[-1][0]]  # the last step may go on in the next read
        if not rows:
            return
        for step, group in groupby(rows, key=lambda r: r[0]):
            points = list(group)
            wall = min(p[3] for p in points) if timed else None
            run_clock, last_wall = advance(run_clock, last_wall, wall, first=not sent)
            wait = started + run_clock / speed - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
                if await gone():
                    return
            yield step, points
            sent += 1
            after = step


async def playback_events(
    request: Request,
    runs: RunService,
    run: str,
    metrics: list[str] | None,
    start_step: int,
    end_step: int,
    speed: float,
) -> AsyncIterator[bytes]:
    """The events of one playback (see the module docstring); stops early when the client goes away."""
    store = runs.store
    plan = await run_in_threadpool(store_read.playback_range, store, run, metrics, start_step, end_step)
    timed = plan["timed"]
    yield _event(
        "playback_info",
        {
            "run": run,
            "start_step": start_step,
            "end_step": end_step,
            "steps": plan["steps"],
            "total": plan["total"],
            "speed": speed,
            "timing": "wall_time" if timed else "steps_per_second",
        },
    )
    # as GET /api/alerts lists them (action too)
    alerts = await run_in_threadpool(api_alerts.alerts, runs, run)
    pending = sorted(
        (a for a in alerts if start_step <= a["first_step"] <= end_step),
        key=lambda a: (a["first_step"], a["id"]),
    )
    sent_steps = sent_alerts = 0
    steps = paced_steps(request.is_disconnected, store, run, metrics, start_step, end_step, speed, timed)
    async for step, points in steps:
        chunk = [
            _event("point", {"step": s, "metric": m, "value": v, "wall_time": w}) for s, m, v, w in points
        ]
        while pending and pending[0]["first_step"] <= step:
            chunk.append(_event("alert", pending.pop(0)))
            sent_alerts += 1
        sent_steps += 1
        progress = sent_steps / plan["steps"] if plan["steps"] else 1.0
        chunk.append(_event("progress", {"step": step, "progress": round(min(progress, 1.0), 6)}))
        yield b"".join(chunk)
    if await request.is_disconnected():
        return
    for alert in pending:  # raised at a step with no point of the chosen metrics
        yield _event("alert", alert)
        sent_alerts += 1
    yield _event("playback_complete", {"steps": sent_steps, "total": plan["total"], "alerts": sent_alerts})
