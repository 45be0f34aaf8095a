"""`POST /api/runs/{run}/stop` and `python -m collector stop`: a person asks a run to stop (the request file is
described in `collector.core.stop_request`; a rule's request is written by the daemon's StopFileSink)."""

from __future__ import annotations

from pathlib import Path

from collector.core.stop_request import (
    ALREADY_THERE,
    StopFileLink,
    check_inside,
    ended,
    request_in_force,
    single_file,
    stop_path,
    write_stop_request,
)
from collector.runs.lookup import find_run
from collector.store import alerts as store_alerts
from collector.store import lake_reader
from collector.store import read as store_read
from collector.store.db import Store


def request_stop(store: Store, run_id: str, reason: str) -> dict:
    """Ask a run to stop: write its stop request (`RUN_DIR/runwatch.stop`, see
    `collector.core.stop_request`). Returns `run`, `path` (the request file), `request` (the one in force:
    an earlier request stands) and `written`. NotFound for an unknown run; ValueError, `stop refused: WHY`
    (the words of a refusal through a team's lake too, `models.StopState.said`), for a run that has no folder
    of its own, has ended, or whose stop file or folder is a link."""
    try:
        return _ask(store, run_id, reason)
    except ValueError as e:
        raise ValueError(f"stop refused: {e}") from None


def _ask(store: Store, run_id: str, reason: str) -> dict:
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


def stop_state(store: Store, run_id: str, run: dict | None = None) -> dict | None:
    """The run's last stop request and what became of it (`models.StopState`), or None when none is known.
    On a team's lake: the last one asked through it, `asked` until the collector that owns the run wrote it
    (`written`), found one already there (`already_asked`) or refused it (`refused`, `outcome` says why).
    Alone: the request in the run's folder (`written`), or `refused` when none can be written there (a link);
    a run that is one file, or on another machine, has none."""
    r = run if run is not None else find_run(store, run_id)
    path = str(stop_path(Path(r["path"]))) if r["path"] else None
    if store.lake_reader:
        asked = lake_reader.last_stop(store.cursor(), run_id)
        if asked is None:  # a `[stop]` rule's request, which its collector wrote itself
            by_rule = store_alerts.rule_stop(store, run_id)
            if by_rule is None:
                return None
            return {
                "state": "written",
                "asked_at": by_rule["asked_at"],
                "by": "rule",
                "reason": by_rule["rule"],
                "alert_id": by_rule["alert_id"],
                "path": path,
            } | lake_reader.owner(store.cursor(), run_id)
        outcome = asked["outcome"]
        done = {"written": "written", ALREADY_THERE: "already_asked"}.get(outcome, "refused")
        return {
            "state": "asked" if asked["done_at"] is None else done,
            "asked_at": asked["asked_at"],
            "by": asked["asked_by"],
            "reason": asked["reason"],
            "done_at": asked["done_at"],
            "outcome": outcome,
            "collector": asked["collector"],
            "collector_live": asked["collector_live"],
            "path": path,
        }
    folder = Path(r["path"] or "")
    if not r["path"] or not folder.is_dir():
        return None
    try:
        request = request_in_force(folder, r.get("root"))
    except StopFileLink as e:
        return {"state": "refused", "outcome": str(e), "path": path}
    except OSError as e:
        return {"state": "refused", "outcome": f"the run folder cannot be read ({e})", "path": path}
    if request is None:
        return None
    return {
        "state": "written",
        "asked_at": request.get("requested_at"),
        "by": request.get("by"),
        "reason": request.get("reason"),
        "alert_id": request.get("alert_id"),
        "path": path,
    }
