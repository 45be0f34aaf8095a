"""The training platform's monitoring interface (the seed's "Phase 1" document): what its routes answer.

The routes are in `collector.api.routes.monitoring` (their shapes are in its docstring). A job is a run: its id
as `GET /api/runs` gives it, or a job id that ends exactly one run's id (the platform's `{job_id}_status.json`
jobs are runs `folder/job_id`).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from itertools import groupby
from urllib.parse import urlsplit

from collector.api import runs as api_runs
from collector.core.hosts import LOOPBACK_NAMES
from collector.runs.service import RunService
from collector.store import read as store_read
from collector.store.db import Store

FINISHED = ("completed", "failed", "stopped")
HISTORY_LIMIT = 10_000  # steps per metrics answer by default
BATCH = 2000  # points per read
ORIGINS_ENV = "RUNWATCH_ALLOWED_ORIGINS"


class JobNotFound(LookupError):
    """No run answers to the job id (or several do); the message says which."""


def resolve_job(store: Store, job_id: str) -> str:
    """The run id of `job_id`: the run of that id, else the one run whose id ends with `/job_id`."""
    if store_read.runs(store, job_id):
        return job_id
    matches = [r["id"] for r in store_read.runs(store) if r["id"].endswith("/" + job_id)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise JobNotFound(f"job {job_id!r} is ambiguous: runs {', '.join(sorted(matches))}; give the full id")
    raise JobNotFound(f"no run or job {job_id!r} (GET /api/runs lists the runs)")


def iso(wall_time: float | None) -> str | None:
    return None if wall_time is None else datetime.fromtimestamp(wall_time, UTC).isoformat()


def records(points: list[tuple]) -> list[dict]:
    """One record per step, `{"step", "timestamp", metric: value, ...}`, from (step, metric, value, wall_time)."""
    out = []
    for step, group in groupby(points, key=lambda p: p[0]):
        group = list(group)
        walls = [p[3] for p in group if p[3] is not None]
        out.append(
            {"step": step, "timestamp": iso(min(walls) if walls else None)} | {p[1]: p[2] for p in group}
        )
    return out


def history(store: Store, run: str, start: int, end: int | None, limit: int) -> dict:
    """The metric records of steps `start`..`end` (at most `limit` steps)."""
    points: list[tuple] = []
    steps: set[int] = set()
    after, truncated = start - 1, False
    while True:
        rows = store_read.points_from(store, run, None, after, BATCH, True)
        rows = [r for r in rows if end is None or r[0] <= end]
        if len(rows) == BATCH and rows[0][0] != rows[-1][0]:
            rows = [r for r in rows if r[0] != rows[-1][0]]  # the last step may go on in the next read
        if not rows:
            break
        for row in rows:
            if row[0] not in steps and len(steps) == limit:
                truncated = True
                break
            steps.add(row[0])
            points.append(row)
        if truncated:
            break
        after = rows[-1][0]
    found = records(points)
    return {
        "job_id": run,
        "start_step": start,
        "end_step": end,
        "metrics": found,
        "total": len(found),
        "truncated": truncated,
        "next_start_step": found[-1]["step"] + 1 if truncated else None,
    }


def job_status(runs: RunService, run: str) -> dict:
    """The live socket's status message body (status as `GET /api/runs` says it)."""
    summary = next(r for r in api_runs.runs(runs) if r["id"] == run)
    return {
        "job_id": run,
        "status": summary["status"],
        "current_step": summary["last_step"],
        "total_steps": summary["total_steps"],
        "anomaly_detected": summary["anomaly_detected"],
    }


def origin_allowed(origin: str | None, host: str | None, env: dict[str, str] | None = None) -> bool:
    """Whether a WebSocket's `Origin` may connect: none (not a browser), a loopback page, the collector's own
    origin (its `Host`), or one listed in RUNWATCH_ALLOWED_ORIGINS."""
    if not origin:
        return True
    env = os.environ if env is None else env
    listed = {o.strip().rstrip("/").lower() for o in env.get(ORIGINS_ENV, "").split(",") if o.strip()}
    if origin.rstrip("/").lower() in listed:
        return True
    parts = urlsplit(origin)
    name = (parts.hostname or "").lower()
    return name in LOOPBACK_NAMES or (host is not None and parts.netloc.lower() == host.lower())
