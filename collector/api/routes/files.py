"""A run's files and what became of them: every file with a problem, quarantined lines, replaced values, and
`POST /api/ingest` (read these files or folders now)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel

from collector.api import models, run_files
from collector.api.http import TOKEN, CollectorDep, JSONWithNaN, StoreDep
from collector.ingest import fs
from collector.runs.lookup import find_run
from collector.store import read as store_read

router = APIRouter(dependencies=TOKEN)


class IngestRequest(BaseModel):
    paths: list[str]


@router.get("/api/problem_files", response_model=list[models.ProblemFile])
def problem_files(
    store: StoreDep,
    run: Annotated[str | None, Query(description="only this run's files")] = None,
) -> JSONWithNaN:
    return JSONWithNaN(run_files.problem_files(store, run))


@router.get("/api/runs/{run:path}/quarantine", response_model=list[models.QuarantinedLine])
def quarantine(store: StoreDep, run: str, limit: Annotated[int, Query(ge=1, le=10000)] = 200) -> JSONWithNaN:
    find_run(store, run)
    return JSONWithNaN(store_read.quarantined(store, run, limit))


@router.get("/api/runs/{run:path}/replaced", response_model=list[models.ReplacedPoint])
def replaced(store: StoreDep, run: str, metric: str) -> JSONWithNaN:
    find_run(store, run)
    return JSONWithNaN(store_read.replaced_points(store, run, metric))


@router.post("/api/ingest", response_model=models.Queued)
def ingest(c: CollectorDep, body: IngestRequest) -> JSONWithNaN:
    if c.request_ingest is None:
        raise HTTPException(503, "this collector does not take ingest requests")
    try:
        paths = [confine(p, c.roots) for p in body.paths]
    except ValueError as e:
        raise HTTPException(403, str(e)) from None
    c.request_ingest(paths)
    return JSONWithNaN({"queued": [str(p) for p in paths]})


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
