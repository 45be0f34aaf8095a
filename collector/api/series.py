"""A run's metric series as the API answers them: raw or downsampled (`GET /api/runs/{run}/metrics`) and per
epoch (`GET /api/runs/{run}/epochs`)."""

from __future__ import annotations

from collector.core.roles import role_of
from collector.runs.lookup import find_run
from collector.store import lake_reader
from collector.store import read as store_read
from collector.store.db import Store


def metrics(
    store: Store,
    run_id: str,
    metric_names: list[str],
    points: int = 2000,
    start: int | None = None,
    end: int | None = None,
    after: int | None = None,
) -> dict:
    """`{"run", "series": [...]}`: each named metric raw or downsampled (see `store_read.series`); on a team's
    lake from one snapshot of it, read once (`lake_reader.in_one_snapshot`)."""

    def read() -> dict:
        find_run(store, run_id)
        if points < 1:
            raise ValueError(f"points must be at least 1, got {points}")
        series = [store_read.series(store, run_id, m, points, start, end, after) for m in metric_names]
        return {"run": run_id, "series": series}

    if store.lake is not None and store.lake.attached:
        return lake_reader.in_one_snapshot(store.cursor(), read)
    return read()


def epochs(store: Store, run_id: str, metric: str) -> dict:
    """Per-epoch statistics of `metric` when the run logs an epoch metric (else an empty list)."""
    find_run(store, run_id)
    names = [s["metric"] for s in store_read.metric_stats(store, run_id)]
    epoch_metric = next((m for m in names if role_of(m) == "epoch"), None)
    rows = store_read.epochs(store, run_id, metric, epoch_metric) if epoch_metric else []
    return {"run": run_id, "metric": metric, "epoch_metric": epoch_metric, "epochs": rows}
