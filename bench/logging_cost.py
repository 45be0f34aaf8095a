"""Trainer-side logging cost per step: our run-directory writers against wandb, TensorBoard and trackio.

Every back end logs the same 4 metrics per step (train/loss, train/grad_norm, train/lr, train/time(s)) from
the same generated history, each in a fresh subprocess (so no back end pays for another's threads or
imports), in interleaved rounds (so a busy moment on the shared machine hits all of them alike). Reported:
microseconds per step (the median over rounds), set-up and finish/close time separately, and the ratio of
each peer's per-step cost to ours.

    .venv/bin/python bench/logging_cost.py [--steps 20000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen  # noqa: E402
import harness  # noqa: E402

sys.path.insert(0, str(gen.REPO))

BACKENDS = ("ours", "wandb", "tensorboard", "trackio")
NAME = "logging_cost"
# Where each peer's per-call figure came from before this benchmark existed (docs/notes, same machine).
KNOWN = {"wandb": 98.0, "tensorboard": 4 * 33.0, "trackio": 13.0}


def records(steps: int) -> list[tuple[int, dict[str, float]]]:
    """The (step, metrics) pairs every back end logs, built before any clock starts."""
    cols = gen.train_columns(gen.history(max(steps, 100)), 1, steps + 1)
    metrics = {m: cols[m].tolist() for m in gen.TRAIN_METRICS}
    return [
        (int(s), {m: metrics[m][i] for m in gen.TRAIN_METRICS}) for i, s in enumerate(cols["step"].tolist())
    ]


LOOP_CPU: list[float] = []  # the last timed loop's CPU seconds (this process, all its threads)


def _timed_loop(log, recs) -> float:
    """Wall seconds of logging every record; its CPU seconds go to LOOP_CPU (steadier on a busy machine)."""
    c0, t0 = time.process_time(), time.perf_counter()
    for step, data in recs:
        log(data, step)
    wall = time.perf_counter() - t0
    LOOP_CPU[:] = [time.process_time() - c0]
    return wall


def run_ours(recs, tmp: Path) -> dict:
    """Our writers through the trainer's own seam: what verl's `Tracking.init/log/finish` wrappers call.

    `_train_begin` builds `default_writers` (run.json, metrics.jsonl, both CSV histories, status.json)
    exactly as a training run does; `record` is the per-log-call path (it also stamps train/time(s)).
    """
    os.environ.pop("RUNWATCH_WANDB", None)  # the W&B mirror is measured on its own, as the wandb peer
    from trainer import verl_seam

    t0 = time.perf_counter()
    verl_seam.STATE.run_dir = tmp / "run"
    verl_seam.STATE.run_dir.mkdir()
    verl_seam._train_begin({"trainer": {"total_training_steps": len(recs)}})
    setup = time.perf_counter() - t0
    loop = _timed_loop(verl_seam.record, recs)
    t0 = time.perf_counter()
    verl_seam._train_end()
    finish = time.perf_counter() - t0
    files = sorted(p.name for p in verl_seam.STATE.run_dir.iterdir())
    return {"setup_s": setup, "loop_s": loop, "finish_s": finish, "files": files} | {
        "per_writer_us": per_writer(recs[:5000])
    }


def per_writer(recs) -> dict[str, float]:
    """Microseconds per step of each of our writers alone (after the timed run: not part of its figure)."""
    from trainer.callbacks import RunInfo
    from trainer.writers import default_writers

    with tempfile.TemporaryDirectory(prefix="bench-writers-") as tmp:
        return _per_writer(recs, Path(tmp), RunInfo, default_writers)


def _per_writer(recs, run_dir: Path, RunInfo, default_writers) -> dict[str, float]:  # noqa: N803
    info = RunInfo(
        run_dir=run_dir, trainer="verl_sft", preset="bench", config={}, total_steps=len(recs), resume_step=0
    )
    out = {}
    for writer in default_writers(run_dir):
        writer.on_train_begin(info)
        t0 = time.perf_counter()
        for step, data in recs:
            writer.on_step_end(step, dict(data))
        out[f"{type(writer).__name__}({getattr(writer, 'kind', '')})".replace("()", "")] = (
            (time.perf_counter() - t0) / len(recs) * 1e6
        )
        writer.on_train_end(len(recs))
    # The stop-request poll the verl seam makes before each step (one os.stat; the file absent, as it is
    # until a stop is asked for).
    from trainer.stop import StopPoll

    poll = StopPoll(run_dir)
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in recs:
        poll.requested()
    out["stop request poll (runwatch.stop)"] = (time.perf_counter() - t0) / len(recs) * 1e6
    out["stop request poll, CPU"] = (time.process_time() - c0) / len(recs) * 1e6
    return out


def run_wandb(recs, tmp: Path) -> dict:
    os.environ["WANDB_MODE"] = "offline"
    os.environ["WANDB_SILENT"] = "true"
    import wandb

    t0 = time.perf_counter()
    wandb.init(project="bench", dir=str(tmp), mode="offline", settings=wandb.Settings(console="off"))
    setup = time.perf_counter() - t0
    loop = _timed_loop(lambda d, s: wandb.log(d, step=s), recs)
    t0 = time.perf_counter()
    wandb.finish()
    return {"setup_s": setup, "loop_s": loop, "finish_s": time.perf_counter() - t0}


def run_tensorboard(recs, tmp: Path) -> dict:
    from torch.utils.tensorboard import SummaryWriter

    t0 = time.perf_counter()
    writer = SummaryWriter(str(tmp / "tb"))
    setup = time.perf_counter() - t0

    def log(data: dict[str, float], step: int) -> None:
        for k, v in data.items():
            writer.add_scalar(k, v, step)

    loop = _timed_loop(log, recs)
    t0 = time.perf_counter()
    writer.close()
    return {"setup_s": setup, "loop_s": loop, "finish_s": time.perf_counter() - t0}


def run_trackio(recs, tmp: Path) -> dict:
    os.environ["TRACKIO_DIR"] = str(tmp / "trackio")
    import trackio

    t0 = time.perf_counter()
    trackio.init(project="bench", name="run", embed=False, auto_log_cpu=False, auto_log_gpu=False)
    setup = time.perf_counter() - t0
    loop = _timed_loop(lambda d, s: trackio.log(d, step=s), recs)
    t0 = time.perf_counter()
    trackio.finish()  # drains its queue into SQLite: the cost the log calls deferred
    return {"setup_s": setup, "loop_s": loop, "finish_s": time.perf_counter() - t0}


def _disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def one_backend(name: str, steps: int) -> dict:
    """Run one back end in this process and return its figures."""
    recs = records(steps)
    with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as tmp:
        runner = {
            "ours": run_ours,
            "wandb": run_wandb,
            "tensorboard": run_tensorboard,
            "trackio": run_trackio,
        }
        res = runner[name](recs, Path(tmp))
        res["bytes_on_disk"] = _disk_bytes(Path(tmp))
    res["us_per_step"] = res["loop_s"] / steps * 1e6
    res["cpu_us_per_step"] = LOOP_CPU[0] / steps * 1e6
    return res


def spawn(name: str, steps: int) -> dict:
    """Run one back end in a fresh interpreter; add its peak RSS (this child only, helpers excluded)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        m = harness.measured_run(
            [sys.executable, __file__, "--backend", name, "--steps", str(steps), "--result", out.name]
        )
        if m.rc != 0:
            return {"error": f"{name} exited {m.rc}: {m.output.strip()[-800:]}"}
        res = json.loads(Path(out.name).read_text())
    res["peak_rss_mb"] = m.peak_rss_mb
    return res


def summarize(rounds: list[dict[str, dict]]) -> dict[str, dict]:
    """Median of each figure per back end over the rounds that succeeded; errors kept as text."""
    out: dict[str, dict] = {}
    for name in BACKENDS:
        ok = [r[name] for r in rounds if name in r and "error" not in r[name]]
        if not ok:
            errs = [r[name]["error"] for r in rounds if name in r]
            out[name] = {"error": errs[0] if errs else "not run"}
            continue
        keys = ("us_per_step", "cpu_us_per_step", "setup_s", "finish_s", "peak_rss_mb", "bytes_on_disk")
        out[name] = {k: statistics.median(x[k] for x in ok) for k in keys}
        out[name]["rounds_us_per_step"] = [x["us_per_step"] for x in ok]
        if "per_writer_us" in ok[0]:
            out[name]["per_writer_us"] = {
                k: statistics.median(x["per_writer_us"][k] for x in ok) for k in ok[0]["per_writer_us"]
            }
    base = out.get("ours", {}).get("us_per_step")
    for _name, r in out.items():
        if "us_per_step" in r and base:
            r["ratio_vs_ours"] = r["us_per_step"] / base
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20_000, help="log calls per back end (default 20000)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median is reported")
    ap.add_argument("--only", nargs="*", choices=BACKENDS, default=list(BACKENDS))
    ap.add_argument("--backend", choices=BACKENDS, help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.backend:
        Path(args.result).write_text(json.dumps(one_backend(args.backend, args.steps)))
        return

    rounds = []
    for i in range(args.rounds):
        order = args.only[i % len(args.only) :] + args.only[: i % len(args.only)]
        rounds.append({name: spawn(name, args.steps) for name in order})
        print(
            f"round {i + 1}/{args.rounds}: "
            + ", ".join(f"{n} {r.get('us_per_step', float('nan')):.1f} us" for n, r in rounds[-1].items()),
            flush=True,
        )
    res = summarize(rounds)
    rows = []
    for name in args.only:
        r = res[name]
        if "error" in r:
            rows.append([name, "error", "", "", "", "", "", ""])
            continue
        rows.append(
            [
                name,
                r["us_per_step"],
                r["cpu_us_per_step"],
                r.get("ratio_vs_ours", float("nan")),
                r["setup_s"],
                r["finish_s"],
                r["peak_rss_mb"],
                r["bytes_on_disk"] / 1e6,
            ]
        )
    gen.print_table(
        f"Logging cost, 4 metrics per step, {args.steps:,} steps, median of {args.rounds} rounds",
        ["back end", "us/step", "CPU us/step", "x ours", "setup s", "finish s", "peak RSS MB", "disk MB"],
        rows,
    )
    split = res.get("ours", {}).get("per_writer_us")
    if split:
        gen.print_table(
            "Our writers and the stop-request poll one by one (5,000 steps each, outside the timed run)",
            ["writer", "us/step"],
            [[k, v] for k, v in split.items()],
        )
    for name, r in res.items():
        if "error" in r:
            print(f"{name}: {r['error']}")
    path = gen.write_json(
        NAME,
        {
            "steps": args.steps,
            "rounds": args.rounds,
            "metrics_per_step": 4,
            "backends": res,
            "known_before": KNOWN,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
