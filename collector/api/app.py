"""The collector's HTTP API (FastAPI on 127.0.0.1): what the dashboard, the CLI and scripts read and act through.

Every route but `/api/health` needs `Authorization: Bearer <token>` (the token is in `DB.token`, mode 0600).
Responses are JSON; non-finite floats are written as bare `NaN` / `Infinity` (Python's json reads them; a NaN
is a fact about a run, not something to hide). The routes and their shapes are documented at `/docs` and in
docs/architecture.md. A route lives in the `collector.api.routes` module of its resource and returns what the
view modules (`collector.api.runs`, `series`, `alerts`, `incidents`, `run_files`) and the run service build, the same functions
the CLI's `--json` uses.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import duckdb
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from collector.api.body_limit import BodyLimit
from collector.api.host_check import HostCheck
from collector.api.http import Collector, JSONWithNaN
from collector.api.routes import advice, alerts, files, health, incidents, monitoring, runs, series
from collector.api.run_state import VERSION
from collector.runs.lookup import NotFound
from collector.runs.service import RunService
from collector.store.damage import DamagedDatabase, damage_met
from collector.store.db import Store
from collector.store.lake_access import LakeReadOnly, LakeUnreadable, catalog_unreachable

# Every router of the API, in the order their routes are matched: `runs` last, since its
# `GET /api/runs/{run:path}` would take any deeper path of a run (`/api/runs/a/checkpoints`) listed after it.
ROUTERS = (
    health.router,
    files.router,
    series.router,
    advice.router,
    alerts.router,
    incidents.router,
    monitoring.router,
    monitoring.sockets,
    runs.router,
)


def create_app(
    store: Store,
    db: Path,
    roots: list[Path],
    token: str,
    request_ingest: Callable[[list[Path]], None] | None = None,
    bind_address: str = "127.0.0.1",
    runs: RunService | None = None,
) -> FastAPI:
    """The API over `store`. `request_ingest(paths)` queues files or folders (inside the roots) for ingest;
    `bind_address` is where it listens (on loopback, requests must name it by a loopback name: HostCheck);
    `runs` is the daemon's run service (a new one over `store` when None)."""
    app = FastAPI(
        title="runwatch collector",
        version=VERSION,
        default_response_class=JSONWithNaN,
        description="Runs, metrics (downsampled, min/max/first/last per bucket), alerts, checkpoints and advice.",
    )
    runs = runs if runs is not None else RunService(store)
    app.state.collector = Collector(store, Path(db), list(roots), token, runs, request_ingest)
    for router in ROUTERS:
        app.include_router(router)
    app.add_middleware(BodyLimit)
    app.add_middleware(HostCheck, bind_address=bind_address)  # (added last: runs first)
    # What a view raises, as the HTTP answer: an unknown run or alert is a 404, a bad argument a 400.
    app.add_exception_handler(NotFound, _answer(404))
    app.add_exception_handler(ValueError, _answer(400))
    app.add_exception_handler(LakeReadOnly, _answer(403))  # a team reader whose Postgres role only reads
    app.add_exception_handler(LakeUnreadable, _answer(500))  # a team reader the data folder shuts out
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(duckdb.Error, _damage_told)
    app.add_exception_handler(DamagedDatabase, _damage_told)
    return app


def _invalid(request: Request, exc: Exception) -> JSONResponse:
    """422 naming each wrong field and why, without echoing the value sent (a 10 MB note came back whole)."""
    errors = exc.errors() if isinstance(exc, RequestValidationError) else []
    detail = [{k: e[k] for k in ("type", "loc", "msg") if k in e} for e in errors]
    return JSONResponse({"detail": detail}, status_code=422)


def _damage_told(request: Request, exc: Exception) -> JSONResponse:
    """A damaged part of the database met by a route (one not read at start-up): a 500 whose detail is the
    message the CLI gives (the file, what is wrong, what to do), not a traceback; on a team reader, the lake's
    Postgres catalog out of reach is a 503 saying so; other errors go on up."""
    collector = request.app.state.collector
    if collector.store.lake_reader and (gone := catalog_unreachable(str(exc))) is not None:
        return JSONResponse({"detail": gone}, status_code=503)  # Postgres down: said, not a bare 500
    found = damage_met(collector.db, exc, "This request changed nothing")
    if found is None:
        raise exc
    return JSONResponse({"detail": str(found)}, status_code=500)


def _answer(status: int) -> Callable[[Request, Exception], JSONResponse]:
    def handler(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=status)

    return handler
