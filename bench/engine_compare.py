"""DuckDB engine against engine: the same bench scripts run under two interpreters (two venvs that differ in
their DuckDB), taking turns, and the figures compared as ratios (issue 26.1: stay on DuckDB 2.0, or move to
1.4 LTS, the only version with DuckLake and Postgres extensions on PyPI).

    .venv/bin/python bench/engine_compare.py --python-b /tmp/venv14/bin/python [--rounds 3] [--steps 200000]

Each round runs every bench once under each interpreter, the order swapped from one round to the next (A then B,
then B then A), so load that drifts over the minutes falls on both alike. Every interpreter keeps its own
`RUNWATCH_BENCH_OUT` (its own databases: a DuckDB 2.0 file does not open in 1.4). The ratio is B / A per figure
per round (above 1: B is slower or bigger); the table gives the median ratio over the rounds and each side's
median figure. The benches run at reduced sizes by default (`--steps`, `--archive-runs`, `--scale-runs`): the
point is the engines' ratio on this machine, not the issue's absolute targets.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import gen

NAME = "engine_compare"


def benches(args: argparse.Namespace) -> list[tuple[str, list[str], list[tuple[str, str]]]]:
    """(script, its arguments, [(figure label, dotted path into its JSON)]) in the order they run; query reads
    the database backfill just built."""
    steps = str(args.steps)
    return [
        (
            "backfill",
            ["--steps", steps, "--skip-tb", "--rounds", "1"],
            [
                ("backfill: collector ingest wall s", "ours.wall_s"),
                ("backfill: collector ingest peak RSS MB", "ours.peak_rss_mb"),
                ("backfill: store path only wall s", "ours_store_only.wall_s"),
                ("backfill: DuckDB read_ndjson+UNPIVOT wall s", "duckdb.wall_s"),
            ],
        ),
        (
            "query",
            ["--steps", steps, "--requests", "50"],
            [
                ("query: 2000 buckets, 1 metric, p50 ms", "one_metric.p50_ms"),
                ("query: 2000 buckets, 1 metric, p95 ms", "one_metric.p95_ms"),
                ("query: 4 metrics p95 ms", "four_metrics.p95_ms"),
                ("query: in-process p50 ms", "in_process.p50_ms"),
            ],
        ),
        (
            "detect_speed",
            ["--steps", steps, "--skip-incremental"],
            [
                (
                    "backlog: collector ingest s (stores; judges too since issue 22)",
                    "stored_to_judged.stored_s",
                ),
                (
                    "backlog: judged (again, since issue 22) by a collector started on it s",
                    "stored_to_judged.judged_after_stored_s",
                ),
                ("backlog: judging CPU s", "stored_to_judged.judging_cpu_s"),
            ],
        ),
        (
            "archive",
            [
                "--runs",
                str(args.archive_runs),
                "--steps",
                str(args.archive_steps),
                "--checkpoints",
                "2",
                "--requests",
                "30",
                "--judge-cap-s",
                "300",
            ],
            [
                ("archive: backfill wall s", "backfill.wall_s"),
                ("archive: backfill peak RSS MB", "backfill.peak_rss_mb"),
                ("archive: DuckDB alone wall s", "duckdb.wall_s"),
                ("archive: bytes per point on disk", "disk.db_bytes_per_point"),
                ("archive: all judged after serve s", "serve.judged_within_s"),
                ("archive: GET /api/runs p95 ms", "serve.runs_ms.p95"),
                ("archive: 2000-bucket query p95 ms", "serve.query_ms.p95"),
            ],
        ),
        (
            "scale",
            ["--runs", str(args.scale_runs), "--seconds", str(args.scale_seconds), "--warmup-s", "5"],
            [
                ("scale: write-to-API p95 ms", "p95_ms"),
                ("scale: NaN-to-alert p95 ms", "alert_p95_ms"),
                ("scale: collector CPU ms per line", "cpu_ms_per_line"),
                ("scale: collector RSS MB", "daemon_rss"),
                ("scale: GET /api/runs p95 ms", "runs_request_ms.p95"),
            ],
        ),
    ]


def dig(doc: dict, dotted: str) -> float | None:
    """The number at `a.b.c` in a bench's JSON (an RSS figure, a dict, gives its peak), None if absent."""
    x: object = doc
    for part in dotted.split("."):
        if not isinstance(x, dict) or part not in x:
            return None
        x = x[part]
    if isinstance(x, dict):
        x = x.get("peak_mb")
    return float(x) if isinstance(x, int | float) else None


def _num(x: float | None) -> float:
    return float("nan") if x is None else x


def engine_version(python: str) -> str:
    out = subprocess.run(
        [python, "-c", "import duckdb; print(duckdb.__version__)"], capture_output=True, text=True
    )
    return out.stdout.strip() or f"? ({out.stderr.strip()[-200:]})"


def run_one(
    python: str, out: Path, script: str, argv: list[str], timeout_s: float
) -> tuple[dict | None, float]:
    """Run one bench under `python` with its own output folder; its JSON (None if it failed) and wall s."""
    env = dict(os.environ, RUNWATCH_BENCH_OUT=str(out))
    (out / f"{script}.json").unlink(missing_ok=True)
    t0 = time.perf_counter()
    try:
        res = subprocess.run(
            [python, str(gen.BENCH / f"{script}.py"), *argv],
            cwd=gen.REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        ok = res.returncode == 0
        tail = (res.stdout + res.stderr)[-1500:]
    except subprocess.TimeoutExpired:
        ok, tail = False, f"timed out after {timeout_s:.0f} s"
    wall = time.perf_counter() - t0
    path = out / f"{script}.json"
    if not ok or not path.exists():
        print(f"  {script} under {python} FAILED:\n{tail}", flush=True)
        return None, wall
    return json.loads(path.read_text()), wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python-a", default=sys.executable, help="the baseline interpreter (default: this one)")
    ap.add_argument("--python-b", required=True, help="the interpreter compared with it")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=200_000, help="backfill, query and backlog history steps")
    ap.add_argument("--archive-runs", type=int, default=10)
    ap.add_argument("--archive-steps", type=int, default=100_000)
    ap.add_argument("--scale-runs", type=int, default=300)
    ap.add_argument("--scale-seconds", type=float, default=20.0)
    ap.add_argument("--only", nargs="+", help="bench scripts to run (default: all five)")
    ap.add_argument("--timeout-s", type=float, default=900.0, help="per bench run")
    args = ap.parse_args()

    sides = {"a": args.python_a, "b": args.python_b}
    versions = {k: engine_version(p) for k, p in sides.items()}
    outs = {k: gen.OUT / NAME / f"{k}-duckdb-{versions[k]}" for k in sides}
    for o in outs.values():
        o.mkdir(parents=True, exist_ok=True)
    print(f"A: {sides['a']} (duckdb {versions['a']}); B: {sides['b']} (duckdb {versions['b']})", flush=True)
    todo = [b for b in benches(args) if not args.only or b[0] in args.only]
    # figures[label][side] -> one value per round; ratios[label] -> B/A per round
    figures: dict[str, dict[str, list[float]]] = {}
    ratios: dict[str, list[float]] = {}
    loads: list[float] = []
    for r in range(args.rounds):
        order = ["a", "b"] if r % 2 == 0 else ["b", "a"]
        for script, argv, wanted in todo:
            got: dict[str, dict | None] = {}
            for side in order:
                loads.append(os.getloadavg()[0])
                got[side], wall = run_one(sides[side], outs[side], script, argv, args.timeout_s)
                print(f"round {r + 1} {script} {side} (duckdb {versions[side]}): {wall:.0f} s", flush=True)
            for label, path in wanted:
                vals = {s: dig(got[s], path) if got[s] else None for s in sides}
                for s, v in vals.items():
                    if v is not None:
                        figures.setdefault(label, {}).setdefault(s, []).append(v)
                if vals["a"] and vals["b"] is not None:
                    ratios.setdefault(label, []).append(vals["b"] / vals["a"])
    rows = []
    result: dict = {
        "versions": versions,
        "pythons": sides,
        "rounds": args.rounds,
        "args": vars(args),
        "figures": {},
    }
    for _, _, wanted in todo:
        for label, _ in wanted:
            f = figures.get(label, {})
            med = {s: statistics.median(f[s]) if f.get(s) else None for s in sides}
            rs = ratios.get(label, [])
            ratio = statistics.median(rs) if rs else None
            result["figures"][label] = {
                "a": f.get("a"),
                "b": f.get("b"),
                "ratios_b_over_a": rs,
                "median_ratio": ratio,
            }
            rows.append(
                [label, _num(med["a"]), _num(med["b"]), _num(ratio), " ".join(f"{x:.2f}" for x in rs)]
            )
    result["load_avg"] = (
        {"min": min(loads), "max": max(loads), "median": statistics.median(loads)} if loads else {}
    )
    gen.print_table(
        f"DuckDB {versions['b']} (B) against {versions['a']} (A), {args.rounds} interleaved rounds, "
        f"load average {result['load_avg'].get('min', 0):.1f}-{result['load_avg'].get('max', 0):.1f}",
        [
            "figure (lower is better)",
            f"A {versions['a']} median",
            f"B {versions['b']} median",
            "B/A median",
            "B/A per round",
        ],
        rows,
    )
    print(f"wrote {gen.write_json(NAME, result)}")


if __name__ == "__main__":
    main()
