"""Query: the API's downsampled answer over a 1M-step run, timed over real HTTP, and checked for trouble.

Reuses the database bench/backfill.py built (or builds it with our ingest when it is missing), starts a
real `python -m collector serve` on it, and times `GET /api/runs/{run}/metrics?metric=M&points=2000`
(one metric, then all four training metrics in one request): p50/p95 over 50 requests after 3 warm-up
requests. Then checks that every planted grad-norm spike is a bucket maximum in the answer and the NaN
loss is visible, against TensorBoard's default sampling (1,000 points per tag, reservoir) as measured
by the backfill run.

    .venv/bin/python bench/query.py [--steps 1000000] [--requests 50]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import backfill  # noqa: E402
import gen  # noqa: E402
import harness  # noqa: E402

NAME = "query"
TARGET_P95_MS = 150.0
BUCKETS = 2000


def is_nan(v: object) -> bool:
    return isinstance(v, float) and math.isnan(v)


def trouble_visible(h: gen.History, by_metric: dict[str, dict]) -> dict:
    """Which planted spikes are a bucket maximum of train/grad_norm, and whether the NaN loss shows.

    A spike counts when some bucket's max equals the planted value and that bucket's step range holds the
    spike's step; the NaN counts when a train/loss bucket reports a NaN (in its max or value) or the
    answer flags non-finite points for the bucket holding the NaN step.
    """
    grad = by_metric.get("train/grad_norm", {})
    maxima = grad.get("max") or grad.get("values") or []
    steps = grad.get("steps") or []
    seen = []
    for s, v in zip(h.spike_steps, h.spike_values, strict=True):
        hits = [i for i, m in enumerate(maxima) if m == v]
        seen.append(bool(hits) and any(_bucket_holds(steps, i, s) for i in hits))
    loss = by_metric.get("train/loss", {})
    nan_shown = any(
        is_nan(x) for key in ("max", "values", "min", "first", "last") for x in (loss.get(key) or [])
    )
    return {"spikes_visible": sum(seen), "spikes_planted": len(seen), "nan_visible": nan_shown}


def _bucket_holds(steps: list[int], i: int, step: int) -> bool:
    # A bucket is labelled by one step; it covers the steps up to the next bucket's label.
    lo = steps[i - 1] if i > 0 else -math.inf
    hi = steps[i + 1] if i + 1 < len(steps) else math.inf
    return lo < step < hi or steps[i] == step


def timed_requests(
    d: harness.Daemon, path: str, params: list, n: int, warm: int = 3
) -> tuple[list[float], dict]:
    """Milliseconds for each of n GETs (after `warm` untimed ones), and the last answer."""
    for _ in range(warm):
        d.get(path, params)
    times, answer = [], {}
    for _ in range(n):
        t0 = time.perf_counter()
        answer = d.get(path, params)
        times.append((time.perf_counter() - t0) * 1000)
    return times, answer


def in_process(db: Path, n: int, warm: int = 3) -> list[float]:
    """Milliseconds of the same one-metric query run by the collector's own read function in this
    process, no daemon and no HTTP: splits the API's time into query and serving."""
    sys.path.insert(0, str(gen.REPO))
    from collector.store import read as store_read
    from collector.store.db import Store

    store = Store(db)
    try:
        times = []
        for i in range(warm + n):
            t0 = time.perf_counter()
            store_read.series(store, gen.RUN_NAME, "train/grad_norm", BUCKETS)
            if i >= warm:
                times.append((time.perf_counter() - t0) * 1000)
        return times
    finally:
        store.close()


def alerted(h: gen.History, alerts: list[dict]) -> dict:
    """Which planted troubles the daemon's detectors raised an alert for (any rule covering the step)."""

    def covered(step: int, metric: str) -> bool:
        return any(
            a.get("metric") == metric
            and (a.get("first_step") or 0) <= step <= (a.get("last_step") or a.get("first_step") or 0)
            for a in alerts
        )

    rules: dict[str, int] = {}
    for a in alerts:
        rules[a["rule"]] = rules.get(a["rule"], 0) + 1
    return {
        "spikes_alerted": sum(covered(s, "train/grad_norm") for s in h.spike_steps),
        "nan_alerted": covered(h.nan_step, "train/loss"),
        "alerts_by_rule": rules,
    }


def tensorboard_sampling(h: gen.History) -> dict | None:
    """What TensorBoard's default sampling kept of the same history, from bench/out/backfill.json."""
    path = gen.OUT / "backfill.json"
    if not path.exists():
        return None
    r = json.loads(path.read_text())
    if r.get("history") != h.key:
        return None
    return r.get("tensorboard", {}).get("server_default")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=1_000_000, help="steps of the stored run (default 1000000)")
    ap.add_argument("--requests", type=int, default=50)
    args = ap.parse_args()
    h = gen.history(args.steps)
    db = backfill.db_path(h)
    if not backfill.built_by_this_collector(db):
        print(f"{db} missing or built by other collector code: ingesting the history first", flush=True)
        r = backfill.ingest_ours(h, db)
        if "error" in r:
            raise SystemExit(r["error"])

    path = f"/api/runs/{gen.RUN_NAME}/metrics"
    one = [("metric", "train/grad_norm"), ("points", BUCKETS)]
    four = [("metric", m) for m in gen.TRAIN_METRICS] + [("points", BUCKETS)]
    # A fresh copy each time: the first daemon on a backfilled database judges the backlog, and that
    # first start is what this measures every time.
    work = db.with_name(f"query-{db.name}")
    backfill.remove_db(work)
    shutil.copyfile(db, work)
    t_inside = in_process(work, args.requests)
    with harness.Daemon(work, [gen.verl_root(h)]) as d:
        t0 = time.perf_counter()
        t_busy, _ = timed_requests(d, path, one, min(20, args.requests))
        idle = harness.wait_idle(d.proc.pid)
        catch_up_s = time.perf_counter() - t0
        print(f"daemon idle (backlog judged) {catch_up_s:.1f} s after it answered", flush=True)
        t_one, a_one = timed_requests(d, path, one, args.requests)
        t_four, a_four = timed_requests(d, path, four, args.requests)
        alerts = d.get("/api/alerts", {"run": gen.RUN_NAME, "state": "all"})
    backfill.remove_db(work)
    by_metric = {s["metric"]: s for s in a_four["series"]}
    grad = by_metric.get("train/grad_norm", {})
    seen = trouble_visible(h, by_metric)
    tb = tensorboard_sampling(h)
    res = {
        "steps": h.steps,
        "points": h.points,
        "buckets_asked": BUCKETS,
        "buckets_returned": len(grad.get("steps", [])),
        "downsampled": grad.get("downsampled"),
        "total_points": grad.get("total_points"),
        "one_metric": {
            "p50_ms": gen.percentile(t_one, 50),
            "p95_ms": gen.percentile(t_one, 95),
            "max_ms": max(t_one),
        },
        "four_metrics": {
            "p50_ms": gen.percentile(t_four, 50),
            "p95_ms": gen.percentile(t_four, 95),
            "max_ms": max(t_four),
        },
        "in_process": {"p50_ms": gen.percentile(t_inside, 50), "p95_ms": gen.percentile(t_inside, 95)},
        "while_judging_backlog": {"p50_ms": gen.percentile(t_busy, 50), "p95_ms": gen.percentile(t_busy, 95)},
        "catch_up_s": catch_up_s,
        "daemon_went_idle": idle,
        "alerts": alerted(h, alerts),
        "requests": args.requests,
        "target_p95_ms": TARGET_P95_MS,
        "ours": seen,
        "tensorboard_default_sampling": tb,
        "one_metric_answer_bytes": len(json.dumps(a_one)),
    }
    res["met"] = (
        res["one_metric"]["p95_ms"] < TARGET_P95_MS
        and seen["spikes_visible"] == seen["spikes_planted"]
        and seen["nan_visible"]
    )
    gen.print_table(
        f"Downsampled query ({BUCKETS} buckets) over {h.steps:,} steps, {args.requests} requests over HTTP once the daemon is idle",
        ["request", "p50 ms", "p95 ms", "max ms", "target p95"],
        [
            [
                "1 metric",
                res["one_metric"]["p50_ms"],
                res["one_metric"]["p95_ms"],
                res["one_metric"]["max_ms"],
                f"< {TARGET_P95_MS:.0f}",
            ],
            [
                "4 metrics",
                res["four_metrics"]["p50_ms"],
                res["four_metrics"]["p95_ms"],
                res["four_metrics"]["max_ms"],
                "",
            ],
            [
                f"1 metric, first {len(t_busy)} requests while the daemon judged the backlog",
                res["while_judging_backlog"]["p50_ms"],
                res["while_judging_backlog"]["p95_ms"],
                max(t_busy),
                "",
            ],
            [
                "1 metric, in-process store_read.series (no HTTP)",
                res["in_process"]["p50_ms"],
                res["in_process"]["p95_ms"],
                max(t_inside),
                "",
            ],
        ],
    )
    rows = [
        [
            "ours: API, 2000 buckets (max per bucket)",
            f"{seen['spikes_visible']}/{seen['spikes_planted']}",
            seen["nan_visible"],
        ]
    ]
    if tb and "spikes_kept" in tb:
        rows.append(
            [
                f"TensorBoard default sampling ({tb['points']:,} points kept)",
                f"{tb['spikes_kept']}/{tb['spikes_planted']}",
                tb["nan_kept"],
            ]
        )
    else:
        rows.append(
            ["TensorBoard default sampling", "not measured (run bench/backfill.py with the same --steps)", ""]
        )
    al = res["alerts"]
    rows.append(
        [
            "ours: alerts raised by the daemon's detectors",
            f"{al['spikes_alerted']}/{len(h.spike_steps)}",
            al["nan_alerted"],
        ]
    )
    gen.print_table("Planted trouble visible", ["view", "spikes", "NaN"], rows)
    print(
        f"backlog judged (daemon idle) {catch_up_s:.1f} s after start; alerts by rule: {al['alerts_by_rule']}"
    )
    print(f"met: {res['met']}")
    print(f"wrote {gen.write_json(NAME, res)}")


if __name__ == "__main__":
    main()
