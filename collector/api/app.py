"""The collector's HTTP API (FastAPI on 127.0.0.1): what the dashboard, the CLI and scripts read and act through.

Every route but `/api/health` needs `Authorization: Bearer <token>` (the token is in `DB.token`, mode 0600).
Responses are JSON; non-finite floats are written as bare `NaN` / `Infinity` (Python's json reads them; a NaN
is a fact about a run, not something to hide). The routes and their shapes are documented at `/docs` and in
docs/architecture.md; the bodies are built by `collector.api.views`, the same functions the CLI's `--json` uses.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator, Callable
from itertools import groupby
from pathlib import Path
from typing import Annotated, Any

import anyio.to_thread
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from collector.api import playback, run_files
from collector.api import stop as api_stop
from collector.api import views as api_views
from collector.api.run_state import health_info
from collector.ingest import fs
from collector.store import read as store_read
from collector.store.db import Store

STREAM_BATCH = 2000  # points per read while streaming
LIVE_POLL_S = 0.1  # how often the live stream looks for new points once caught up


class JSONWithNaN(JSONResponse):
    """JSON that keeps NaN and infinities (as Python's json writes them) instead of failing on them."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, allow_nan=True, separators=(",", ":"), default=str).encode()


class Note(BaseModel):
    note: str | None = None


class IngestRequest(BaseModel):
    paths: list[str]


class StopRequest(BaseModel):
    reason: str = ""


def confine(path: str, roots: list[Path]) -> Path:
    """`path` resolved (symlinks followed) when it lies inside one of `roots` (an `ssh://` path: inside a
    remote root on the same host); else ValueError."""
    resolved = fs.root_path(path, watch=False)
    for root in roots:
        root = fs.root_path(root)
        same_machine = getattr(resolved, "host", None) is getattr(root, "host", None)
        if same_machine and (resolved == root or resolved.is_relative_to(root)):
            return resolved
    raise ValueError(f"{path} is outside the watched roots ({', '.join(map(str, roots))}); refused")


def create_app(
    store: Store,
    db: Path,
    roots: list[Path],
    token: str,
    request_ingest: Callable[[list[Path]], None] | None = None,
) -> FastAPI:
    """The API over `store`. `request_ingest(paths)` queues files or folders (inside the roots) for ingest."""
    app = FastAPI(
        title="runwatch collector",
        version=api_views.VERSION,
        default_response_class=JSONWithNaN,
        description="Runs, metrics (downsampled, min/max/first/last per bucket), alerts, checkpoints and advice.",
    )

    def authorized(request: Request) -> None:
        header = request.headers.get("authorization", "")
        given = header[7:] if header.lower().startswith("bearer ") else ""
        if not given or not secrets.compare_digest(given.encode(), token.encode()):
            raise HTTPException(
                401, f"missing or wrong token: send 'Authorization: Bearer <token>' from {db}.token"
            )

    guard = [Depends(authorized)]

    def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> JSONWithNaN:
        try:
            return JSONWithNaN(fn(store, *args, **kwargs))
        except api_views.NotFound as e:
            raise HTTPException(404, str(e)) from None
        except ValueError as e:
            raise HTTPException(400, str(e)) from None

    def known_run(run: str) -> None:
        """404 naming a run the store does not know (as every route of a run answers)."""
        if not store_read.runs(store, run):
            raise HTTPException(404, f"no run {run!r}")

    @app.get("/api/health")
    async def health() -> JSONWithNaN:
        # Counts only (no token here): which files, and why, come from /api/problem_files.
        body = await run_in_threadpool(
            lambda: (
                health_info(db, roots, api_views.VERSION)
                | {
                    "problem_files": run_files.problem_counts(store),
                    "memory_limit": store_read.memory_limit(store),
                }
            )
        )
        # (read here, in the event loop: the pool's size in force)
        api_threads = anyio.to_thread.current_default_thread_limiter().total_tokens
        return JSONWithNaN(body | {"api_threads": int(api_threads)})

    @app.get("/api/problem_files", dependencies=guard)
    def problem_files(
        run: Annotated[str | None, Query(description="only this run's files")] = None,
    ) -> JSONWithNaN:
        return call(api_views.problem_files, run)

    @app.get("/api/runs", dependencies=guard)
    def runs() -> JSONWithNaN:
        return call(api_views.runs)

    @app.get("/api/runs/{run:path}/metrics", dependencies=guard)
    def metrics(
        run: str,
        metric: Annotated[list[str], Query(description="metric name; repeat for several")],
        points: Annotated[
            int, Query(ge=1, description="at most this many buckets; raw when fewer points")
        ] = 2000,
        start: int | None = None,
        end: int | None = None,
        after: Annotated[int | None, Query(description="raw points with step > after (live polling)")] = None,
    ) -> JSONWithNaN:
        return call(api_views.metrics, run, metric, points, start, end, after)

    @app.get("/api/runs/{run:path}/epochs", dependencies=guard)
    def epochs(run: str, metric: str) -> JSONWithNaN:
        return call(api_views.epochs, run, metric)

    @app.get("/api/runs/{run:path}/checkpoints", dependencies=guard)
    def checkpoints(
        run: str,
        metric: Annotated[str | None, Query(description="the evaluation metric that decides")] = None,
        direction: Annotated[str | None, Query(description="min or max: which way is better")] = None,
    ) -> JSONWithNaN:
        return call(api_views.checkpoints, run, metric or None, direction or None)

    @app.get("/api/runs/{run:path}/health", dependencies=guard)
    def run_health(run: str) -> JSONWithNaN:
        return call(api_views.health, run)

    @app.get("/api/runs/{run:path}/quarantine", dependencies=guard)
    def quarantine(run: str, limit: Annotated[int, Query(ge=1, le=10000)] = 200) -> JSONWithNaN:
        known_run(run)
        return call(lambda s: store_read.quarantined(s, run, limit))

    @app.get("/api/runs/{run:path}/replaced", dependencies=guard)
    def replaced(run: str, metric: str) -> JSONWithNaN:
        known_run(run)
        return call(lambda s: store_read.replaced_points(s, run, metric))

    @app.get("/api/runs/{run:path}/stream", dependencies=guard)
    async def stream(
        request: Request,
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
        found = await run_in_threadpool(store_read.runs, store, run)
        if not found:
            raise HTTPException(404, f"no run {run!r}")
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        if start_step is None and end_step is None:
            last = found[0]["last_step"]
            events = _events(request, store, run, metric, -1 if last is None else last)
            return StreamingResponse(events, media_type="text/event-stream", headers=headers)
        try:
            playback.check_request(start_step, end_step, speed)
        except playback.PlaybackError as e:
            raise HTTPException(422, f"run {run!r}: {e}") from None
        last = found[0]["last_step"]
        end = end_step if end_step is not None else (-1 if last is None else last)
        events = playback.playback_events(request, store, run, metric, start_step or 0, end, speed)
        return StreamingResponse(events, media_type="text/event-stream", headers=headers)

    @app.post("/api/runs/{run:path}/stop", dependencies=guard)
    def stop(run: str, body: StopRequest | None = None) -> JSONWithNaN:
        try:
            return JSONWithNaN(api_stop.request_stop(store, run, body.reason if body else ""))
        except api_views.NotFound as e:
            raise HTTPException(404, str(e)) from None
        except ValueError as e:
            raise HTTPException(409, str(e)) from None
        except OSError as e:
            raise HTTPException(500, f"run {run!r}: the stop request could not be written ({e})") from None

    @app.get("/api/runs/{run:path}/view", dependencies=guard)
    def run_view(
        run: str,
        points: Annotated[int, Query(ge=1, description="at most this many buckets per metric")] = 2000,
        start: int | None = None,
        end: int | None = None,
        series: Annotated[bool, Query(description="false: the run, alerts and checkpoints only")] = True,
    ) -> JSONWithNaN:
        return call(api_views.run_view, run, points, start, end, series)

    @app.get("/api/runs/{run:path}", dependencies=guard)
    def one_run(run: str) -> JSONWithNaN:
        return call(api_views.run, run)

    @app.get("/api/alerts", dependencies=guard)
    def alerts(
        run: str | None = None, rule: str | None = None, severity: str | None = None, state: str = "all"
    ) -> JSONWithNaN:
        return call(api_views.alerts, run, rule, severity, state)

    @app.get("/api/alerts/{alert_id}", dependencies=guard)
    def one_alert(alert_id: int) -> JSONWithNaN:
        return call(api_views.alert, alert_id)

    @app.post("/api/alerts/{alert_id}/ack", dependencies=guard)
    def ack(alert_id: int, body: Note | None = None) -> JSONWithNaN:
        return call(api_views.set_alert_state, alert_id, "acked", body.note if body else None)

    @app.post("/api/alerts/{alert_id}/resolve", dependencies=guard)
    def resolve(alert_id: int, body: Note | None = None) -> JSONWithNaN:
        return call(api_views.set_alert_state, alert_id, "resolved", body.note if body else None)

    @app.get("/api/compare", dependencies=guard)
    def compare(run: Annotated[list[str], Query()]) -> JSONWithNaN:
        return call(api_views.compare, run)

    @app.post("/api/ingest", dependencies=guard)
    def ingest(body: IngestRequest) -> JSONWithNaN:
        if request_ingest is None:
            raise HTTPException(503, "this collector does not take ingest requests")
        try:
            paths = [confine(p, roots) for p in body.paths]
        except ValueError as e:
            raise HTTPException(403, str(e)) from None
        request_ingest(paths)
        return JSONWithNaN({"queued": [str(p) for p in paths]})

    return app


async def _events(
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
