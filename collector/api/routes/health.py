"""`GET /api/health`: is the collector up, what it watches and with which settings (no token needed)."""

from __future__ import annotations

import os

import anyio.to_thread
from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from collector.api import models, run_files
from collector.api.http import CollectorDep, JSONWithNaN
from collector.api.run_state import VERSION, health_info
from collector.core.runtime import identity_proof
from collector.store import read as store_read

router = APIRouter()


@router.get("/api/health", response_model=models.Health)
async def health(c: CollectorDep) -> JSONWithNaN:
    # Counts only (no token here): which files, and why, come from /api/problem_files.
    body = await run_in_threadpool(
        lambda: (
            health_info(c.db, c.roots, VERSION)
            | {
                "problem_files": run_files.problem_counts(c.store),
                "memory_limit": store_read.memory_limit(c.store),
            }
            | ({"lake": c.store.lake.state(c.store.cursor())} if c.store.lake is not None else {})
        )
    )
    # (read here, in the event loop: the pool's size in force)
    api_threads = anyio.to_thread.current_default_thread_limiter().total_tokens
    # Not ok while writes fail for a full disk: the collector answers, but stores nothing new.
    ingest = c.store.disk.state()
    return JSONWithNaN(
        body | {"api_threads": int(api_threads), "ingest": ingest, "ok": ingest["state"] == "ok"}
    )


@router.get("/api/identity", response_model=models.Identity)
async def identity(c: CollectorDep, challenge: str) -> dict:
    """This collector's pid and HMAC(token, challenge): a command proves the marker names this process
    before it sends the token (no token needed; the answer does not reveal it)."""
    return {"pid": os.getpid(), "proof": identity_proof(c.token, challenge[:128])}
