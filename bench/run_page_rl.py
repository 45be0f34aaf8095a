"""Run page of an RL run with ~80 metrics while it trains: open-to-drawn in Chromium, beside another checkout's page.

A verl-style GRPO history (`{"step": N, "data": {...}}`, 80 metrics named as verl names them, some logged
twice under two names, some constant, validation every 10 steps) is written live: 200 steps at once, then a
step every 0.5 s while the pages are opened. One real `collector serve` (this checkout) serves it; this
checkout's dashboard and, with `--before PATH`, another checkout's dashboard (today's page: e.g. a `git
worktree` of main before the change) are opened in turns, `--opens` times each: the time from asking for the
run page until its first chart is drawn and Streamlit is idle, and how many charts were drawn.

    .venv/bin/python bench/run_page_rl.py [--opens 3] [--before /tmp/before-checkout]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen  # noqa: E402

sys.path.insert(0, str(gen.REPO))
from tests.app.browser_support import CHART, chromium_page, streamlit_app, wait_for_charts  # noqa: E402
from tests.app.conftest import start_collector, stop_process  # noqa: E402

NAME = "run_page_rl"
TARGET_S = 3.0
RUN = "grpo-live"
GROUPS = {
    "actor": ("entropy", "kl_loss", "ppo_kl", "pg_loss", "pg_clipfrac", "grad_norm", "lr", "kl_coef"),
    "critic": tuple(f"{k}/{s}" for k in ("score", "rewards", "advantages", "returns") for s in ("mean", "max", "min")),
    "response_length": ("mean", "max", "min", "clip_ratio"),
    "prompt_length": ("mean", "max", "min", "clip_ratio"),
    "timing_s": ("gen", "reward", "old_log_prob", "ref", "adv", "update_actor", "step", "testing"),
    "timing_per_token_ms": ("gen", "ref", "adv", "update_actor"),
    "perf": ("mfu/actor", "max_memory_allocated_gb", "max_memory_reserved_gb", "cpu_memory_used_gb", "time_per_step",
             "total_num_tokens", "throughput"),
    "global_seqlen": ("mean", "max", "min", "balanced_max", "balanced_min", "minmax_diff"),
    "training": ("global_step", "epoch"),
    "actor_extra": tuple(f"layer{i}/grad_norm" for i in range(12)),
    "rollout": ("temperature", "n", "accept_rate", "prob_diff/mean", "prob_diff/max"),
}  # fmt: skip


def step_record(step: int) -> dict:
    """One step of the history: ~80 metrics, each its own series, but `critic/rewards/mean` the same as
    `critic/score/mean` and `perf/time_per_step` as `timing_s/step` (verl logs both), `actor/lr` and two memory
    figures constant."""
    data = {}
    for g, (group, names) in enumerate(GROUPS.items()):
        for i, name in enumerate(names):
            # each metric its own series (the same period in two groups made one series of many names)
            data[f"{group}/{name}"] = round(1.0 + 0.1 * i + math.sin(step / (7 + i + 0.37 * g)) * 0.05, 6)
    for k, ratio in enumerate(
        ("response_length/clip_ratio", "prompt_length/clip_ratio", "actor/pg_clipfrac")
    ):
        data[ratio] = round(0.01 + 0.005 * math.sin(step / (5 + k)), 6)  # a healthy run: few clipped
    data["critic/score/mean"] = round(0.2 + 0.7 * (1 - math.exp(-step / 60)), 6)
    data["critic/rewards/mean"] = data["critic/score/mean"]
    data["timing_s/step"] = round(1.2 + 0.1 * math.sin(step), 6)
    data["perf/time_per_step"] = data["timing_s/step"]
    data["actor/lr"] = 5e-4
    data["perf/max_memory_reserved_gb"] = 133.15
    data["rollout/temperature"] = 1.0
    if step % 10 == 0:
        data["val-core/gsm8k/reward/mean@1"] = round(0.3 + 0.5 * (1 - math.exp(-step / 80)), 6)
    return {"step": step, "data": data}


def writer(path: Path, stop: threading.Event) -> None:
    with open(path, "a") as out:
        for step in range(1, 201):
            out.write(json.dumps(step_record(step)) + "\n")
        out.flush()
        step = 201
        while not stop.is_set():
            out.write(json.dumps(step_record(step)) + "\n")
            out.flush()
            step += 1
            stop.wait(0.5)


def open_run_page(page, url: str) -> tuple[float, int]:
    page.goto(url + "/")
    page.wait_for_selector("h1")
    started = time.monotonic()
    page.goto(f"{url}/run?run={quote(RUN)}")
    wait_for_charts(page, 1)
    return time.monotonic() - started, page.locator(CHART).count()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--opens", type=int, default=3)
    ap.add_argument(
        "--before", type=Path, help="another checkout whose dashboard is opened in the same turns"
    )
    args = ap.parse_args()
    apps = {"ours": gen.REPO} | ({"before": args.before.resolve()} if args.before else {})
    times: dict[str, list[float]] = {name: [] for name in apps}
    charts: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="bench-run-page-rl-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "root" / RUN).mkdir(parents=True)
        stop = threading.Event()
        thread = threading.Thread(
            target=writer, args=(tmp / "root" / RUN / "metrics.jsonl", stop), daemon=True
        )
        thread.start()
        collector = start_collector(tmp / "rl.duckdb", [tmp / "root"], tmp / "collector.log")
        try:
            client = collector.client()
            while not any(
                r["id"] == RUN and (r.get("last_step") or 0) >= 200 for r in client.get("/api/runs")
            ):
                time.sleep(0.5)
            metrics = len(client.get(f"/api/runs/{quote(RUN)}")["metrics"])
            print(f"{RUN}: {metrics} metrics, training (a step every 0.5 s)", flush=True)
            for _ in range(args.opens):
                for name, checkout in apps.items():
                    launch = None
                    if name != "ours":
                        launch = [sys.executable, "-m", "streamlit", "run", "app", "--server.headless", "true",
                                  "--server.address", "127.0.0.1", "--server.port", "{port}",
                                  "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"]  # fmt: skip
                    with (
                        streamlit_app(
                            collector.db,
                            [tmp / "root"],
                            tmp / f"home-{name}",
                            tmp / f"st-{name}.log",
                            launch=launch,
                            cwd=checkout,
                        ) as url,  # fmt: skip
                        chromium_page() as page,
                    ):
                        seconds, drawn = open_run_page(page, url)
                    times[name].append(seconds)
                    charts[name] = drawn
                    print(f"{name}: open to drawn {seconds:.2f} s, {drawn} charts", flush=True)
        finally:
            stop.set()
            stop_process(collector.proc)
    res = {
        "metrics": metrics,
        "opens_s": times,
        "median_s": {k: statistics.median(v) for k, v in times.items()},
        "charts": charts,
        "load_average": os.getloadavg(),
        "target_s": TARGET_S,
    }
    gen.print_table(
        f"Run page of a training RL run with {metrics} metrics, in Chromium",
        ["page", "open to drawn, median s", "each s", "charts drawn"],
        [[k, res["median_s"][k], ", ".join(f"{s:.2f}" for s in times[k]), charts[k]] for k in times],
    )
    print(f"wrote {gen.write_json(NAME, res)}")
    print(json.dumps(res)[:400])


if __name__ == "__main__":
    main()
