"""Where a team reader's overview call (`GET /api/runs`'s body, `collector.api.runs.runs_body`) spends its time:
run under the team venv beside live collectors (`bench/team.py --phases`), it opens the lake as a reader does
(`LakeReader`, `Store.on_lake`, one `RunService` kept for the whole run) and calls `runs_body` every `--every-s`
for `--seconds`, timing each call's parts in wall time and in the calling thread's CPU time
(`time.thread_time`; the process's too, `time.process_time`, which adds DuckDB's worker threads):

- the lake's queries (`store.read`'s runs, metric_stats, open_alerts, advice_signatures, last_cleared_steps;
  `lake_reader`'s lake_mark and runs_changed),
- the rows' encoding (`json_bytes`, per run), the recommended steps asked (`RunService.recommended_step`),
- the rest of building the rows (the Python per run: status, roles, the dicts), and what is outside the rows.

Prints one JSON object on stdout: per part, its calls and wall / CPU ms per overview call (p50 and p95 over the
calls), and per call the whole call's wall and CPU ms, how the overview was built (`whole`, `rows` of some runs,
or `kept`) and the runs it holds.

    .venv-team/bin/python bench/team_overview_phases.py STORE DATA_PATH [--seconds 60] [--every-s 1]
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from collector.api import runs as api_runs  # noqa: E402
from collector.runs.service import RunService  # noqa: E402
from collector.store import alerts as store_alerts  # noqa: E402
from collector.store import lake_reader  # noqa: E402
from collector.store import read as store_read  # noqa: E402
from collector.store.db import Store  # noqa: E402
from collector.store.lake import LakeSpec  # noqa: E402

QUERIES = {
    store_read: ("runs", "metric_stats", "open_alerts", "advice_signatures", "last_cleared_steps"),
    store_alerts: ("list_alerts",),
    lake_reader: ("lake_mark", "runs_changed"),
}


class Parts:
    """Wall and thread-CPU seconds spent in each wrapped function during the current overview call."""

    def __init__(self) -> None:
        self.now: dict[str, list[float]] = {}

    def wrap(self, owner: object, name: str, part: str) -> None:
        inner = getattr(owner, name)

        @functools.wraps(inner)
        def timed(*args, **kwargs):
            w0, c0 = time.perf_counter(), time.thread_time()
            try:
                return inner(*args, **kwargs)
            finally:
                spent = self.now.setdefault(part, [0.0, 0.0, 0])
                spent[0] += time.perf_counter() - w0
                spent[1] += time.thread_time() - c0
                spent[2] += 1

        setattr(owner, name, timed)


def pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def _kind(call: dict) -> str:
    return (
        call["built"] if not call["built"].startswith("rows") else "rows" + call["built"].partition(" in")[1]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store")
    ap.add_argument("data_path")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--every-s", type=float, default=1.0)
    ap.add_argument("--memory-mb", type=int, default=160)
    ap.add_argument(
        "--alternate",
        action="store_true",
        help="every other call in one read transaction (`in_one_snapshot`): for the code before d262456, whose "
        "builds did not read in one",
    )
    args = ap.parse_args()

    parts = Parts()
    for owner, names in QUERIES.items():
        for name in names:
            parts.wrap(owner, name, f"query {name}")
    parts.wrap(api_runs, "json_bytes", "encoding rows")
    parts.wrap(api_runs, "_rows", "rows (all)")
    parts.wrap(RunService, "recommended_step", "recommended steps")

    reader = lake_reader.LakeReader(LakeSpec.parse(args.store, args.data_path), args.memory_mb)
    store = Store.on_lake(reader, Path(args.data_path) / "phases-reader")
    service = RunService(store)
    calls = []
    end = time.monotonic() + args.seconds
    k = 0
    while time.monotonic() < end:
        t0 = time.monotonic()
        k += 1
        one = args.alternate and k % 2 == 0
        parts.now = {}
        before = service.overview
        w0, c0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
        if one:
            body = lake_reader.in_one_snapshot(store.cursor(), lambda: api_runs.runs_body(service))
        else:
            body = api_runs.runs_body(service)
        wall, cpu, proc = time.perf_counter() - w0, time.thread_time() - c0, time.process_time() - p0
        new = service.overview
        built = (
            "kept"
            if new is before
            else "whole"
            if new is None or new.built is None
            else f"rows of {len(new.built)}"
        )
        spent = dict(parts.now)
        rows = spent.get("rows (all)", [0.0, 0.0, 0])
        inside = [
            sum(v[k] for p, v in spent.items() if p.startswith("query") and p not in ("query lake_mark", "query runs_changed"))
            + spent.get("encoding rows", [0.0, 0.0])[k]
            + spent.get("recommended steps", [0.0, 0.0])[k]
            for k in (0, 1)
        ]  # fmt: skip
        spent["rows: the Python per run"] = [rows[0] - inside[0], rows[1] - inside[1], rows[2]]
        outside = [
            sum(v[k] for p, v in spent.items() if p in ("query lake_mark", "query runs_changed"))
            for k in (0, 1)
        ]
        spent["outside the rows (host states, order, join, compare)"] = [
            wall - rows[0] - outside[0],
            cpu - rows[1] - outside[1],
            1,
        ]
        built += " in one transaction" if one else ""
        calls.append(
            {
                "wall_ms": wall * 1000,
                "thread_cpu_ms": cpu * 1000,
                "process_cpu_ms": proc * 1000,
                "built": built,
                "runs": len(new.kept) if new is not None else None,
                "bytes": len(body),
                "parts": {p: [v[0] * 1000, v[1] * 1000, v[2]] for p, v in spent.items()},
            }
        )
        time.sleep(max(0.0, args.every_s - (time.monotonic() - t0)))

    names = sorted({p for c in calls for p in c["parts"]})
    summary = {}
    for kind in sorted({_kind(c) for c in calls}):
        of = [c for c in calls if _kind(c) == kind]
        summary[kind] = {
            "calls": len(of),
            "wall_ms_p50_p95": [pct([c["wall_ms"] for c in of], 50), pct([c["wall_ms"] for c in of], 95)],
            "thread_cpu_ms_p50_p95": [
                pct([c["thread_cpu_ms"] for c in of], 50),
                pct([c["thread_cpu_ms"] for c in of], 95),
            ],
            "process_cpu_ms_p50_p95": [
                pct([c["process_cpu_ms"] for c in of], 50),
                pct([c["process_cpu_ms"] for c in of], 95),
            ],
            "parts_wall_cpu_ms_p50": {
                p: [
                    pct([c["parts"].get(p, [0, 0])[0] for c in of], 50),
                    pct([c["parts"].get(p, [0, 0])[1] for c in of], 50),
                ]
                for p in names
            },
        }
    print(json.dumps({"summary": summary, "calls": calls}))


if __name__ == "__main__":
    main()
