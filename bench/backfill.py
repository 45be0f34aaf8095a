"""Backfill: how fast a finished 1M-step verl history gets into the store, at what peak memory.

In one run, on the same generated file (4 metrics per step plus val/loss every 1000 steps, 5 planted
grad-norm spikes, one NaN loss):
  ours      `python -m collector ingest --db DB ROOT`, a subprocess: wall time, peak RSS, and the stored
            point count read back through `python -m collector ... --json`;
  duckdb    DuckDB's own read_ndjson + UNPIVOT into the collector's own tables (the yardstick), in a small
            interpreter of its own; and into one long table naming run and metric as strings (the
            collector's table before schema v5). Ours and these take turns (--rounds, default 5): medians;
  tensorboard  EventAccumulator loads of the same history as an event file: keep-all and its default
            size guidance (10,000 per tag), each a subprocess, and the TensorBoard server's default view
            (1,000 per tag: its reservoir replayed over the keep-all load, or its own ingester with
            --tb-modes ... server_default), with how many planted spikes and the NaN each keeps.
Then peak RSS of our ingest at 1/4, 1/2 and all of the steps (is memory flat in the file size?).
The database our ingest built is kept in bench/out/db/ for bench/query.py.

    .venv/bin/python bench/backfill.py [--steps 1000000] [--skip-tb]
"""

from __future__ import annotations

import argparse
import compileall
import hashlib
import json
import math
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen  # noqa: E402
import harness  # noqa: E402
from tensorboard_peer import tb_load  # noqa: E402

NAME = "backfill"
TB_MODES = ("keep_all", "default", "server_default")
TB_DEFAULT_MODES = ("keep_all", "default")
TARGET_RATIO = 0.8
TARGET_POINTS_PER_S = 3e6


def db_path(h: gen.History) -> Path:
    """Where the database of our ingest of `h` is kept for the query benchmark."""
    return gen.OUT / "db" / f"{h.key}.duckdb"


def remove_db(db: Path) -> None:
    """Delete a benchmark database and every file the collector keeps beside it."""
    for p in db.parent.glob(db.name + "*"):
        if p.is_dir():
            shutil.rmtree(p)  # a scratch folder left by a collector that did not finish
        else:
            p.unlink()


def collector_version() -> str:
    """A digest of the collector's source: a database built by other code is rebuilt, not reused."""
    digest = hashlib.sha256()
    for path in sorted((gen.REPO / "collector").rglob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def built_by_this_collector(db: Path) -> bool:
    """True when `db` exists and was built by the collector source now on disk."""
    stamp = Path(f"{db}.bench.json")
    return (
        db.exists()
        and stamp.exists()
        and json.loads(stamp.read_text()).get("collector") == collector_version()
    )


def ingest_ours(h: gen.History, db: Path, verify: bool = True) -> dict:
    """Backfill `h` into a fresh `db` with our CLI; with `verify`, read the stored count back through it.

    `wall_s` is the whole subprocess (interpreter start and imports included); `ingest_s` is the time the
    CLI itself reports for the ingest (its --json `seconds`).
    """
    root = gen.verl_root(h)
    remove_db(db)
    db.parent.mkdir(parents=True, exist_ok=True)
    m = harness.measured_run(harness.collector_cmd("ingest", "--db", str(db), str(root), "--json"))
    res = {"wall_s": m.wall_s, "peak_rss_mb": m.peak_rss_mb, "rc": m.rc, "points_expected": h.points}
    last = m.output.strip().splitlines()[-1] if m.output.strip() else ""
    if m.rc != 0 or not last.startswith("{"):
        res["error"] = f"collector ingest exited {m.rc}: {m.output[-1500:]}"
        return res
    said = json.loads(last)
    Path(f"{db}.bench.json").write_text(json.dumps({"collector": collector_version(), "history": h.key}))
    res["ingest_s"], res["points_added"] = said["seconds"], said["points_added"]
    res["points_per_s"] = h.points / m.wall_s
    if verify:
        stored = stored_points(db)
        res["points_stored"], res["stored_per_metric"] = stored["total"], stored["per_metric"]
        res["last_step"] = stored["last_step"]
    return res


def median_run(runs: list[dict]) -> dict:
    """The run of median wall time (the last one's verified counts kept), or the first error."""
    failed = [r for r in runs if "error" in r]
    if failed:
        return failed[0]
    ordered = sorted(runs, key=lambda r: r["wall_s"])
    return runs[-1] | ordered[len(ordered) // 2]


def stored_points(db: Path) -> dict:
    """What the CLI (the API's JSON) reports for the benchmark run: last step and points per metric."""
    runs = harness.collector_json("runs", "--db", str(db))
    run = next((r for r in runs if r["id"] == gen.RUN_NAME), None)
    if run is None:
        raise RuntimeError(f"run {gen.RUN_NAME!r} missing from `collector runs`: {[r['id'] for r in runs]}")
    per_metric = {}
    for m in (*gen.TRAIN_METRICS, gen.VAL_METRIC):
        series = harness.collector_json(
            "metrics", "--db", str(db), "--run", gen.RUN_NAME, "--metric", m, "--points", "1"
        )
        per_metric[m] = int(series["total_points"])
    return {"last_step": run["last_step"], "per_metric": per_metric, "total": sum(per_metric.values())}


# DuckDB alone, in an interpreter that imports nothing else: the verl JSONL read by read_ndjson (schema
# detected by DuckDB), unpivoted to one row per value, and loaded into the collector's own tables (the
# schema its migrations build: a series id per (run, metric) in `series`, the rows in `point_rows`).
# argv: the JSONL, the database, the repository (for the schema). Prints its JSON.
_YARDSTICK = """
import json, sys, time
t0 = time.perf_counter()
import duckdb
sys.path.insert(0, sys.argv[3])
from collector.store.schema import migrate
con = duckdb.connect(sys.argv[2])
migrate(con)
con.execute("BEGIN")
con.execute(\"\"\"CREATE TEMP TABLE long AS UNPIVOT (SELECT step, data.* FROM read_ndjson(?))
               ON COLUMNS(* EXCLUDE step) INTO NAME metric VALUE value\"\"\", [sys.argv[1]])
con.execute(\"\"\"INSERT INTO series (run_id, metric)
               SELECT 'bench-run', metric FROM (SELECT DISTINCT metric FROM long) ORDER BY metric\"\"\")
con.execute(\"\"\"INSERT INTO point_rows (series, step, value, wall_time, source_id, segment)
               SELECT s.id, l.step, l.value, NULL, 1, 0 FROM long l JOIN series s ON s.metric = l.metric\"\"\")
con.execute("COMMIT")
n, nans = con.execute("SELECT count(*), count(*) FILTER (WHERE isnan(value)) FROM point_rows").fetchall()[0]
con.close()
print(json.dumps({"load_s": time.perf_counter() - t0, "points": n, "nan_points": nans}))
"""

# The same, into one long table naming run and metric as strings in every row (the collector's table
# before schema v5): what the integer series ids save.
_YARDSTICK_STRINGS = """
import json, sys, time
t0 = time.perf_counter()
import duckdb
con = duckdb.connect(sys.argv[2])
con.execute(\"\"\"CREATE TABLE points AS
               SELECT 'bench-run' AS run_id, metric, step, value, NULL::DOUBLE AS wall_time,
                      1 AS source_id, 0 AS segment
               FROM (UNPIVOT (SELECT step, data.* FROM read_ndjson(?)) ON COLUMNS(* EXCLUDE step)
                     INTO NAME metric VALUE value)\"\"\", [sys.argv[1]])
n, nans = con.execute("SELECT count(*), count(*) FILTER (WHERE isnan(value)) FROM points").fetchall()[0]
con.close()
print(json.dumps({"load_s": time.perf_counter() - t0, "points": n, "nan_points": nans}))
"""


def yardstick(script: str, path: Path, db: Path) -> dict:
    """Run one of the DuckDB-alone loads in its own small interpreter: its JSON, wall time and peak RSS."""
    remove_db(db)
    m = harness.measured_run([sys.executable, "-c", script, str(path), str(db), str(gen.REPO)])
    remove_db(db)
    last = m.output.strip().splitlines()[-1] if m.output.strip() else ""
    if m.rc != 0 or not last.startswith("{"):
        return {"error": f"exited {m.rc}: {m.output[-1500:]}", "wall_s": m.wall_s}
    return json.loads(last) | {"wall_s": m.wall_s, "peak_rss_mb": m.peak_rss_mb}


def store_only(root: Path, db: Path) -> dict:
    """Our ingest without detection: the collector's `Ingestor` into a `Store`, nothing listening.

    Not what a user runs (the CLI also runs every detector over every point); it splits our backfill time
    into storing and detecting.
    """
    sys.path.insert(0, str(gen.REPO))
    from collector.ingest.reader import Ingestor
    from collector.store.db import Store

    t0 = time.perf_counter()
    store = Store(db)
    ingestor = Ingestor(store, [root])
    ingestor.ingest_all()
    n = store.rows("SELECT count(*) FROM points")[0][0]
    ingestor.close()
    store.close()
    return {"load_s": time.perf_counter() - t0, "points": n}


def _child(args: list[str]) -> dict:
    """Run this script's hidden child mode in a fresh interpreter; merge its JSON with wall and peak RSS."""
    m = harness.measured_run([sys.executable, __file__, *args])
    last = m.output.strip().splitlines()[-1] if m.output.strip() else ""
    if m.rc != 0 or not last.startswith("{"):
        return {"error": f"exited {m.rc}: {m.output[-1500:]}", "wall_s": m.wall_s}
    return json.loads(last) | {"wall_s": m.wall_s, "peak_rss_mb": m.peak_rss_mb}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=1_000_000, help="steps in the history (default 1000000)")
    ap.add_argument("--skip-tb", action="store_true", help="leave out the TensorBoard loads (minutes at 1M)")
    ap.add_argument(
        "--tb-modes",
        nargs="+",
        choices=TB_MODES,
        default=list(TB_DEFAULT_MODES),
        help="TensorBoard loads to time (server_default, the server's own ingester, takes ~3x keep_all; "
        "without it the server's sampling is replayed with its own reservoir over the keep-all load)",
    )
    ap.add_argument("--rounds", type=int, default=5, help="turns of ours and DuckDB's load (default 5)")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    h = gen.history(args.steps)
    if args.child:
        kind, *rest = args.child
        if kind == "store_only":
            out = store_only(Path(rest[0]), Path(rest[1]))
        else:
            out = tb_load(Path(rest[0]), rest[1], h)
        print(json.dumps(out))
        return

    t0 = time.perf_counter()
    path = gen.verl_file(h)
    print(
        f"input: {path} ({path.stat().st_size / 1e6:.0f} MB, {h.points:,} points; ready in {time.perf_counter() - t0:.1f} s)"
    )
    result: dict = {"steps": h.steps, "points": h.points, "bytes": path.stat().st_size, "history": h.key}

    # Python's bytecode cache, as any second run has it (this machine sets PYTHONDONTWRITEBYTECODE, which
    # would make every measured process compile the collector again).
    compileall.compile_dir(gen.REPO / "collector", quiet=1)
    db = db_path(h)
    ydb = gen.OUT / "db" / f"{h.key}-yardstick.duckdb"
    # Ours and the DuckDB loads take turns, `--rounds` times: the medians are compared (one run of each
    # on a shared machine can differ by 20% from the next).
    rounds: dict[str, list[dict]] = {"ours": [], "duckdb": [], "duckdb_strings": []}
    for i in range(args.rounds):
        rounds["ours"].append(ingest_ours(h, db, verify=i == args.rounds - 1))
        for key, script in (("duckdb", _YARDSTICK), ("duckdb_strings", _YARDSTICK_STRINGS)):
            rounds[key].append(yardstick(script, path, ydb))
        print(
            f"round {i + 1}: "
            + ", ".join(f"{k} {v[-1].get('wall_s', math.nan):.2f} s" for k, v in rounds.items())
        )
    for key, runs in rounds.items():
        result[key] = median_run(runs) | {"rounds_wall_s": [r.get("wall_s") for r in runs]}
        if "error" not in result[key]:
            result[key]["points_per_s"] = h.points / result[key]["wall_s"]
        print(f"{key} (median of {args.rounds}): {result[key]}", flush=True)

    sdb = gen.OUT / "db" / f"{h.key}-store-only.duckdb"
    remove_db(sdb)
    result["ours_store_only"] = _child(
        ["--steps", str(h.steps), "--child", "store_only", str(gen.verl_root(h)), str(sdb)]
    )
    remove_db(sdb)
    if "load_s" in result["ours_store_only"]:
        result["ours_store_only"]["points_per_s"] = h.points / result["ours_store_only"]["wall_s"]
    print(f"ours, store path only: {result['ours_store_only']}", flush=True)

    if not args.skip_tb:
        t0 = time.perf_counter()
        logdir = gen.tensorboard_dir(h)
        print(f"tensorboard event file ready in {time.perf_counter() - t0:.1f} s", flush=True)
        result["tensorboard"] = {}
        for mode in args.tb_modes:
            r = _child(["--steps", str(h.steps), "--child", "tb", str(logdir), mode])
            result["tensorboard"][mode] = r
            print(f"tensorboard {mode}: {r}", flush=True)
        replay = result["tensorboard"].get("keep_all", {}).get("server_default_replay")
        if "server_default" not in result["tensorboard"] and replay:
            # The server's default view, from its own sampler replayed over the keep-all load (no load time).
            result["tensorboard"]["server_default"] = replay | {"method": "TensorBoard's reservoir replayed"}

    result["rss_flatness"] = rss_flatness(h, result["ours"])
    ours, duck = result["ours"], result["duckdb"]
    if "points_per_s" in ours and "points_per_s" in duck:
        result["ratio_vs_duckdb"] = ours["points_per_s"] / duck["points_per_s"]
        result["target_ratio"], result["target_points_per_s"] = TARGET_RATIO, TARGET_POINTS_PER_S
        result["met"] = (
            result["ratio_vs_duckdb"] >= TARGET_RATIO and ours["points_per_s"] >= TARGET_POINTS_PER_S
        )
        result["count_ok"] = ours.get("points_stored") == h.points
        strings = result["duckdb_strings"]
        if "points_per_s" in strings:
            result["ratio_vs_duckdb_strings"] = ours["points_per_s"] / strings["points_per_s"]
    report(result)
    print(f"wrote {gen.write_json(NAME, result)}")


def rss_flatness(h: gen.History, full: dict) -> list[dict]:
    """Peak RSS of our ingest for a quarter, half and all of the steps (the full run reused)."""
    rows = []
    for n in (h.steps // 4, h.steps // 2):
        part = gen.history(n, h.seed, h.val_every)
        tmp = gen.OUT / "db" / f"{part.key}-rss.duckdb"
        r = ingest_ours(part, tmp, verify=False)
        remove_db(tmp)
        rows.append({"steps": n} | r)
        print(f"ours at {n:,} steps: {r}", flush=True)
    rows.append({"steps": h.steps} | full)
    return rows


def report(r: dict) -> None:
    """Print the backfill tables."""

    def row(label: str, x: dict, inner: str = "load_s") -> list:
        return [
            label,
            x.get("wall_s", math.nan),
            x.get(inner, math.nan),
            r["points"] / x["wall_s"] if x.get("wall_s") else math.nan,
            x.get("peak_rss_mb", math.nan),
            x.get("points_stored", x.get("points", "error")),
        ]

    rows = [
        row("ours: python -m collector ingest", r["ours"], "ingest_s"),
        row("ours, store path only (no detectors)", r.get("ours_store_only", {})),
        row("DuckDB read_ndjson+UNPIVOT, our tables", r["duckdb"]),
        row("DuckDB read_ndjson+UNPIVOT, string table", r.get("duckdb_strings", {})),
    ]
    rows += [
        row(f"TensorBoard EventAccumulator {m}", t)
        for m, t in r.get("tensorboard", {}).items()
        if "wall_s" in t
    ]
    gen.print_table(
        f"Backfill of {r['steps']:,} steps ({r['points']:,} points, {r['bytes'] / 1e6:.0f} MB), one subprocess "
        f"each; ours and DuckDB: the median of {len(r['ours'].get('rounds_wall_s', [1]))} turns",
        ["loader", "wall s", "inside s", "points/s (wall)", "peak RSS MB", "points kept"],
        rows,
    )
    if "ratio_vs_duckdb" in r:
        print(
            f"ours/duckdb speed: {r['ratio_vs_duckdb']:.2f}x (target >= {TARGET_RATIO}x and "
            f">= {TARGET_POINTS_PER_S / 1e6:.0f}M points/s: {'met' if r['met'] else 'NOT met'}); "
            f"stored count {'matches' if r['count_ok'] else 'DIFFERS'}"
        )
    if "ratio_vs_duckdb_strings" in r:
        print(f"ours/duckdb into a string table: {r['ratio_vs_duckdb_strings']:.2f}x")
    tb = r.get("tensorboard", {})
    if tb:
        gen.print_table(
            "Planted trouble kept by TensorBoard",
            ["size guidance", "points kept", "spikes kept", "NaN kept"],
            [
                [
                    f"{m} ({t['method']})" if "method" in t else m,
                    t.get("points", "?"),
                    f"{t.get('spikes_kept', '?')}/{t.get('spikes_planted', '?')}",
                    t.get("nan_kept", "?"),
                ]
                for m, t in tb.items()
            ],
        )
    gen.print_table(
        "Peak RSS of our ingest by history length",
        ["steps", "wall s", "peak RSS MB"],
        [[x["steps"], x.get("wall_s", math.nan), x.get("peak_rss_mb", math.nan)] for x in r["rss_flatness"]],
    )


if __name__ == "__main__":
    main()
