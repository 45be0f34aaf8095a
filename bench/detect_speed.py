"""`python bench/detect_speed.py [--steps N] [--rl] [--skip-incremental] [--skip-store]`: how fast a backfill is judged.

The bench's verl history (bench/gen.py: train/loss, train/grad_norm, train/lr, train/time(s) every step,
val/loss every 1000 steps, five grad-norm spikes and a NaN; 1M steps = 4,001,000 points by default), or with
`--rl` a verl GRPO history (bench/gen_rl.py: 14 metrics a step, 9 of them judged by the RL and optimiser rules,
the RL rules' trouble planted; 250k steps = 3,500,000 points by default, written as verl's JSONL for the
end-to-end run), judged
  incremental  by one `RunDetector.update` (every point through every rule, as live points are);
  backlog      by `collector.detect.backlog.judge_columns` (numpy screens, only the points where a rule may
               fire fed one by one), checked to give exactly the same alerts;
  stored->judged  end to end: `python -m collector ingest` stores the file and judges it before it ends
               (the same alerts `serve` finds), then a collector started again on the database judges every
               stored point again (`Detection.warm_up`, `judge_again`, `catch_up` slices until none is left),
               as a restart does for a run when it next changes (issue 22): its seconds.
Prints points/s (wall and CPU) for each and the machine's load average (a shared machine: read wall times
with it; CPU seconds hold whatever share the process got).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen  # noqa: E402
import gen_rl  # noqa: E402

sys.path.insert(0, str(gen.REPO))
from collector.core.model import Points  # noqa: E402
from collector.detect.backlog import judge_columns  # noqa: E402
from collector.detect.engine import RunDetector  # noqa: E402


def columns(h: gen.History) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
    """The history as the store hands it out: rows by step, then metric name."""
    cols = gen.train_columns(h)
    names = sorted([*gen.TRAIN_METRICS, gen.VAL_METRIC])
    parts = [(cols["step"], np.full(h.steps, names.index(m)), cols[m]) for m in gen.TRAIN_METRICS]
    vs = cols["step"][cols["step"] % h.val_every == 0] if h.val_every else cols["step"][:0]
    parts.append(
        (vs, np.full(len(vs), names.index(gen.VAL_METRIC)), np.array([gen.val_loss(h, int(s)) for s in vs]))
    )
    steps, codes, values = (np.concatenate([p[i] for p in parts]) for i in range(3))
    order = np.lexsort((codes, steps))
    return steps[order], codes[order], names, values[order]


def rl_columns(steps: int) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
    """The GRPO history as the store hands it out: rows by step, then metric name."""
    cols = gen_rl.columns(steps)
    names = sorted(gen_rl.METRICS)
    codes = np.concatenate([np.full(steps, names.index(m)) for m in gen_rl.METRICS])
    all_steps = np.tile(cols["step"], len(gen_rl.METRICS))
    values = np.concatenate([cols[m] for m in gen_rl.METRICS])
    order = np.lexsort((codes, all_steps))
    return all_steps[order], codes[order], names, values[order]


def timed(fn):
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


def alerts_of(events) -> dict:
    return {(e.rule, e.metric, e.first_step): e.to_dict() for e in events}


def stored_to_judged(h: gen.History | None, rl_steps: int = 0) -> dict:
    """Store the history's file with the CLI (the GRPO history of `rl_steps` when `h` is None, written as
    verl's JSONL first), then judge the stored backlog as the daemon does."""
    from collector.daemon.detection import Detection
    from collector.store import alerts as store_alerts
    from collector.store.db import Store

    work = Path(tempfile.mkdtemp(prefix="detect-speed-"))
    try:
        db = work / "rw.duckdb"
        root = gen.verl_root(h) if h is not None else work / "runs"
        if h is None:
            gen_rl.write_verl_jsonl(root / "grpo" / "metrics.jsonl", rl_steps)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "collector", "ingest", "--db", str(db), str(root)],
                       cwd=gen.REPO, check=True, capture_output=True)  # fmt: skip
        stored_s = time.perf_counter() - t0
        store = Store(db)
        try:
            detection = Detection(store, db, sinks=[])
            t1, c1 = time.perf_counter(), time.process_time()
            detection.warm_up()
            detection.judge_again()  # as a restart does for a run when it next changes
            slices = 0
            while detection.catch_up():
                slices += 1
            judged_s, judged_cpu = time.perf_counter() - t1, time.process_time() - c1
            alerts = store_alerts.list_alerts(store)
            left = store.detection_backlogs()
        finally:
            store.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    by_rule: dict[str, int] = {}
    for a in alerts:
        by_rule[a["rule"]] = by_rule.get(a["rule"], 0) + 1
    return {"stored_s": stored_s, "judged_after_stored_s": judged_s, "judging_cpu_s": judged_cpu,
            "slices": slices + 1, "alerts_by_rule": by_rule, "backlogs_left": len(left)}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python bench/detect_speed.py", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps",
        type=int,
        help="steps of the bench history (1M of 4 points each; --rl: 250k of 14 points each)",
    )
    parser.add_argument("--rl", action="store_true", help="a verl GRPO history (bench/gen_rl.py) instead")
    parser.add_argument(
        "--skip-incremental", action="store_true", help="only the backlog path (the other takes ~30 s)"
    )
    parser.add_argument("--skip-store", action="store_true", help="no end-to-end stored->judged run")
    args = parser.parse_args(argv)
    if args.rl:
        args.steps = args.steps or 250_000
        h = None
        steps, codes, names, values = rl_columns(args.steps)
    else:
        args.steps = args.steps or 1_000_000
        h = gen.history(args.steps)
        steps, codes, names, values = columns(h)
    n = len(steps)
    out: dict = {"steps": args.steps, "rl": args.rl, "points": n, "load_before": os.getloadavg()}
    fast, wall, cpu = timed(lambda: judge_columns(RunDetector("bench"), steps, codes, names, values))
    out["backlog"] = {"wall_s": wall, "cpu_s": cpu, "points_per_s": n / wall, "points_per_cpu_s": n / cpu}
    print(f"backlog path:  {n:,} points in {wall:.2f} s wall ({cpu:.2f} s CPU) = {n / wall / 1e6:.2f} M points/s "
          f"({n / cpu / 1e6:.2f} M per CPU-s)", flush=True)  # fmt: skip
    if not args.skip_incremental:
        points = Points(steps.tolist(), [names[c] for c in codes.tolist()], values.tolist(), [None] * n)
        slow, wall, cpu = timed(lambda: RunDetector("bench").update(points))
        same = alerts_of(slow) == alerts_of(fast)
        out["incremental"] = {"wall_s": wall, "cpu_s": cpu, "points_per_s": n / wall, "same_alerts": same}
        print(f"incremental:   {n:,} points in {wall:.2f} s wall ({cpu:.2f} s CPU) = {n / wall / 1e3:,.0f} k points/s; "
              f"same alerts as the backlog path: {'yes' if same else 'NO'}", flush=True)  # fmt: skip
    out["alerts"] = sorted(f"{e.rule}@{e.first_step}" for e in fast)
    print(f"alerts: {', '.join(out['alerts'])}")
    if not args.skip_store:
        e2e = stored_to_judged(h, args.steps)
        out["stored_to_judged"] = e2e
        print(f"stored and judged by `collector ingest` in {e2e['stored_s']:.2f} s; judged again by a restarted "
              f"collector in {e2e['judged_after_stored_s']:.2f} s ({e2e['judging_cpu_s']:.2f} s CPU, {e2e['slices']} "
              f"slices); alerts {e2e['alerts_by_rule']}")  # fmt: skip
    out["load_after"] = os.getloadavg()
    print(f"load average before {out['load_before'][0]:.1f}, after {out['load_after'][0]:.1f} (2 cores)")
    gen.write_json("detect_speed_rl" if args.rl else "detect_speed", out)


if __name__ == "__main__":
    main()
