"""Scale: a thousand live runs. From a line appended to the API returning it, and from a NaN written to its alert.

A real `python -m collector serve` watches a root of `--runs` run folders (default 1,000). One writer thread
appends verl lines on a 100 ms tick: each run writes 1 line/s (its phase spread over the second), and
`--fast-share` of the runs (10%) write 10 lines/s. After a warm-up, every `--sample-every`-th line gets a
thread of its own that polls `GET /api/runs/{run}/metrics?metric=train/loss&after=step-1` until the step
comes back (write-to-API latency); every `--nan-every-s` seconds one run (a different one each time) gets a
NaN loss line, and a thread polls `GET /api/alerts?run=R&rule=nonfinite` until the alert for that step is
there (alert latency). Resolution: the poll interval plus one round trip (upper bounds); the probes are kept
few and slow (about 2 samples a second, 100 ms polls) so that they do not become the load they measure. Also: the
collector's CPU (cores, from /proc, over the measured window), its RSS now and peak, how long it took to
list every run, how far the writer fell behind its schedule, and GET /api/runs's round trip.

    .venv/bin/python bench/scale.py [--runs 1000] [--seconds 60] [--fast-share 0.1] [--polling]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import threading
import time
import urllib.error
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import archive  # noqa: E402
import gen  # noqa: E402
import harness  # noqa: E402

NAME = "scale"
TARGET_P95_MS = 1000.0
TARGET_ALERT_P95_MS = 2000.0
TARGET_CPU_CORES = 1.0
GIVE_UP_S = 60.0
TICK_S = 0.1


def line(step: int, run_index: int, loss: str | None = None) -> str:
    loss = loss or repr(1.0 + 1.0 / step + run_index * 1e-6)
    return (
        f'{{"step":{step},"data":{{"train/loss":{loss},'
        f'"train/grad_norm":1.0,"train/lr":0.0001,"train/time(s)":0.11}}}}\n'
    )


def make_root(root: Path, runs: int, first_steps: int) -> None:
    if root.exists():
        shutil.rmtree(root)
    for i in range(runs):
        path = root / f"run-{i:04d}" / "metrics.jsonl"
        path.parent.mkdir(parents=True)
        path.write_text("".join(line(s, i) for s in range(1, first_steps + 1)))


def stored_lines(d: harness.Daemon) -> int:
    """Lines the collector has stored so far over every run (each run's last step: one line per step)."""
    return sum(r.get("last_step") or 0 for r in d.get("/api/runs", timeout=120))


def follow(
    d: harness.Daemon, path: str, params: dict, seen, t_write: float, out: list, poll_s: float
) -> None:
    """Poll `path` until `seen(answer)`; append the latency in ms (None when missed) to `out`."""
    while True:
        try:
            answer = d.get(path, params, timeout=GIVE_UP_S)
        except (urllib.error.URLError, OSError) as e:
            out.append((None, f"{path}: {e}"))
            return
        now = time.perf_counter()
        if seen(answer):
            out.append(((now - t_write) * 1000, None))
            return
        if now - t_write > GIVE_UP_S:
            out.append((None, f"{path} {params}: not seen after {GIVE_UP_S:.0f} s"))
            return
        time.sleep(poll_s)


class Writer:
    """Appends to every run on schedule; samples lines and plants NaNs through the callbacks."""

    def __init__(self, root: Path, runs: int, fast: int, first: int) -> None:
        self.files = [root / f"run-{i:04d}" / "metrics.jsonl" for i in range(runs)]
        self.handles = [open(p, "a", encoding="utf-8") for p in self.files]  # noqa: SIM115 (closed in close)
        self.steps = [first] * runs
        self.fast = fast  # runs 0..fast-1 write every tick, the others once a second
        self.lines = 0
        self.max_lag_s = 0.0

    def due(self, tick: int) -> list[int]:
        """The runs writing on this tick: the fast ones, and the slow ones whose phase it is."""
        ticks_per_s = round(1 / TICK_S)
        return list(range(self.fast)) + [
            i for i in range(self.fast + tick % ticks_per_s, len(self.files), ticks_per_s)
        ]

    def write(self, i: int, loss: str | None = None) -> tuple[str, int, float]:
        self.steps[i] += 1
        h = self.handles[i]
        h.write(line(self.steps[i], i, loss))
        h.flush()
        self.lines += 1
        return f"run-{i:04d}", self.steps[i], time.perf_counter()

    def close(self) -> None:
        for h in self.handles:
            h.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--fast-share", type=float, default=0.1, help="share of runs writing 10 lines/s")
    ap.add_argument("--seconds", type=float, default=60.0, help="measured writing time (after warm-up)")
    ap.add_argument("--warmup-s", type=float, default=10.0)
    ap.add_argument(
        "--sample-every", type=int, default=997, help="follow every N-th line (a prime): ~2 a second"
    )
    ap.add_argument(
        "--nan-every-s", type=float, default=3.0, help="plant a NaN this often (another run each)"
    )
    ap.add_argument("--poll-ms", type=float, default=100.0, help="a sample's poll interval (the resolution)")
    ap.add_argument("--polling", action="store_true", help="run the collector with --polling (no inotify)")
    args = ap.parse_args()

    work = gen.OUT / "scale"
    root, db = work / "root", work / "scale.duckdb"
    first = 5
    make_root(root, args.runs, first)
    for p in work.glob("scale.duckdb*"):
        p.unlink()
    fast = round(args.runs * args.fast_share)
    rate = fast * 10 + (args.runs - fast)
    print(f"{args.runs} runs ({fast} at 10 lines/s): {rate} lines/s for {args.seconds:.0f} s", flush=True)
    extra = ("--polling",) if args.polling else ()
    lat: list = []
    alerts: list = []
    probers: list[threading.Thread] = []
    with harness.Daemon(db, [root], extra) as d:
        t0 = time.perf_counter()
        deadline = t0 + 600
        while True:
            listed = d.get("/api/runs", timeout=120)
            if sum(1 for r in listed if (r.get("last_step") or 0) >= first) >= args.runs:
                break
            if time.perf_counter() > deadline:
                raise SystemExit(f"not every run listed within 600 s: {d.log_tail()}")
            time.sleep(0.5)
        listed_s = time.perf_counter() - t0
        print(f"daemon listed all {args.runs} runs {listed_s:.1f} s after it answered", flush=True)
        w = Writer(root, args.runs, fast, first)
        poll = args.poll_ms / 1000
        start = time.perf_counter()
        measure_from = start + args.warmup_s
        end = measure_from + args.seconds
        cpu0 = None
        next_nan = measure_from
        nan_run = args.runs - 1  # slow runs first, from the end: one NaN per run
        runs_rtt: list[float] = []
        tick = 0
        try:
            while True:
                due_at = start + tick * TICK_S
                now = time.perf_counter()
                if now >= end:
                    break
                if due_at > now:
                    time.sleep(due_at - now)
                else:
                    w.max_lag_s = max(w.max_lag_s, now - due_at) if now > measure_from else w.max_lag_s
                if cpu0 is None and now >= measure_from:
                    cpu0, wall0 = harness.cpu_seconds(d.proc.pid), now
                    stored0 = stored_lines(d)
                for i in w.due(tick):
                    run, step, t_write = w.write(i)
                    if cpu0 is not None and w.lines % args.sample_every == 0:
                        params = {"metric": "train/loss", "after": step - 1}
                        t = threading.Thread(
                            target=follow,
                            args=(
                                d,
                                f"/api/runs/{run}/metrics",
                                params,
                                lambda a, s=step: any(s in x.get("steps", []) for x in a["series"]),
                                t_write,
                                lat,
                                poll,
                            ),
                        )
                        t.start()
                        probers.append(t)
                if cpu0 is not None and time.perf_counter() >= next_nan and nan_run >= fast:
                    next_nan += args.nan_every_s
                    run, step, t_write = w.write(nan_run, loss="NaN")
                    nan_run -= 1
                    params = {"run": run, "rule": "nonfinite", "state": "all"}
                    t = threading.Thread(
                        target=follow,
                        args=(
                            d,
                            "/api/alerts",
                            params,
                            lambda a, s=step: any(x.get("first_step") == s for x in a),
                            t_write,
                            alerts,
                            poll,
                        ),
                    )
                    t.start()
                    probers.append(t)
                if tick % 50 == 0 and cpu0 is not None:
                    ms, _ = archive.timed_get(d, "/api/runs")
                    runs_rtt.append(ms)
                tick += 1
        finally:
            for t in probers:
                t.join()
            w.close()
        cpu_s = harness.cpu_seconds(d.proc.pid) - cpu0
        cpu = cpu_s / (time.perf_counter() - wall0)
        stored = stored_lines(d) - stored0
        rss = archive.rss_mb(d.proc.pid)
    ok = [ms for ms, _ in lat if ms is not None]
    ok_alerts = [ms for ms, _ in alerts if ms is not None]
    errors = [e for _, e in lat + alerts if e]
    res = {
        "runs": args.runs,
        "fast_runs": fast,
        "lines_per_s": rate,
        "seconds": args.seconds,
        "polling": args.polling,
        "listed_all_s": listed_s,
        "samples": len(lat),
        "p50_ms": gen.percentile(ok, 50),
        "p95_ms": gen.percentile(ok, 95),
        "max_ms": max(ok) if ok else None,
        "alert_samples": len(alerts),
        "alert_p50_ms": gen.percentile(ok_alerts, 50),
        "alert_p95_ms": gen.percentile(ok_alerts, 95),
        "alert_max_ms": max(ok_alerts) if ok_alerts else None,
        "missed": len(errors),
        "errors": errors[:10],
        "daemon_cpu_cores": cpu,
        "lines_stored_while_measured": stored,
        # CPU per line, whatever share of the machine the collector got: what 1,900 lines/s would take.
        "cpu_ms_per_line": cpu_s / stored * 1000 if stored else None,
        "cores_needed_at_rate": cpu_s / stored * rate if stored else None,
        "daemon_rss": rss,
        "runs_request_ms": {"p50": gen.percentile(runs_rtt, 50), "p95": gen.percentile(runs_rtt, 95)},
        "writer_max_lag_s": w.max_lag_s,
        "poll_ms": args.poll_ms,
    }
    res["met"] = {
        "p95": bool(ok) and res["p95_ms"] < TARGET_P95_MS,
        "alert_p95": bool(ok_alerts) and res["alert_p95_ms"] < TARGET_ALERT_P95_MS,
        "cpu": cpu < TARGET_CPU_CORES,
        "none_missed": not errors,
    }
    gen.print_table(
        f"Scale: {args.runs} live runs, {rate} lines/s, {args.seconds:.0f} s measured"
        + (" (--polling)" if args.polling else ""),
        ["figure", "ours", "target"],
        [
            [
                "write-to-API p50 / p95 / max ms",
                f"{res['p50_ms']:.0f} / {res['p95_ms']:.0f} / {res['max_ms'] or 0:.0f} ({len(ok)} samples)",
                f"p95 < {TARGET_P95_MS:.0f}",
            ],
            [
                "NaN written -> alert p50 / p95 / max ms",
                f"{res['alert_p50_ms']:.0f} / {res['alert_p95_ms']:.0f} / {res['alert_max_ms'] or 0:.0f} ({len(ok_alerts)} samples)",
                f"p95 < {TARGET_ALERT_P95_MS:.0f}",
            ],
            ["missed", len(errors), "0"],
            ["collector CPU (cores)", round(cpu, 3), f"< {TARGET_CPU_CORES:.0f}"],
            [
                "collector CPU per line stored (ms); cores that takes at the full rate",
                f"{res['cpu_ms_per_line'] or float('nan'):.3f}; {res['cores_needed_at_rate'] or float('nan'):.2f}",
                f"< {TARGET_CPU_CORES:.0f}",
            ],
            ["lines stored while measured (written: rate x seconds)", stored, round(rate * args.seconds)],
            ["collector RSS now / peak MB", f"{rss['now_mb']:.0f} / {rss['peak_mb']:.0f}", ""],
            [
                "GET /api/runs p50 / p95 ms",
                f"{res['runs_request_ms']['p50']:.0f} / {res['runs_request_ms']['p95']:.0f}",
                "",
            ],
            ["all runs listed after (s)", round(listed_s, 1), ""],
            ["writer's worst lag behind schedule (s)", round(w.max_lag_s, 3), ""],
        ],
    )
    for e in errors[:10]:
        print(f"missed: {e}")
    print(f"wrote {gen.write_json(NAME, res)}")


if __name__ == "__main__":
    main()
