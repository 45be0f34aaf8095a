"""Archive: a team's finished runs (default 50 runs x 500k steps, 100M points) backfilled and served.

Each run folder holds a copy of the same generated verl history (bench/gen.py: 4 metrics per step, val/loss
every 1000 steps, 5 grad-norm spikes and a NaN) and `--checkpoints` verl checkpoint folders (a tiny but
complete `huggingface/` export each, so the overview gives checkpoint advice). Measured, in order:
  backfill  `python -m collector ingest --db DB ROOT` as a subprocess: wall time, points/s, peak RSS;
  duckdb    DuckDB alone loading the same files into the collector's own tables (one read_ndjson over all
            the files, UNPIVOT, in a bare interpreter): the yardstick for points/s;
  disk      the database's bytes per point, against the same rows (point_rows' columns) in one Parquet
            file written by DuckDB with zstd;
  serve     a real `python -m collector serve` on the database: the time until every run is judged
            (`judged_to` null in GET /api/runs for all), GET /api/runs p50/p95 while judging and after,
            a 2,000-bucket GET .../metrics p50/p95 over runs in turn, and the daemon's RSS (now and peak).

    .venv/bin/python bench/archive.py [--runs 50] [--steps 500000] [--checkpoints 20] [--requests 50]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import backfill  # noqa: E402
import gen  # noqa: E402
import harness  # noqa: E402

NAME = "archive"
TARGET_RUNS_P95_MS = 200.0
TARGET_QUERY_P95_MS = 150.0
BUCKETS = 2000

# DuckDB alone: every run's file in one read_ndjson (the folder name is the run), unpivoted and loaded into
# the collector's own tables. argv: the glob, the database, the repository (for the schema).
_YARDSTICK = """
import json, sys, time
t0 = time.perf_counter()
import duckdb
sys.path.insert(0, sys.argv[3])
from collector.store.schema import migrate
con = duckdb.connect(sys.argv[2])
migrate(con)
con.execute("BEGIN TRANSACTION")
con.execute(\"\"\"CREATE TEMP TABLE long AS
               SELECT split_part(filename, '/', -2) AS run_id, metric, step, value
               FROM (UNPIVOT (SELECT filename, step, data.* FROM read_ndjson(?, filename = true))
                     ON COLUMNS(* EXCLUDE (step, filename)) INTO NAME metric VALUE value)\"\"\", [sys.argv[1]])
con.execute(\"\"\"INSERT INTO series (run_id, metric)
               SELECT DISTINCT run_id, metric FROM long ORDER BY run_id, metric\"\"\")
con.execute(\"\"\"INSERT INTO point_rows (series, step, value, wall_time, source_id, segment)
               SELECT s.id, l.step, l.value, NULL, 1, 0
               FROM long l JOIN series s ON s.run_id = l.run_id AND s.metric = l.metric\"\"\")
con.execute("COMMIT")
n = con.execute("SELECT count(*) FROM point_rows").fetchall()[0][0]
con.close()
print(json.dumps({"load_s": time.perf_counter() - t0, "points": n}))
"""

# The same rows the collector stores (point_rows), ordered as it stores them, into one zstd Parquet file.
_PARQUET = """
import json, os, sys
import duckdb
con = duckdb.connect(sys.argv[1], read_only=True)
con.execute("COPY (SELECT * FROM point_rows ORDER BY series, step) TO '" + sys.argv[2].replace("'", "''")
            + "' (FORMAT parquet, COMPRESSION zstd)")
print(json.dumps({"bytes": os.path.getsize(sys.argv[2])}))
"""


def _safetensors_header_only() -> bytes:
    header = b'{"__metadata__":{}}'
    return struct.pack("<Q", len(header)) + header


def make_archive(h: gen.History, runs: int, checkpoints: int) -> Path:
    """`runs` folders with the history's JSONL and `checkpoints` complete verl checkpoints each (cached)."""
    root = gen.DATA / f"archive-{runs}x-{h.key}-c{checkpoints}"
    done = root.with_suffix(".done")
    if done.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    source = gen.verl_file(h)
    for i in range(runs):
        run_dir = root / f"run-{i:03d}"
        run_dir.mkdir(parents=True)
        shutil.copyfile(source, run_dir / "metrics.jsonl")
        every = max(1, h.steps // max(1, checkpoints))
        for k in range(1, checkpoints + 1):
            hf = run_dir / f"global_step_{k * every}" / "huggingface"
            hf.mkdir(parents=True)
            (hf / "config.json").write_text('{"model_type": "qwen2"}')
            (hf / "tokenizer.json").write_text("{}")
            (hf / "model.safetensors").write_bytes(_safetensors_header_only())
        if checkpoints:
            (run_dir / "latest_checkpointed_iteration.txt").write_text(str(checkpoints * every))
    done.write_text("")
    return root


def rss_mb(pid: int) -> dict:
    """The process's resident memory now and its peak, from /proc (MB)."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
    )
    return {k: int(fields[f].split()[0]) / 1024 for k, f in (("now_mb", "VmRSS"), ("peak_mb", "VmHWM"))}


def timed_get(d: harness.Daemon, path: str, params: list | None = None) -> tuple[float, object]:
    t0 = time.perf_counter()
    answer = d.get(path, params, timeout=120)
    return (time.perf_counter() - t0) * 1000, answer


def serve(db: Path, root: Path, runs: int, requests: int, judge_cap_s: float) -> dict:
    """Start a daemon on the backfilled database; time judging, the overview and a downsampled query."""
    out: dict = {}
    with harness.Daemon(db, [root]) as d:
        t0 = time.perf_counter()
        busy: list[float] = []
        judged_s = None
        while time.perf_counter() - t0 < judge_cap_s:
            ms, listing = timed_get(d, "/api/runs")
            busy.append(ms)
            behind = [r for r in listing if r.get("judged_to") is not None]
            if not behind and len(listing) >= runs:
                judged_s = time.perf_counter() - t0
                break
            time.sleep(0.5)
        out["judged_within_s"] = judged_s
        out["judge_cap_s"] = judge_cap_s
        out["runs_while_judging_ms"] = {"p50": gen.percentile(busy, 50), "p95": gen.percentile(busy, 95)}
        if judged_s is None:
            out["runs_left_judging"] = len(behind)
        idle: list[float] = []
        for _ in range(requests):
            ms, listing = timed_get(d, "/api/runs")
            idle.append(ms)
        out["runs_listed"] = len(listing)
        out["recommended_steps"] = sorted({r.get("recommended_step") for r in listing}, key=str)
        out["runs_ms"] = {"p50": gen.percentile(idle, 50), "p95": gen.percentile(idle, 95), "max": max(idle)}
        names = sorted(r["id"] for r in listing)
        query: list[float] = []
        for i in range(requests):
            run = names[i % len(names)]
            ms, answer = timed_get(
                d, f"/api/runs/{run}/metrics", [("metric", "train/grad_norm"), ("points", BUCKETS)]
            )
            query.append(ms)
        out["query_ms"] = {
            "p50": gen.percentile(query, 50),
            "p95": gen.percentile(query, 95),
            "max": max(query),
        }
        out["query_buckets"] = len(answer["series"][0]["steps"])
        out["daemon_rss"] = rss_mb(d.proc.pid)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--steps", type=int, default=500_000, help="steps per run (default 500000)")
    ap.add_argument("--checkpoints", type=int, default=20, help="checkpoint folders per run (default 20)")
    ap.add_argument("--requests", type=int, default=50)
    ap.add_argument("--judge-cap-s", type=float, default=1200.0, help="stop waiting for judging after this")
    ap.add_argument("--skip-duckdb", action="store_true", help="leave out DuckDB's own load of the files")
    args = ap.parse_args()
    h = gen.history(args.steps)
    t0 = time.perf_counter()
    root = make_archive(h, args.runs, args.checkpoints)
    print(f"archive {root} ready in {time.perf_counter() - t0:.1f} s", flush=True)
    points = h.points * args.runs
    db = gen.OUT / "db" / f"archive-{args.runs}x-{h.key}.duckdb"
    backfill.remove_db(db)
    db.parent.mkdir(parents=True, exist_ok=True)
    m = harness.measured_run(harness.collector_cmd("ingest", "--db", str(db), str(root), "--json"))
    last = m.output.strip().splitlines()[-1] if m.output.strip() else ""
    if m.rc != 0 or not last.startswith("{"):
        raise SystemExit(f"collector ingest exited {m.rc}: {m.output[-1500:]}")
    said = json.loads(last)
    res: dict = {
        "runs": args.runs,
        "steps_per_run": args.steps,
        "points": points,
        "checkpoints_per_run": args.checkpoints,
        "jsonl_bytes": gen.verl_file(h).stat().st_size * args.runs,
        "backfill": {
            "wall_s": m.wall_s,
            "points_per_s": points / m.wall_s,
            "peak_rss_mb": m.peak_rss_mb,
            "points_added": said.get("points_added"),
        },
    }
    print(
        f"backfill {m.wall_s:.1f} s, {points / m.wall_s / 1e6:.2f} M points/s, {m.peak_rss_mb:.0f} MB",
        flush=True,
    )
    if not args.skip_duckdb:
        scratch = db.with_name("archive-yardstick.duckdb")
        y = backfill.yardstick(_YARDSTICK, root / "*" / "metrics.jsonl", scratch)
        if "error" not in y:
            y["points_per_s"] = y["points"] / y["wall_s"]
            res["backfill"]["ours_vs_duckdb"] = y["wall_s"] / m.wall_s
        res["duckdb"] = y
        print(f"duckdb {json.dumps(y)[:300]}", flush=True)
    parquet = db.with_suffix(".parquet")
    pq = harness.measured_run([sys.executable, "-c", _PARQUET, str(db), str(parquet)])
    pq_bytes = json.loads(pq.output.strip().splitlines()[-1])["bytes"] if pq.rc == 0 else None
    parquet.unlink(missing_ok=True)
    db_bytes = db.stat().st_size + (Path(f"{db}.wal").stat().st_size if Path(f"{db}.wal").exists() else 0)
    res["disk"] = {
        "db_bytes": db_bytes,
        "db_bytes_per_point": db_bytes / points,
        "parquet_zstd_bytes": pq_bytes,
        "parquet_bytes_per_point": pq_bytes / points if pq_bytes else None,
        "db_vs_parquet": db_bytes / pq_bytes if pq_bytes else None,
    }
    print(f"disk {json.dumps(res['disk'])}", flush=True)
    res["serve"] = serve(db, root, args.runs, args.requests, args.judge_cap_s)
    s = res["serve"]
    res["met"] = {
        "runs_p95": s["runs_ms"]["p95"] < TARGET_RUNS_P95_MS,
        "query_p95": s["query_ms"]["p95"] < TARGET_QUERY_P95_MS,
    }
    gen.print_table(
        f"Archive: {args.runs} runs x {args.steps:,} steps ({points:,} points), {os.cpu_count()} cores",
        ["figure", "ours", "peer / target"],
        [
            [
                "backfill wall s",
                m.wall_s,
                f"DuckDB {res.get('duckdb', {}).get('wall_s', float('nan')):.1f} s",
            ],
            [
                "backfill M points/s",
                points / m.wall_s / 1e6,
                f"DuckDB {res.get('duckdb', {}).get('points_per_s', float('nan')) / 1e6:.2f}",
            ],
            ["backfill peak RSS MB", m.peak_rss_mb, ""],
            [
                "disk bytes/point",
                res["disk"]["db_bytes_per_point"],
                f"Parquet zstd {res['disk']['parquet_bytes_per_point'] or float('nan'):.2f}",
            ],
            [
                "judged within s (after serve starts)",
                s["judged_within_s"] if s["judged_within_s"] is not None else f"> {s['judge_cap_s']:.0f}",
                "",
            ],
            ["GET /api/runs p95 ms (while judging)", s["runs_while_judging_ms"]["p95"], ""],
            [
                "GET /api/runs p50 / p95 ms",
                f"{s['runs_ms']['p50']:.1f} / {s['runs_ms']['p95']:.1f}",
                f"< {TARGET_RUNS_P95_MS:.0f}",
            ],
            [
                f"{BUCKETS}-bucket query p50 / p95 ms",
                f"{s['query_ms']['p50']:.1f} / {s['query_ms']['p95']:.1f}",
                f"< {TARGET_QUERY_P95_MS:.0f}",
            ],
            [
                "daemon RSS now / peak MB",
                f"{s['daemon_rss']['now_mb']:.0f} / {s['daemon_rss']['peak_mb']:.0f}",
                "",
            ],
        ],
    )
    print(f"wrote {gen.write_json(NAME, res)}")


if __name__ == "__main__":
    main()
