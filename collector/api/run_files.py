"""The files of a run as the API shows them: those read (with the points each gave, and a warning when its
lines gave none) and those not read, with the reason."""

from __future__ import annotations

from collector import formats
from collector.formats import unread
from collector.store import read as store_read
from collector.store.db import Store


def files_of(store: Store, run_id: str) -> tuple[list[dict], list[dict]]:
    """(`sources`, `skipped_files`) of the run detail: each source with its `warning` (or None); each file not
    read with `path`, `reason`, `bytes` and `copy` (true for a copy of metrics the run reads elsewhere: expected)."""
    sources = [s | {"warning": source_warning(s)} for s in store_read.sources(store, run_id)]
    skipped = [
        {k: f[k] for k in ("path", "reason", "bytes")} | {"copy": unread.is_copy(f["reason"])}
        for f in store_read.skipped_files(store, run_id)
    ]
    return sources, skipped


def source_warning(source: dict) -> str | None:
    """The sentence for a metrics file whose lines gave no point (None when it gave some, or is not one)."""
    fmt = source["format"]
    metrics_file = fmt in formats.names() and formats.get(fmt).role == "metrics"
    lines = source["lines"] if metrics_file and source["state"] != "deleted" else 0
    return unread.zero_points_warning(lines, source["points"])
