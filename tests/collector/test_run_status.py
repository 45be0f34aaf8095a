"""A run's status in the runs list: stalled while a stalled alert stands, completed for a finished HF run,
what status.json says otherwise."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

from collector.api import runs as api_runs
from collector.core.runtime import Settings
from collector.daemon.service import Collector
from collector.store import alerts as store_alerts
from tests.collector.test_daemon_support import cli_json
from tests.conftest import REPO


def _status_of(runs: list[dict], run_id: str) -> str:
    return next(r["status"] for r in runs if r["id"] == run_id)


def test_a_running_run_with_a_stalled_alert_is_stalled(tmp_path):
    root = tmp_path / "runs"
    run = root / "slow"
    run.mkdir(parents=True)
    with (run / "metrics.jsonl").open("w") as f:
        for step in range(1, 41):
            f.write(json.dumps({"step": step, "data": {"train/loss": 3.0 - step * 0.01}}) + "\n")
    status = {"state": "running", "step": 40, "total_steps": 100, "pid": os.getpid()}
    (run / "status.json").write_text(
        json.dumps(status | {"host": socket.gethostname(), "updated_at": time.time()})
    )
    db = tmp_path / "rw.duckdb"
    collector = Collector(Settings(db=db, roots=[root]), sinks=[])
    try:
        collector.ingest_once()
        assert _status_of(api_runs.runs(collector.detection.runs), "slow") == "running"
        assert collector.detection.runs.advice("slow")["status"] == "running"  # status.json's state
        # An hour with no new point: the stalled rule's own clock, given, not waited for.
        collector.detection.tick(now=time.time() + 3600)
        stalled = store_alerts.list_alerts(collector.store, run="slow", rule="stalled", state="open")
        assert stalled, "the stalled rule did not fire"
        assert _status_of(api_runs.runs(collector.detection.runs), "slow") == "stalled"
        assert api_runs.run(collector.detection.runs, "slow")["status"] == "stalled"
        store_alerts.set_state(collector.store, stalled[0]["id"], "resolved", "restarted the job")
        assert _status_of(api_runs.runs(collector.detection.runs), "slow") == "running"
    finally:
        collector.close()


def test_an_hf_run_is_completed_when_global_step_reaches_max_steps(tmp_path, real_runs):
    db = tmp_path / "rw.duckdb"
    from tests.collector.test_daemon_support import cli

    cli(db, "ingest", str(real_runs / "yongshuaiy__LLMs-final__output-checkpoint-669.json"))
    cli(db, "ingest", str(real_runs / "Dheena731__tinyLlama-finetune__root.json"))
    runs = cli_json(db, "runs")
    assert _status_of(runs, "yongshuaiy__LLMs-final__output-checkpoint-669") == "completed"  # 669 of 669
    assert _status_of(runs, "Dheena731__tinyLlama-finetune__root") == "unknown"  # 2800 of 2808
    # A run that is one file by itself: its path is that file, not the folder holding it.
    paths = {r["id"]: r["path"] for r in runs}
    assert paths["Dheena731__tinyLlama-finetune__root"] == str(
        (real_runs / "Dheena731__tinyLlama-finetune__root.json").resolve()
    )


def test_a_flat_jsonl_ending_in_the_hf_trainers_summary_is_completed_unless_a_status_file_says_otherwise(
    tmp_path,
):
    # satyamshivam13/LoRA_Medical_QA_Finetune's logs/metrics.jsonl: a Trainer callback's flat history, a record
    # every 10 steps, evaluations, and the Trainer's summary at the last step (778). A file of that shape.
    root = tmp_path / "runs"
    lines = [
        {"step": s, "epoch": s / 389, "loss": 2.0 - s / 1000, "learning_rate": 1e-4}
        for s in range(10, 771, 10)
    ]
    lines += [{"step": 778, "epoch": 2.0, "eval_loss": 1.1095}]
    summary = {"step": 778, "epoch": 2.0, "train_runtime": 6406.1, "train_loss": 1.1679}
    for name, records in (("ended", [*lines, summary]), ("cut", lines), ("stopped", [*lines, summary])):
        (root / name).mkdir(parents=True)
        (root / name / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    # a stopped HF run logs the summary too; the status file beside it is the trainer's own word
    (root / "stopped" / "status.json").write_text(json.dumps({"state": "stopped", "step": 778}))
    collector = Collector(Settings(db=tmp_path / "rw.duckdb", roots=[root]), sinks=[])
    try:
        collector.ingest_once()
        runs = api_runs.runs(collector.detection.runs)
        assert _status_of(runs, "ended") == "completed"
        assert _status_of(runs, "cut") == "unknown"
        assert _status_of(runs, "stopped") == "stopped"
    finally:
        collector.close()


def test_a_status_file_keeps_its_word_over_a_console_summary_in_either_order(tmp_path):
    """A stopped HF run prints the Trainer's summary dict too: the console shows an end (`completed`), the
    status file says `stopped`. The status is `stopped` whichever file was read first (it was `completed`
    where the console came after the status file)."""
    console = (
        "{'loss': 2.5, 'grad_norm': 1.5, 'learning_rate': 1e-05, 'epoch': 0.5}\n"
        "{'loss': 2.25, 'grad_norm': 1.25, 'learning_rate': 5e-06, 'epoch': 1.0}\n"
        "{'train_runtime': 12.5, 'train_samples_per_second': 3.2, 'train_loss': 2.4, 'epoch': 1.0}\n"
    )

    def status_of(db, root) -> str:
        for args in (["ingest", "--db", str(db), str(root)], ["runs", "--db", str(db), "--json"]):
            done = subprocess.run([sys.executable, "-m", "collector", *args], cwd=REPO, capture_output=True,
                                  text=True, timeout=120)  # fmt: skip
            assert done.returncode == 0, done.stderr
        return {r["id"]: r["status"] for r in json.loads(done.stdout)}["run"]

    for first in ("status", "console"):
        root = tmp_path / first / "root"
        run = root / "run"
        run.mkdir(parents=True)
        db = tmp_path / first / "db.duckdb"
        files = {
            "status": ("status.json", json.dumps({"status": "stopped"})),
            "console": ("train.log", console),
        }
        for which in (first, "console" if first == "status" else "status"):
            name, text = files[which]
            (run / name).write_text(text)
            if which == first:
                status_of(db, root)
        assert status_of(db, root) == "stopped", first
