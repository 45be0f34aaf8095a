"""What every route shares: the collector it answers for (store, database, roots, token; held on the app as
`app.state.collector` and handed to routes as FastAPI dependencies), the token check, and JSON that keeps NaN."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request
from fastapi.responses import JSONResponse, Response

from collector.runs.service import RunService
from collector.store.db import Store


class JSONWithNaN(JSONResponse):
    """JSON that keeps NaN and infinities (as Python's json writes them) instead of failing on them. Routes
    return it built (FastAPI then neither re-encodes nor filters the body: the views' JSON goes out as built)."""

    def render(self, content: Any) -> bytes:
        return json_bytes(content)


def json_bytes(content: Any) -> bytes:
    """`content` as the API's JSON (`JSONWithNaN`'s body)."""
    return json.dumps(content, allow_nan=True, separators=(",", ":"), default=str).encode()


class EncodedJSON(Response):
    """A JSON body encoded already by `json_bytes` (an answer kept encoded: a team's overview)."""

    media_type = "application/json"


@dataclass(frozen=True)
class Collector:
    """The collector an API answers for. `runs` is its run service (shared with the daemon's detection, so
    the API's advice and the delivered actions come from one cache); `request_ingest(paths)` queues files or
    folders for ingest (None: this collector takes no ingest requests)."""

    store: Store
    db: Path
    roots: list[Path]
    token: str
    runs: RunService
    request_ingest: Callable[[list[Path]], None] | None = None


def collector(request: Request) -> Collector:
    return request.app.state.collector


def store(request: Request) -> Store:
    return request.app.state.collector.store


def runs(request: Request) -> RunService:
    return request.app.state.collector.runs


CollectorDep = Annotated[Collector, Depends(collector)]
StoreDep = Annotated[Store, Depends(store)]
RunsDep = Annotated[RunService, Depends(runs)]


def authorized(request: Request) -> None:
    """401 unless the request sends `Authorization: Bearer <token>` with the database's token."""
    c: Collector = request.app.state.collector
    header = request.headers.get("authorization", "")
    given = header[7:] if header.lower().startswith("bearer ") else ""
    if not given or not secrets.compare_digest(given.encode(), c.token.encode()):
        raise HTTPException(
            401, f"missing or wrong token: send 'Authorization: Bearer <token>' from {c.db}.token"
        )


# Every router but /api/health's: `APIRouter(dependencies=TOKEN)`.
TOKEN = [Depends(authorized)]
