"""CSV backfill: how fast a finished training_history.csv gets into the store, against DuckDB alone.

The same synthetic history as backfill.py (gen.py: 4 training metrics a step, a NaN loss, 5 grad-norm
spikes), written as a training_history.csv: `step`, the 4 metrics and `val/loss` (a value every 1000 steps,
an empty cell otherwise); 1.1M steps are ~100 MB. Timed, taking turns (--rounds, medians):
  ours      `python -m collector ingest --db DB ROOT --json`, a subprocess: wall time, peak RSS, stored points
            read back through `python -m collector runs/metrics --json` and compared with the file's;
  duckdb    DuckDB's own read_csv + UNPIVOT into the collector's own tables (the yardstick), in an
            interpreter of its own.
`--repo PATH` times another checkout's collector (e.g. the commit before the CSV bulk path) on the same file;
`--before PATH` times another checkout too, in the same rounds (turns taken), as a row `before` with its ratio.

    .venv/bin/python bench/backfill_csv.py [--steps 1100000] [--rounds 3] [--repo PATH] [--before PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen  # noqa: E402
import harness  # noqa: E402
from backfill import remove_db  # noqa: E402

NAME = "backfill_csv"
COLUMNS = ("train/loss", "train/grad_norm", "train/lr", "train/time(s)")


def csv_root(h: gen.History) -> Path:
    """A root folder with one run holding the history as training_history.csv (written once, cached)."""
    root = gen.DATA / f"csv-{h.key}"
    path = root / gen.RUN_NAME / "training_history.csv"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".part")
        with open(tmp, "w") as f:
            f.write(",".join(("step", *COLUMNS, gen.VAL_METRIC)) + "\n")
            for start in range(1, h.steps + 1, 50_000):
                cols = gen.train_columns(h, start, min(start + 50_000, h.steps + 1))
                values = [cols[c].tolist() for c in COLUMNS]
                rows = []
                for i, s in enumerate(cols["step"].tolist()):
                    val = repr(gen.val_loss(h, s)) if h.val_every and s % h.val_every == 0 else ""
                    rows.append(f"{s},{','.join(repr(v[i]) for v in values)},{val}\n")
                f.write("".join(rows))
        tmp.replace(path)
    return root


def ours(h: gen.History, db: Path, repo: Path) -> dict:
    root = csv_root(h)
    remove_db(db)
    m = harness.measured_run(
        [sys.executable, "-m", "collector", "ingest", "--db", str(db), str(root), "--json"], cwd=repo
    )
    if m.rc != 0:
        return {"error": m.output[-1500:]}
    per_metric = {}
    for metric in (*COLUMNS, gen.VAL_METRIC):
        series = harness.collector_json(
            "metrics", "--db", str(db), "--run", gen.RUN_NAME, "--metric", metric, "--points", "1"
        )
        per_metric[metric] = int(series["total_points"])
    return {"wall_s": m.wall_s, "peak_rss_mb": m.peak_rss_mb, "points": sum(per_metric.values())}


# DuckDB alone: the CSV read by read_csv (its own type detection), unpivoted to one row per value, into the
# collector's own tables (the schema its migrations build). argv: the CSV, the database, the repository.
_YARDSTICK = """
import json, sys, time
t0 = time.perf_counter()
import duckdb
sys.path.insert(0, sys.argv[3])
from collector.store.schema import migrate
con = duckdb.connect(sys.argv[2])
migrate(con)
con.execute("BEGIN")
con.execute(\"\"\"CREATE TEMP TABLE long AS UNPIVOT (SELECT * FROM read_csv(?))
               ON COLUMNS(* EXCLUDE step) INTO NAME metric VALUE value\"\"\", [sys.argv[1]])
con.execute(\"\"\"INSERT INTO series (run_id, metric)
               SELECT 'bench-run', metric FROM (SELECT DISTINCT metric FROM long) ORDER BY metric\"\"\")
con.execute(\"\"\"INSERT INTO point_rows (series, step, value, wall_time, source_id, segment)
               SELECT s.id, l.step, l.value, NULL, 1, 0 FROM long l JOIN series s ON s.metric = l.metric\"\"\")
con.execute("COMMIT")
n = con.execute("SELECT count(*) FROM point_rows").fetchall()[0][0]
con.close()
print(json.dumps({"load_s": time.perf_counter() - t0, "points": n}))
"""


def yardstick(h: gen.History, db: Path) -> dict:
    remove_db(db)
    path = csv_root(h) / gen.RUN_NAME / "training_history.csv"
    m = harness.measured_run([sys.executable, "-c", _YARDSTICK, str(path), str(db), str(gen.REPO)])
    if m.rc != 0:
        return {"error": m.output[-1500:]}
    said = json.loads(m.output.strip().splitlines()[-1])
    return {"wall_s": m.wall_s, "peak_rss_mb": m.peak_rss_mb, "points": said["points"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=1_100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repo", type=Path, default=gen.REPO, help="the checkout whose collector is timed")
    ap.add_argument("--before", type=Path, help="another checkout timed in the same rounds (row `before`)")
    args = ap.parse_args()
    h = gen.history(args.steps)
    path = csv_root(h) / gen.RUN_NAME / "training_history.csv"
    mb = path.stat().st_size / 1e6
    rev = subprocess.run(
        ["git", "-C", str(args.repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    runs: dict[str, list[dict]] = {"ours": [], "duckdb": []} | ({"before": []} if args.before else {})
    work = gen.OUT / "work" / NAME
    work.mkdir(parents=True, exist_ok=True)
    for _ in range(args.rounds):
        runs["ours"].append(ours(h, work / "ours.duckdb", args.repo))
        if args.before:
            runs["before"].append(ours(h, work / "before.duckdb", args.before))
        runs["duckdb"].append(yardstick(h, work / "duckdb.duckdb"))
    rows, result = (
        [],
        {"steps": h.steps, "mb": mb, "points_expected": h.points, "collector": rev.stdout.strip()},
    )
    for name, rs in runs.items():
        failed = [r for r in rs if "error" in r]
        if failed:
            raise SystemExit(f"{name} failed: {failed[0]['error']}")
        wall = statistics.median(r["wall_s"] for r in rs)
        rss = max(r["peak_rss_mb"] for r in rs)
        pts = rs[-1]["points"]
        result[name] = {
            "wall_s": wall,
            "mb_per_s": mb / wall,
            "points_per_s": pts / wall,
            "peak_rss_mb": rss,
            "points": pts,
        }
        rows.append([name, wall, mb / wall, pts / wall, rss, pts, pts == h.points])
    result["ratio"] = result["ours"]["mb_per_s"] / result["duckdb"]["mb_per_s"]
    gen.print_table(
        f"CSV backfill: {mb:.0f} MB, {h.steps:,} steps, {h.points:,} points (collector {result['collector']})",
        ["", "wall s", "MB/s", "points/s", "peak RSS MB", "points", "exact"],
        rows,
    )
    print(f"ours / duckdb: {result['ratio']:.2f}")
    if args.before:
        result["before_ratio"] = result["before"]["mb_per_s"] / result["duckdb"]["mb_per_s"]
        print(f"before / duckdb: {result['before_ratio']:.2f}")
    if not math.isnan(result["ratio"]):
        gen.write_json(NAME, result)


if __name__ == "__main__":
    main()
