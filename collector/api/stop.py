"""`POST /api/runs/{run}/stop` and `python -m collector stop`: a person asks a run to stop (the request file is
described in `collector.core.stop_request`; a rule's request is written by the daemon's StopFileSink)."""

from __future__ import annotations

from pathlib import Path

from collector.core.stop_request import check_inside, ended, single_file, stop_path, write_stop_request
from collector.runs.lookup import find_run
from collector.store import lake_reader
from collector.store import read as store_read
from collector.store.db import Store


def request_stop(store: Store, run_id: str, reason: str) -> dict:
    """Ask a run to stop: write its stop request (`RUN_DIR/runwatch.stop`, see
    `collector.core.stop_request`). Returns `run`, `path` (the request file), `request` (the one in force:
    an earlier request stands) and `written`. NotFound for an unknown run; ValueError for a run that has no
    folder of its own or has ended."""
    r = find_run(store, run_id)
    if store.lake_reader:  # team mode: the collector owning the run writes its stop file (store/lake.py)
        # refused as alone (the owning collector checks again: a run may end after it was asked)
        _refuse_ended(run_id, r)
        if any(
            s["path"] == r["path"] for s in store_read.sources(store, run_id)
        ):  # (its folder is not its own)
            raise ValueError(single_file(run_id, r["path"]))
        reason = reason.strip() or "stop requested from runwatch"
        lake_reader.ask_stop(store.cursor(), run_id, reason, by="person")
        # `path`: where the owning collector writes the request, on its machine; `written`: asked of it
        request = {"reason": reason, "by": "person", "through": "team lake"}
        return {"run": run_id, "path": str(stop_path(Path(r["path"]))), "request": request, "written": True}
    folder = Path(r["path"])
    if not folder.is_dir():
        raise ValueError(single_file(run_id, folder))
    if r.get("root"):  # a folder on the way swapped for a link since the run was found: StopFileLink
        check_inside(folder, r["root"])
    _refuse_ended(run_id, r)
    request, written = write_stop_request(
        folder, reason.strip() or "stop requested from runwatch", by="person"
    )
    return {"run": run_id, "path": str(stop_path(folder)), "request": request, "written": written}


def _refuse_ended(run_id: str, run: dict) -> None:
    """ValueError for a run whose status.json says it ended: there is nothing to stop."""
    why = ended(run_id, store_read.parse_json(run["status_info"]))
    if why:
        raise ValueError(why)
