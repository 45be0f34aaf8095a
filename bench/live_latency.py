"""Live latency: from a line appended to a run's metrics.jsonl to the API returning that step.

A real collector daemon (`python -m collector serve --port 0`) watches a root of 100 run folders while one
writer thread appends verl lines round-robin at a steady rate (2 lines/s per run by default). Every
`--sample-every`-th line (after a warm-up) is followed by a thread of its own, so samples never queue
behind each other: it polls `GET /api/runs/{run}/metrics?metric=train/loss&after=step-1` until the step
comes back, and the time from the write (after flush) to that answer is one sample. The resolution is the
poll interval plus one HTTP round trip, so the figures are upper bounds. Also reported: the API's round
trip under this load and the daemon's CPU use.

    .venv/bin/python bench/live_latency.py [--steps 12000] [--runs 100] [--rate 2]

--steps is the total number of lines written across all runs (12,000 = 60 s at 100 runs x 2 lines/s).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import threading
import time
import urllib.error
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen  # noqa: E402
import harness  # noqa: E402

NAME = "live_latency"
TARGET_P95_MS = 300.0
GIVE_UP_S = 30.0  # a sample not seen after this long counts as missed, not as a latency
# What the peers' dashboards wait before showing a new point, from their installed sources (versions as pinned).
PEERS = [
    {
        "peer": "TensorBoard 2.21",
        "refresh_s": 30.0,
        "source": "documented default: web UI reload period 30 s (reloadPeriodInMs 3e4, MIN_RELOAD_PERIOD_IN_S=30 in "
        "tensorboard/webfiles.zip); backend reload every 5 s (--reload_interval default 5.0, core_plugin.py)",
    },
    {
        "peer": "trackio 0.43",
        "refresh_s": 1.0,
        "source": "documented default: local dashboard polls every 1000 ms (frontend/src/lib/hostPolling.js, 3500 ms "
        "on HF Spaces); the logger sends batches every 0.5 s (BATCH_SEND_INTERVAL in run.py)",
    },
    {
        "peer": "W&B 0.31 (offline)",
        "refresh_s": float("nan"),
        "source": "documented behaviour: offline mode shows nothing until `wandb sync`; online, wandb-core streams "
        "history on its own file-stream interval (x_file_stream_transmit_interval, value not documented)",
    },
]


def line(step: int, run_index: int) -> str:
    return (
        f'{{"step":{step},"data":{{"train/loss":{1.0 + 1.0 / step + run_index * 1e-3!r},'
        f'"train/grad_norm":1.0,"train/lr":0.0001,"train/time(s)":0.11}}}}\n'
    )


def make_root(root: Path, runs: int, first_steps: int) -> list[Path]:
    """A fresh root of `runs` run folders, each with `first_steps` lines already written."""
    if root.exists():
        shutil.rmtree(root)
    files = []
    for i in range(runs):
        path = root / f"run-{i:03d}" / "metrics.jsonl"
        path.parent.mkdir(parents=True)
        path.write_text("".join(line(s, i) for s in range(1, first_steps + 1)))
        files.append(path)
    return files


def wait_for_runs(d: harness.Daemon, runs: int, step: int) -> None:
    """Block until the API lists every run with its first lines (start-up, not measured)."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        listed = d.get("/api/runs")
        if sum(1 for r in listed if (r.get("last_step") or 0) >= step) >= runs:
            return
        time.sleep(0.2)
    raise RuntimeError(f"the daemon did not list {runs} runs at step {step} within 300 s: {d.log_tail()}")


def probe(d: harness.Daemon, run: str, step: int, t_write: float, results: list, poll_s: float) -> None:
    """Follow one written line until the API returns it; append a dict to `results`: `latency_s` (None
    when missed), `error`, `t_write`, `start_delay_s` (write to first poll; near 0 since every sample
    has its own thread) and `rtts_s` (each poll's HTTP round trip: how fast the API answers under load)."""
    rec = {"latency_s": None, "error": None, "t_write": t_write, "rtts_s": []}
    rec["start_delay_s"] = time.perf_counter() - t_write
    params = {"metric": "train/loss", "after": step - 1}
    while True:
        t0 = time.perf_counter()
        try:
            series = d.get(f"/api/runs/{run}/metrics", params)["series"]
        except (urllib.error.URLError, OSError) as e:
            rec["error"] = f"{run} step {step}: {e}"
            break
        now = time.perf_counter()
        rec["rtts_s"].append(now - t0)
        if any(step in s.get("steps", []) for s in series):
            rec["latency_s"] = now - t_write
            break
        if now - t_write > GIVE_UP_S:
            rec["error"] = f"{run} step {step} not returned after {GIVE_UP_S:.0f} s"
            break
        time.sleep(poll_s)
    results.append(rec)


def write_steadily(
    files: list[Path],
    total: int,
    rate: float,
    first: int,
    sample_every: int,
    on_sample: Callable[[str, int, float], None],
    warmup: int,
) -> float:
    """Append `total` lines round-robin at `rate` lines/s overall; after the first `warmup` lines, hand
    every sample_every-th line (run, step, time written) to `on_sample`.

    Returns how far behind schedule the writer fell at worst (seconds), to show the load was steady.
    """
    handles = [open(p, "a", encoding="utf-8") for p in files]  # noqa: SIM115 (closed below)
    steps = [first] * len(files)
    lag = 0.0
    t0 = time.perf_counter()
    try:
        for k in range(total):
            due = t0 + k / rate
            now = time.perf_counter()
            if due > now:
                time.sleep(due - now)
            else:
                lag = max(lag, now - due)
            i = k % len(files)
            steps[i] += 1
            handles[i].write(line(steps[i], i))
            handles[i].flush()
            if k >= warmup and k % sample_every == 0:
                on_sample(f"run-{i:03d}", steps[i], time.perf_counter())
    finally:
        for h in handles:
            h.close()
    return lag


def by_quarter(results: list) -> list[float]:
    """Median latency (ms) of the samples in each quarter of the writing time: is the daemon keeping up?"""
    ok = sorted((r["t_write"], r["latency_s"] * 1000) for r in results if r["latency_s"] is not None)
    if len(ok) < 4:
        return []
    t0, t1 = ok[0][0], ok[-1][0] + 1e-9
    quarters: list[list[float]] = [[], [], [], []]
    for t, ms in ok:
        quarters[int(4 * (t - t0) / (t1 - t0))].append(ms)
    return [gen.percentile(q, 50) for q in quarters]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=12_000, help="lines written in all (default 12000)")
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--rate", type=float, default=2.0, help="lines per second per run")
    ap.add_argument(
        "--sample-every", type=int, default=97, help="follow every N-th line (a prime: spreads over the runs)"
    )
    ap.add_argument("--poll-ms", type=float, default=20.0, help="interval between polls of one sample")
    ap.add_argument("--warmup-s", type=float, default=5.0, help="seconds of writing before sampling starts")
    args = ap.parse_args()

    work = gen.OUT / "live"
    root, db = work / "root", work / "live.duckdb"
    first = 5
    files = make_root(root, args.runs, first)
    for p in work.glob("live.duckdb*"):
        p.unlink()
    total_rate = args.runs * args.rate
    print(
        f"{args.runs} runs, {args.rate} lines/s each ({total_rate:.0f} lines/s), {args.steps:,} lines ({args.steps / total_rate:.0f} s)",
        flush=True,
    )

    with harness.Daemon(db, [root]) as d:
        t0 = time.perf_counter()
        wait_for_runs(d, args.runs, first)
        print(
            f"daemon listed all {args.runs} runs {time.perf_counter() - t0:.1f} s after it answered",
            flush=True,
        )
        results: list = []
        probers: list[threading.Thread] = []

        def on_sample(run: str, step: int, t_write: float) -> None:
            t = threading.Thread(target=probe, args=(d, run, step, t_write, results, args.poll_ms / 1000))
            t.start()
            probers.append(t)

        cpu0, wall0 = harness.cpu_seconds(d.proc.pid), time.perf_counter()
        try:
            warmup = int(args.warmup_s * total_rate)
            lag = write_steadily(files, args.steps, total_rate, first, args.sample_every, on_sample, warmup)
        finally:
            for t in probers:
                t.join()
        cpu = (harness.cpu_seconds(d.proc.pid) - cpu0) / (time.perf_counter() - wall0)

    lat = [r["latency_s"] * 1000 for r in results if r["latency_s"] is not None]
    errors = [r["error"] for r in results if r["error"]]
    rtts = [t * 1000 for r in results for t in r["rtts_s"]]
    res = {
        "runs": args.runs,
        "lines": args.steps,
        "lines_per_s": total_rate,
        "samples": len(results),
        "missed": len(errors),
        "errors": errors[:10],
        "poll_ms": args.poll_ms,
        "p50_ms": gen.percentile(lat, 50),
        "p95_ms": gen.percentile(lat, 95),
        "max_ms": max(lat) if lat else float("nan"),
        "p50_ms_by_quarter": by_quarter(results),
        "mean_polls": len(rtts) / max(1, len(results)),
        "api_rtt_p50_ms": gen.percentile(rtts, 50),
        "api_rtt_p95_ms": gen.percentile(rtts, 95),
        "prober_start_delay_p95_ms": gen.percentile([r["start_delay_s"] * 1000 for r in results], 95),
        "daemon_cpu_cores": cpu,
        "writer_max_lag_s": lag,
        "target_p95_ms": TARGET_P95_MS,
        "peers": PEERS,
    }
    res["met"] = bool(lat) and not errors and res["p95_ms"] < TARGET_P95_MS
    gen.print_table(
        f"Write-to-API latency, {args.runs} runs at {total_rate:.0f} lines/s, {len(lat)} samples (poll {args.poll_ms:.0f} ms)",
        [
            "p50 ms",
            "p95 ms",
            "max ms",
            "missed",
            "API round trip p50/p95 ms",
            "daemon CPU (cores)",
            "target p95",
        ],
        [
            [
                res["p50_ms"],
                res["p95_ms"],
                res["max_ms"],
                res["missed"],
                f"{res['api_rtt_p50_ms']:.0f}/{res['api_rtt_p95_ms']:.0f}",
                round(cpu, 3),
                f"< {TARGET_P95_MS:.0f} ms: {'met' if res['met'] else 'NOT met'}",
            ]
        ],
    )
    gen.print_table(
        "Peers: time before a new point can show (refresh interval)",
        ["peer", "refresh s", "source"],
        [[p["peer"], p["refresh_s"], p["source"]] for p in PEERS],
    )
    for e in errors[:10]:
        print(f"missed: {e}")
    print(f"wrote {gen.write_json(NAME, res)}")


if __name__ == "__main__":
    main()
