"""A team reader's overview held across the lake's commits, for `test_team_overview.py`: run under the team
venv (`python -m tests.collector.team_overview_support STORE DATA_PATH`), it reads one JSON command a line on
stdin and answers one JSON line on stdout:

- `{"op": "check"}`: the overview as the kept one answers it (`api_runs.runs_body` on one `RunService` for the
  whole session) against one built whole from a fresh service (`api_runs.built_whole`), both at one lake
  snapshot (asked again when a commit landed in between): `equal`, `built` (the runs whose rows the kept one
  built again since the check before: [] when it answered the one it held; None: all), `runs`, and the first
  row that differs.
- `{"op": "served"}`: `GET /api/runs`'s answer with the kept overview young enough (`api_runs.runs_answer`):
  `kept` (it is the body and the snapshot of the overview kept before the call), then, once the build that call
  started in the background is done, that build against one built whole at its snapshot (asked again when a
  commit landed in between): `equal`, `newer` (its snapshot and time are not older), `runs`.
- `{"op": "overview"}`: the overview built whole, as a list (what the test waits on).
- `{"op": "alerts", "run": RUN}`, `{"op": "alert", "alert": ID}`: the run's alerts, one alert, as stored.
- `{"op": "ack" | "resolve", "alert": ID}`, `{"op": "stop", "run": RUN}`: asked through the lake as the API
  asks them; `{"op": "compact"}`: DuckLake's `ducklake_merge_adjacent_files`, as a collector compacts;
  `{"op": "whole_from", "share": S, "min_runs": N}`: the overview built whole past that share of runs changed.
"""

from __future__ import annotations

import json
import sys
import time

import duckdb

from collector.api import runs as api_runs
from collector.api.http import json_bytes
from collector.runs.service import RunService
from collector.store import alerts as store_alerts
from collector.store import lake_compaction, lake_reader
from collector.store.db import Store
from collector.store.lake import LAKE, LakeSpec
from tests.waiting import wait_for


def snapshot(store: Store) -> int:
    return store.rows("SELECT id FROM current_snapshot()")[0][0]


def check(store: Store, kept: RunService) -> dict:
    built: set[str] | None = (
        set()
    )  # runs built again over the tries (a try a commit landed in is asked again)
    for _ in range(50):
        before, held = snapshot(store), kept.overview
        body = api_runs.runs_body(kept)
        if kept.overview is not held:
            built = None if built is None or kept.overview.built is None else built | kept.overview.built
        whole = api_runs.built_whole(RunService(store))
        if snapshot(store) != before:
            continue  # a commit landed in between: the two may differ by it
        got, want = json.loads(body), json.loads(json_bytes(whole))
        differs = next(
            ({"got": g, "want": w} for g, w in zip(got, want, strict=False) if g != w),
            None if len(got) == len(want) else {"got": len(got), "want": len(want)},
        )
        built = sorted(built) if built is not None else None
        return {"equal": body == json_bytes(whole), "built": built, "runs": len(want), "differs": differs}
    raise RuntimeError("the lake never stood still for one check")


def served(store: Store, kept: RunService) -> dict:
    for _ in range(50):
        held = kept.overview
        body, headers = api_runs.runs_answer(kept, 3600.0)
        answered_kept = body == held.body and headers["X-Runwatch-Lake-Snapshot"] == str(held.snapshot)
        wait_for(lambda h=held: kept.overview is not h, "the overview built again in the background")
        fresh = kept.overview
        before = snapshot(store)
        if before != fresh.snapshot:
            continue  # a commit landed after it read the lake: the whole one would differ by it
        whole = json_bytes(api_runs.built_whole(RunService(store)))
        if snapshot(store) != before:
            continue
        return {
            "kept": answered_kept,
            "equal": fresh.body == whole,
            "newer": fresh.snapshot >= held.snapshot and fresh.read_at >= held.read_at,
            "runs": len(fresh.rows),
        }
    raise RuntimeError("the lake never stood still for one check")


def compact(cur) -> int:
    """`ducklake_merge_adjacent_files` under the lake's write lock (as a collector compacts: beside a commit
    deleting rows it could bring them back), tried again while a reader's commit conflicts with it; the tries."""
    for tries in range(1, 30):
        try:
            with lake_compaction.lake_lock(cur, LAKE, exclusive=True):
                cur.execute(f"CALL ducklake_merge_adjacent_files('{LAKE}')")
            return tries
        except duckdb.TransactionException:
            time.sleep(0.2)
    raise RuntimeError("every compaction conflicted with a collector's commit")


def main() -> None:
    spec = LakeSpec.parse(sys.argv[1], sys.argv[2])
    store = Store.on_lake(lake_reader.LakeReader(spec, 256), "team-overview-check")
    kept = RunService(store)
    for line in sys.stdin:
        ask = json.loads(line)
        cur = store.cursor()
        if ask["op"] == "check":
            out = check(store, kept)
        elif ask["op"] == "served":
            out = served(store, kept)
        elif ask["op"] == "overview":
            out = api_runs.built_whole(RunService(store))
        elif ask["op"] == "alerts":
            out = store_alerts.list_alerts(store, run=ask["run"])
        elif ask["op"] == "alert":
            out = store_alerts.get_alert(store, ask["alert"])
        elif ask["op"] in ("ack", "resolve"):
            state = "acked" if ask["op"] == "ack" else "resolved"
            lake_reader.ask_alert_states(cur, [ask["alert"]], state, "from the overview test")
            out = {"asked": state}
        elif ask["op"] == "stop":
            lake_reader.ask_stop(cur, ask["run"], "the overview test", "person")
            out = {"asked": "stop"}
        elif (
            ask["op"] == "whole_from"
        ):  # where most runs change: built whole, not asked (api_runs.WHOLE_FROM)
            api_runs.WHOLE_FROM, api_runs.WHOLE_MIN_RUNS = ask["share"], ask["min_runs"]
            out = {"whole_from": ask["share"]}
        elif ask["op"] == "compact":
            out = {"compacted": compact(cur)}
        else:
            raise ValueError(f"unknown op {ask['op']!r}")
        print(json.dumps(out, default=str), flush=True)


if __name__ == "__main__":
    main()
