"""Finding a run or an alert by id, with the one answer every caller gives when it does not exist."""

from __future__ import annotations

from collector.store import read as store_read
from collector.store.db import Store


class NotFound(LookupError):
    """The named run, alert or metric does not exist; the message says which (the API answers it with 404)."""


def no_run(run_id: str) -> str:
    """The sentence for a run id the store does not know."""
    return f"no run {run_id!r}"


def find_run(store: Store, run_id: str) -> dict:
    """The run's stored row (`store_read.runs`); NotFound when the store does not know it."""
    found = store_read.runs(store, run_id)
    if not found:
        raise NotFound(no_run(run_id))
    return found[0]
