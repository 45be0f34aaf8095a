"""Run every benchmark in one go and print one markdown table of the figures (also bench/out/results.md).

Order matters: query.py reuses the database backfill.py built. Each script runs as its own process (so a
failure in one is reported and the rest still run) and writes bench/out/<name>.json, which this script
reads back. `--steps` is passed through to every script (for live_latency it is the number of lines
written in all).

    .venv/bin/python bench/run_all.py [--steps N] [--skip-tb]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen  # noqa: E402

SCRIPTS = ("logging_cost", "backfill", "live_latency", "query")


def _load(name: str) -> dict | None:
    path = gen.OUT / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _n(x: object, unit: str = "", digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if isinstance(x, float):
        return (f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.{digits}g}") + unit
    return f"{x:,}{unit}" if isinstance(x, int) else f"{x}{unit}"


def _met(flag: object) -> str:
    return "n/a" if flag is None else ("yes" if flag else "**no**")


def rows_logging(r: dict | None) -> list[list[str]]:
    if not r:
        return [["logging cost per step (4 metrics)", "not run", "", "", "", ""]]
    b = r["backends"]
    ours = b.get("ours", {})
    peers, ratios = [], []
    for name in ("wandb", "tensorboard", "trackio"):
        p = b.get(name, {})
        if "us_per_step" in p:
            extra = f" (+ finish {p['finish_s']:.2f} s)" if name == "trackio" else ""
            peers.append(f"{name} {_n(p['us_per_step'], ' us')}{extra}")
            ratios.append(f"{name} {_n(p.get('ratio_vs_ours'), 'x')}")
        else:
            peers.append(f"{name}: {p.get('error', 'not run')[:60]}")
    ours_txt = (
        _n(ours.get("us_per_step"), " us/step")
        if "us_per_step" in ours
        else f"error: {ours.get('error', '')[:120]}"
    )
    split = ours.get("per_writer_us") or {}
    if split:
        top = max(split, key=split.get)
        ours_txt += f" (of which {top} {_n(split[top], ' us')} alone)"
    return [
        [
            f"logging cost per step, 4 metrics, {r['steps']:,} steps",
            ours_txt,
            "; ".join(peers),
            "peer/ours: " + ", ".join(ratios),
            "none set (lower is better)",
            "n/a",
        ]
    ]


def rows_backfill(r: dict | None) -> list[list[str]]:
    if not r:
        return [["backfill", "not run", "", "", "", ""]]
    o, d = r["ours"], r["duckdb"]
    rows = [
        [
            f"backfill {r['steps']:,} steps ({r['points']:,} points, {r['bytes'] / 1e6:.0f} MB)",
            f"{_n(o.get('points_per_s'), ' pts/s')}, {_n(o.get('wall_s'), ' s')}"
            if "points_per_s" in o
            else f"error: {o.get('error', '')[:120]}",
            f"DuckDB read_ndjson+UNPIVOT into our tables {_n(d.get('points_per_s'), ' pts/s')}, "
            f"{_n(d.get('wall_s'), ' s')}; into a string table {_n(r.get('duckdb_strings', {}).get('wall_s'), ' s')} "
            f"(medians of {len(o.get('rounds_wall_s', [1]))} turns)",
            f"ours/DuckDB {_n(r.get('ratio_vs_duckdb'), 'x')} (string table: {_n(r.get('ratio_vs_duckdb_strings'), 'x')})",
            ">= 0.8x and >= 3M pts/s",
            _met(r.get("met")),
        ],
        [
            "stored point count (via CLI --json)",
            _n(o.get("points_stored")),
            f"expected {r['points']:,}",
            "",
            "exact",
            _met(r.get("count_ok")),
        ],
    ]
    so = r.get("ours_store_only", {})
    if "points_per_s" in so and "points_per_s" in d:
        rows.append(
            [
                "backfill, our store path only (Ingestor without detectors, in-process)",
                f"{_n(so['points_per_s'], ' pts/s')}, {_n(so['wall_s'], ' s')} (inside {_n(so.get('load_s'), ' s')})",
                f"DuckDB inside {_n(d.get('load_s'), ' s')}",
                f"ours/DuckDB {_n(so['points_per_s'] / d['points_per_s'], 'x')} (inside: {_n(d['load_s'] / so['load_s'], 'x')})",
                "(split of the row above)",
                "n/a",
            ]
        )
    tb = r.get("tensorboard", {})
    keep = tb.get("keep_all", {})
    if "wall_s" in keep and "points_per_s" in o:
        rows.append(
            [
                "backfill vs TensorBoard load (keep all)",
                _n(o.get("wall_s"), " s"),
                f"EventAccumulator {_n(keep['wall_s'], ' s')}",
                f"{keep['wall_s'] / o['wall_s']:.1f}x faster",
                "",
                "n/a",
            ]
        )
    flat = r.get("rss_flatness", [])
    rss = ", ".join(f"{x['steps']:,}: {_n(x.get('peak_rss_mb'), ' MB')}" for x in flat)
    peer_rss = f"DuckDB {_n(d.get('peak_rss_mb'), ' MB')}"
    if "peak_rss_mb" in keep:
        peer_rss += f"; TB keep-all {_n(keep['peak_rss_mb'], ' MB')}"
    rows.append(["backfill peak RSS by steps", rss, peer_rss, "", "flat in file size", _met(_flat(flat))])
    return rows


def _flat(flat: list[dict]) -> bool | None:
    vals = [x.get("peak_rss_mb") for x in flat]
    if len(vals) < 2 or any(v is None or math.isnan(v) for v in vals):
        return None
    # Flat: quadrupling the input grows peak memory by well under the input's own growth (< 1.5x).
    return max(vals) / min(vals) < 1.5


def rows_live(r: dict | None) -> list[list[str]]:
    if not r:
        return [["live latency", "not run", "", "", "", ""]]
    peers = "; ".join(
        f"{p['peer']} {_n(p['refresh_s'], ' s') if not math.isnan(p['refresh_s']) else 'n/a'}"
        for p in r["peers"]
    )
    ratio = (
        f"TensorBoard refresh / our p95: {_n(30.0 / (r['p95_ms'] / 1000), 'x')}"
        if r.get("p95_ms") and not math.isnan(r["p95_ms"])
        else ""
    )
    return [
        [
            f"write-to-API latency, {r['runs']} runs x {r['lines_per_s'] / r['runs']:.0f} lines/s, {r['samples']} samples",
            f"p50 {_n(r['p50_ms'], ' ms')}, p95 {_n(r['p95_ms'], ' ms')}, max {_n(r['max_ms'], ' ms')}, missed {r['missed']}",
            f"refresh intervals (documented defaults): {peers}",
            ratio,
            "p95 < 300 ms",
            _met(r.get("met")),
        ]
    ]


def rows_query(r: dict | None) -> list[list[str]]:
    if not r:
        return [["downsampled query", "not run", "", "", "", ""]]
    o, tb, al = r["ours"], r.get("tensorboard_default_sampling") or {}, r.get("alerts", {})
    tb_txt = (
        f"TensorBoard default sampling (1,000/tag) keeps {tb['spikes_kept']}/{tb['spikes_planted']} spikes, "
        f"NaN {'kept' if tb['nan_kept'] else 'lost'}"
        if "spikes_kept" in tb
        else "TensorBoard: not measured"
    )
    one, four, busy = r["one_metric"], r["four_metrics"], r.get("while_judging_backlog", {})
    return [
        [
            f"downsampled query, {r['buckets_asked']} buckets over {r['steps']:,} steps, {r['requests']} requests over HTTP",
            f"p50 {_n(one['p50_ms'], ' ms')}, p95 {_n(one['p95_ms'], ' ms')} (4 metrics: p95 {_n(four['p95_ms'], ' ms')}; "
            f"in-process query p50 {_n(r.get('in_process', {}).get('p50_ms'), ' ms')}; while judging the backlog p95 "
            f"{_n(busy.get('p95_ms'), ' ms')})",
            "",
            "",
            "p95 < 150 ms",
            _met(one["p95_ms"] < r["target_p95_ms"]),
        ],
        [
            "planted trouble visible after downsampling",
            f"{o['spikes_visible']}/{o['spikes_planted']} spikes, NaN {'shown' if o['nan_visible'] else 'lost'}",
            tb_txt,
            "",
            "all",
            _met(o["spikes_visible"] == o["spikes_planted"] and o["nan_visible"]),
        ],
        [
            "planted trouble alerted by the daemon (backfilled run)",
            f"{al.get('spikes_alerted', 'n/a')}/{o['spikes_planted']} spikes, NaN {'alerted' if al.get('nan_alerted') else 'not alerted'}; "
            f"backlog judged in {_n(r.get('catch_up_s'), ' s')}",
            "",
            "",
            "all",
            _met(al.get("spikes_alerted") == o["spikes_planted"] and al.get("nan_alerted")) if al else "n/a",
        ],
    ]


def table() -> str:
    """The markdown table of whatever figures bench/out holds."""
    head = ["figure", "ours", "peer(s)", "ratio", "target", "met?"]
    rows = (
        rows_logging(_load("logging_cost"))
        + rows_backfill(_load("backfill"))
        + rows_live(_load("live_latency"))
        + rows_query(_load("query"))
    )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, help="passed to every script (default: each script's own size)")
    ap.add_argument("--skip-tb", action="store_true", help="backfill without the TensorBoard loads")
    ap.add_argument("--only", nargs="*", choices=SCRIPTS, default=list(SCRIPTS))
    args = ap.parse_args()
    failed, took = [], {}
    for name in args.only:
        (gen.OUT / f"{name}.json").unlink(missing_ok=True)  # a stale figure must not pass for a new one
        cmd = [sys.executable, str(gen.BENCH / f"{name}.py")]
        if args.steps:
            cmd += ["--steps", str(args.steps)]
        if name == "backfill" and args.skip_tb:
            cmd.append("--skip-tb")
        print(f"\n=== {' '.join(cmd[1:])}", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.run(cmd, cwd=gen.REPO).returncode
        took[name] = time.perf_counter() - t0
        print(f"=== {name}: exit {rc} after {took[name]:.0f} s", flush=True)
        if rc != 0:
            failed.append(name)
    md = table()
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    times = ", ".join(f"{n} {t:.0f} s" for n, t in took.items())
    note = f"Measured {stamp} with `{' '.join([Path(sys.executable).name, *sys.argv])}` on {_machine()}"
    note += f" (script times: {times}).\n\n" if times else ".\n\n"
    (gen.OUT / "results.md").write_text(note + md)
    print("\n" + note + md)
    print(f"wrote {gen.OUT / 'results.md'}")
    if failed:
        print(f"failed: {', '.join(failed)}")
        raise SystemExit(1)


def _machine() -> str:
    import os

    load = os.getloadavg()
    return f"{os.cpu_count()} CPUs, load average {load[0]:.1f} at the end"


if __name__ == "__main__":
    main()
