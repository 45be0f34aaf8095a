"""The training platform's monitoring routes (the seed's "Phase 1" document), served by the collector.

A job is a run (`collector.api.monitoring.resolve_job`: its id, or the unique end of one). Every route needs
the collector's token: `Authorization: Bearer <token>`; a WebSocket may instead give it as `?token=<token>` or
as the subprotocol `bearer.<token>` (a browser's `new WebSocket(url, ["runwatch", "bearer." + token])`: the answer selects
`runwatch`), since a browser cannot set the header; a WebSocket from a web page must come from a loopback
origin, the collector's own, or one listed in `RUNWATCH_ALLOWED_ORIGINS` (comma-separated).

- `GET /api/monitoring/{job_id}/metrics?start_step=&end_step=&limit=`: `job_id`, `start_step`, `end_step`,
  `metrics` (one record per step: `step`, `timestamp` (ISO 8601, UTC; null without a wall time), and the
  step's metrics), `total` (records), `truncated` and `next_start_step` (past `limit` steps, 10,000 by default).
- `GET /api/monitoring/{job_id}/metrics/anomalies`: `job_id`, `anomalies` (the run's incidents, every state,
  with their actions, as `GET /api/runs/{run}/incidents` lists them).
- `POST /api/monitoring/{job_id}/metrics/sync`: the run's files are read again now (queued for the next
  ingest cycle): `job_id`, `queued`.
- WebSocket `/api/monitoring/{job_id}/live`: `{"type": "metric", "data": {"step", "timestamp", ...metrics}}`
  for each step stored after the connection, `{"type": "status", "data": {"job_id", "status",
  "current_step", "total_steps", "anomaly_detected"}}` first and at each change, and `{"type": "finished",
  "status"}` once the run has completed, failed or stopped (then the socket closes).
- WebSocket `/api/monitoring/{job_id}/playback?start_step=&end_step=&speed=` (0.1-10, paced as
  `collector.api.playback` paces the SSE playback): `{"type": "playback_info", "total_metrics",
  "start_step", "end_step", "speed"}`, one `{"type": "metric", "data", "progress" (0-1), "current_index"
  (0-based), "total"}` per step, then `{"type": "playback_complete"}`.
A WebSocket request that cannot be served gets `{"type": "error", "message"}` and close code 1008; a wrong
token is refused before the handshake (HTTP 403).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, WebSocket, WebSocketDisconnect
from starlette.concurrency import run_in_threadpool

from collector.api import incidents as api_incidents
from collector.api import models, monitoring, playback
from collector.api.http import TOKEN, Collector, CollectorDep, JSONWithNaN, RunsDep, StoreDep
from collector.store import read as store_read
from collector.store.db import Store

LIVE_POLL_S = 0.1  # how often the live socket looks for new points
STATUS_EVERY_S = 1.0  # how often it looks at the run's status
SUBPROTOCOL = "runwatch"

router = APIRouter(prefix="/api/monitoring", dependencies=TOKEN, tags=["monitoring"])
# WebSockets check the token themselves (`open_socket`): a browser sends it in the URL or the subprotocol.
sockets = APIRouter(prefix="/api/monitoring", tags=["monitoring"])


def job(store: Store, job_id: str) -> str:
    try:
        return monitoring.resolve_job(store, job_id)
    except monitoring.JobNotFound as e:
        raise HTTPException(404, str(e)) from None


@router.get("/{job_id:path}/metrics/anomalies", response_model=models.JobAnomalies)
def anomalies(runs: RunsDep, job_id: str) -> JSONWithNaN:
    run = job(runs.store, job_id)
    return JSONWithNaN({"job_id": run, "anomalies": api_incidents.incidents(runs, run)})


@router.post("/{job_id:path}/metrics/sync", response_model=models.JobSync)
def sync(c: CollectorDep, job_id: str) -> JSONWithNaN:
    run = job(c.store, job_id)
    if c.request_ingest is None:
        raise HTTPException(503, "this collector does not take ingest requests")
    (found,) = store_read.runs(c.store, run)
    path = Path(found["path"])
    if not path.is_absolute():  # `host:/path`: a run on another machine
        raise HTTPException(409, f"run {run!r} is on another machine: its files are read on every cycle")
    if not any(path == r or path.is_relative_to(r) for r in c.roots if isinstance(r, Path)):
        raise HTTPException(403, f"run {run!r}: {path} is outside the watched roots; refused")
    c.request_ingest([path])
    return JSONWithNaN({"job_id": run, "queued": [str(path)]})


@router.get("/{job_id:path}/metrics", response_model=models.JobMetrics)
def metrics(
    store: StoreDep,
    job_id: str,
    start_step: Annotated[int, Query(ge=0, description="first step (default 0)")] = 0,
    end_step: Annotated[int | None, Query(ge=0, description="last step (default: the run's last)")] = None,
    limit: Annotated[
        int, Query(ge=1, le=1_000_000, description="at most this many steps")
    ] = monitoring.HISTORY_LIMIT,
) -> JSONWithNaN:
    run = job(store, job_id)
    if end_step is not None and end_step < start_step:
        raise HTTPException(422, f"end_step {end_step} is before start_step {start_step}")
    return JSONWithNaN(monitoring.history(store, run, start_step, end_step, limit))


async def open_socket(ws: WebSocket, job_id: str) -> str | None:
    """Check the token and the origin, accept, and resolve the job; None (the socket closed) when refused."""
    c: Collector = ws.app.state.collector
    offered = ws.scope.get("subprotocols") or []
    header = ws.headers.get("authorization", "")
    given = [header[7:] if header.lower().startswith("bearer ") else "", ws.query_params.get("token") or ""]
    given += [p[len("bearer.") :] for p in offered if p.startswith("bearer.")]
    token_ok = any(g and secrets.compare_digest(g.encode(), c.token.encode()) for g in given)
    if not token_ok or not monitoring.origin_allowed(ws.headers.get("origin"), ws.headers.get("host")):
        await ws.close(code=1008)  # before the handshake: the client sees HTTP 403
        return None
    await ws.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in offered else None)
    try:
        return await run_in_threadpool(monitoring.resolve_job, c.store, job_id)
    except monitoring.JobNotFound as e:
        await refuse(ws, str(e))
        return None


@sockets.websocket("/{job_id:path}/live")
async def live(ws: WebSocket, job_id: str) -> None:
    run = await open_socket(ws, job_id)
    if run is None:
        return
    store: Store = ws.app.state.collector.store
    gone = Disconnect(ws)
    try:
        found = await run_in_threadpool(store_read.runs, store, run)
        after = found[0]["last_step"] if found[0]["last_step"] is not None else -1
        # The status first, as promised, even when steps were stored since the run was read (a live run):
        # their metrics follow it (the loop's first status check sends it again only if it changed).
        status: dict | None = await run_in_threadpool(monitoring.job_status, ws.app.state.collector.runs, run)
        await send(ws, {"type": "status", "data": status})
        checked = 0.0
        while not gone.is_set():
            batch = monitoring.BATCH
            rows = await run_in_threadpool(store_read.points_from, store, run, None, after, batch, True)
            if len(rows) == batch and rows[0][0] != rows[-1][0]:
                rows = [r for r in rows if r[0] != rows[-1][0]]  # the last step may go on in the next read
            for record in monitoring.records(rows):
                await send(ws, {"type": "metric", "data": record})
                after = record["step"]
            if time.monotonic() - checked >= STATUS_EVERY_S:  # (also while lines keep coming)
                now = await run_in_threadpool(monitoring.job_status, ws.app.state.collector.runs, run)
                if now != status:
                    status = now
                    await send(ws, {"type": "status", "data": now})
                if now["status"] in monitoring.FINISHED and not rows:  # every stored step sent first
                    await send(ws, {"type": "finished", "status": now["status"]})
                    await ws.close()
                    return
                checked = time.monotonic()
            if rows:
                continue  # more may be stored: read on at once
            await asyncio.sleep(LIVE_POLL_S)
    except (WebSocketDisconnect, RuntimeError):
        return  # the client went away mid-send
    finally:
        gone.stop()


@sockets.websocket("/{job_id:path}/playback")
async def play(
    ws: WebSocket, job_id: str, start_step: int | None = None, end_step: int | None = None, speed: float = 1.0
) -> None:
    run = await open_socket(ws, job_id)
    if run is None:
        return
    try:
        playback.check_request(start_step, end_step, speed)
    except playback.PlaybackError as e:
        await refuse(ws, f"run {run!r}: {e}")
        return
    store: Store = ws.app.state.collector.store
    gone = Disconnect(ws)
    try:
        found = await run_in_threadpool(store_read.runs, store, run)
        last = found[0]["last_step"]
        start = start_step or 0
        end = end_step if end_step is not None else (-1 if last is None else last)
        plan = await run_in_threadpool(store_read.playback_range, store, run, None, start, end)
        total = plan["steps"]
        info = {"type": "playback_info", "total_metrics": total, "start_step": start, "end_step": end}
        await send(ws, info | {"speed": speed})
        index = 0
        steps = playback.paced_steps(gone.gone, store, run, None, start, end, speed, plan["timed"])
        async for _step, points in steps:
            (record,) = monitoring.records(points)
            progress = round((index + 1) / total, 6) if total else 1.0
            body = {"type": "metric", "data": record, "progress": progress}
            await send(ws, body | {"current_index": index, "total": total})
            index += 1
        if not gone.is_set():
            await send(ws, {"type": "playback_complete"})
            await ws.close()
    except (WebSocketDisconnect, RuntimeError):
        return
    finally:
        gone.stop()


async def send(ws: WebSocket, message: dict) -> None:
    await ws.send_text(json.dumps(message, allow_nan=True, default=str))


async def refuse(ws: WebSocket, message: str) -> None:
    await send(ws, {"type": "error", "message": message})
    await ws.close(code=1008)


class Disconnect:
    """Reads (and ignores) what the client sends; set once it has closed the socket."""

    def __init__(self, ws: WebSocket) -> None:
        self.event = asyncio.Event()
        self.task = asyncio.ensure_future(self._read(ws))

    async def _read(self, ws: WebSocket) -> None:
        try:
            while (await ws.receive())["type"] != "websocket.disconnect":
                pass
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            self.event.set()

    def is_set(self) -> bool:
        return self.event.is_set()

    async def gone(self) -> bool:
        return self.event.is_set()

    def stop(self) -> None:
        self.task.cancel()
