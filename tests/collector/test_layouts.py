"""Run layouts as people have them, ingested by `python -m collector ingest` (a real subprocess) and read back
through the API's views: a LLaMA-Factory log beside its trainer_state.json, an HF output folder's own
TensorBoard logging, Git LFS pointers and other files that are not read, each listed with its reason."""

from __future__ import annotations

import json
from pathlib import Path

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from collector.api import runs as api_runs
from collector.formats.discover import run_for_path
from collector.runs.service import RunService
from collector.store.db import Store
from tests.collector.test_daemon_support import cli

LFS = b"version https://git-lfs.github.com/spec/v1\noid sha256:4d7a\nsize 12345\n"


def hf_state(steps: list[int], max_steps: int, evals: dict[int, float] | None = None) -> str:
    history = [
        {"step": s, "loss": 2.0 - s / 100, "learning_rate": 1e-5, "epoch": s / max_steps} for s in steps
    ]
    history += [{"step": s, "eval_loss": v, "epoch": s / max_steps} for s, v in (evals or {}).items()]
    return json.dumps(
        {"global_step": steps[-1], "max_steps": max_steps, "log_history": history, "logging_steps": 5}
    )


def llamafactory_log(steps: list[int], total: int) -> str:
    # LLaMA-Factory rounds the loss to 4 places: the run's trainer_state.json has the full value
    lines = [
        {
            "current_steps": s,
            "total_steps": total,
            "loss": round(2.0 - s / 100 + 1e-7, 4),
            "lr": 1e-5,
            "epoch": s / total,
            "percentage": 100 * s / total,
            "elapsed_time": "0:00:01",
        }
        for s in steps
    ]
    return "".join(json.dumps(line) + "\n" for line in lines)


def events(folder: Path, points: dict[str, dict[int, float]]) -> None:
    writer = EventFileWriter(str(folder))
    for tag, values in points.items():
        for step, value in values.items():
            summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
            writer.add_event(event_pb2.Event(step=step, wall_time=1.0, summary=summary))
    writer.close()


def run_detail(db: Path, run_id: str) -> dict:
    store = Store(db)
    try:
        return api_runs.run(RunService(store), run_id)
    finally:
        store.close()


def test_layouts_ingest_with_one_value_per_step_and_every_file_accounted_for(tmp_path):
    root = tmp_path / "root"
    # LLaMA-Factory: trainer_log.jsonl (steps 5..50, and a progress-only last record) + trainer_state.json
    sft = root / "saves" / "sft"
    sft.mkdir(parents=True)
    (sft / "trainer_log.jsonl").write_text(llamafactory_log(list(range(5, 55, 5)), 50))
    (sft / "trainer_state.json").write_text(hf_state(list(range(5, 55, 5)), 50))
    (sft / "README.md").write_text("# my run\n")
    (sft / "events.out.tfevents.1.host").write_bytes(LFS)  # committed without git lfs pull
    (sft / "empty.txt").write_text("")
    (sft / "blob.dat").write_bytes(b"\x00\x01\x02" * 100)
    # HF output folder: checkpoints only (trainer_state.json is written at saves), its live TensorBoard
    # logging under runs/ (a second event file holds the final evaluation), and the Hub's last-checkpoint/.
    out = root / "output"
    (out / "checkpoint-20").mkdir(parents=True)
    (out / "checkpoint-20" / "trainer_state.json").write_text(hf_state([10, 20], 40, {20: 1.5}))
    (out / "last-checkpoint").mkdir()
    (out / "last-checkpoint" / "trainer_state.json").write_text(hf_state([10, 20], 40, {20: 1.5}))
    (out / "runs" / "Nov24_07-00-00_host").mkdir(parents=True)
    events(
        out / "runs" / "Nov24_07-00-00_host",
        {"train/loss": {10: 1.9, 20: 1.8, 30: 1.7, 40: 1.6}, "eval/loss": {20: 1.5}},
    )
    (out / "runs" / "Nov24_07-30-00_host").mkdir()
    events(out / "runs" / "Nov24_07-30-00_host", {"eval/loss": {40: 1.25}})
    # A folder holding nothing but an LFS pointer in place of its trainer_state.json
    (root / "pointer-only").mkdir()
    (root / "pointer-only" / "trainer_state.json").write_bytes(LFS)

    db = tmp_path / "rw.duckdb"
    done = cli(db, "ingest", str(root))
    summary = json.loads(cli(db, "ingest", str(root), "--json").stdout)
    assert sorted(summary["runs"]) == ["output", "pointer-only", "saves/sft"]

    sft_run = run_detail(db, "saves/sft")
    assert {m["metric"]: m["points"] for m in sft_run["metrics"]} == {
        "loss": 10,
        "learning_rate": 10,
        "epoch": 10,
    }
    assert sft_run["total_steps"] == 50
    skipped = {Path(f["path"]).name: f["reason"] for f in sft_run["skipped_files"]}
    assert skipped == {
        "README.md": "not a run file",
        "events.out.tfevents.1.host": "Git LFS pointer, not the file: run git lfs pull",
        "empty.txt": "empty",
        "blob.dat": "binary, not a format runwatch reads",
    }
    assert all(s["warning"] is None and s["points"] > 0 for s in sft_run["sources"])

    hf = run_detail(db, "output")
    series = {m["metric"]: m["points"] for m in hf["metrics"]}
    assert series["loss"] == 4 and series["eval_loss"] == 2  # steps 10..40 live, the final evaluation at 40
    assert {Path(s["path"]).parent.name for s in hf["sources"] if s["format"] == "hf_tensorboard"} == {
        "Nov24_07-00-00_host",
        "Nov24_07-30-00_host",
    }
    assert "last-checkpoint" not in {r for r in summary["runs"]}

    pointer = run_detail(db, "pointer-only")
    assert pointer["skipped_files"] == [
        {
            "path": str(root / "pointer-only" / "trainer_state.json"),
            "reason": "Git LFS pointer, not the file: run git lfs pull",
            "bytes": len(LFS),
            "copy": False,
            "expected": False,
        }
    ]
    # The command's own summary says it, per run
    assert "pointer-only: 1 file(s) not read" in done.stdout
    assert "Git LFS pointer, not the file: run git lfs pull" in done.stdout
    assert summary["not_read"]["pointer-only"][0]["reason"].startswith("Git LFS pointer")


def test_a_file_of_lines_that_gives_no_point_is_a_warning_not_a_quarantine_of_one_line(tmp_path):
    root = tmp_path / "root"
    (root / "r").mkdir(parents=True)
    lines = "".join(
        json.dumps({"current_steps": s, "total_steps": 20, "percentage": s * 5}) + "\n" for s in range(1, 21)
    )
    (root / "r" / "trainer_log.jsonl").write_text(lines)
    db = tmp_path / "rw.duckdb"
    summary = json.loads(cli(db, "ingest", str(root), "--json").stdout)
    [source] = run_detail(db, "r")["sources"]
    assert source["warning"] == "0 points from 20 lines: none holds a metric runwatch reads in this format"
    assert summary["not_read"] == {
        "r": [{"path": str(root / "r" / "trainer_log.jsonl"), "reason": source["warning"]}]
    }
    assert run_detail(db, "r")["total_steps"] == 20


def test_wandb_offline_runs_are_runs_unless_they_mirror_a_run_folders_metrics(tmp_path):
    from tests.collector.test_parsers_wandb_offline import fuzz_sample as wandb_sample

    root = tmp_path / "root"
    alone = root / "proj" / "wandb" / "offline-run-20261124_070000-abc123"
    alone.mkdir(parents=True)
    (alone / "run-abc123.wandb").write_bytes(wandb_sample(tmp_path))
    mirrored = root / "mine" / "wandb" / "offline-run-20261124_070500-def456"
    mirrored.mkdir(parents=True)
    (mirrored / "run-def456.wandb").write_bytes(wandb_sample(tmp_path))
    (root / "mine" / "metrics.jsonl").write_text('{"step": 1, "data": {"train/loss": 0.5}}\n')
    db = tmp_path / "rw.duckdb"
    summary = json.loads(cli(db, "ingest", str(root), "--json").stdout)
    offline_id = "proj/wandb/offline-run-20261124_070000-abc123"
    assert sorted(summary["runs"]) == ["mine", offline_id]
    offline = run_detail(db, offline_id)
    assert {m["metric"]: m["points"] for m in offline["metrics"]} == {"train/loss": 2}
    assert offline["sources"][0]["format"] == "wandb_offline"
    # a file the watcher reports maps to the same runs
    assert run_for_path(alone / "run-abc123.wandb", [root]).id == offline_id
    assert run_for_path(mirrored / "run-def456.wandb", [root]) is None
    mine = run_detail(db, "mine")
    assert [(Path(f["path"]).name, f["reason"], f["copy"]) for f in mine["skipped_files"]] == [
        (
            "run-def456.wandb",
            "a W&B copy of the metrics in metrics.jsonl: not read, to count each value once",
            True,  # expected: the dashboard does not warn about a copy
        )
    ]


def test_an_online_wandb_run_folder_is_a_run_too(tmp_path):
    # wandb writes the same `run-*.wandb` file for an online run, in `wandb/run-<time>-<id>/` (found in
    # yerinNam/Your-Military-Expert-... at 834 KB, HF Trainer history; before, every `run-*` folder was skipped
    # without a word, and a project folder of online runs showed no run)
    from tests.collector.test_parsers_wandb_offline import fuzz_sample as wandb_sample

    root = tmp_path / "root"
    online = root / "proj" / "wandb" / "run-20240804_231327-uojy8xhg"
    online.mkdir(parents=True)
    (online / "run-uojy8xhg.wandb").write_bytes(wandb_sample(tmp_path))
    db = tmp_path / "rw.duckdb"
    summary = json.loads(cli(db, "ingest", str(root), "--json").stdout)
    run_id = "proj/wandb/run-20240804_231327-uojy8xhg"
    assert sorted(summary["runs"]) == [run_id]
    assert {m["metric"]: m["points"] for m in run_detail(db, run_id)["metrics"]} == {"train/loss": 2}
    assert run_for_path(online / "run-uojy8xhg.wandb", [root]).id == run_id


def test_an_mlflow_file_store_run_is_one_run_with_its_metrics_params_and_tags(tmp_path):
    root = tmp_path / "root"
    run = root / "mlruns" / "0" / "4f1c2e"
    (run / "metrics" / "train").mkdir(parents=True)
    (run / "params").mkdir()
    (run / "tags").mkdir()
    (root / "mlruns" / "0" / "meta.yaml").write_text("name: Default\n")
    (run / "meta.yaml").write_text(
        "end_time: null\nexperiment_id: '0'\nlifecycle_stage: active\nrun_id: 4f1c2e\nrun_name: sft-7b\n"
        "start_time: 1732431600000\nstatus: 1\n"
    )
    other = root / "mlruns" / "0" / "9a0b"  # a second run of the experiment, which failed
    (other / "metrics").mkdir(parents=True)
    (other / "meta.yaml").write_text(
        "end_time: 1732431650000\nexperiment_id: '0'\nrun_id: 9a0b\nrun_name: sft-lr-high\n"
        "start_time: 1732431600000\nstatus: 4\n"
    )
    (other / "metrics" / "loss").write_text("1732431600000 2.0 0\n1732431601000 nan 1\n")
    (run / "metrics" / "train" / "loss").write_text(
        "".join(f"{1732431600000 + s} {2.0 - s / 10} {s}\n" for s in range(10))
    )
    (run / "metrics" / "eval_loss").write_text("1732431609000 1.5 9\n")
    (run / "params" / "learning_rate").write_text("0.0001")
    (run / "tags" / "mlflow.runName").write_text("sft-7b")
    db = tmp_path / "rw.duckdb"
    summary = json.loads(cli(db, "ingest", str(root), "--json").stdout)
    assert summary["runs"] == ["mlruns/0/4f1c2e", "mlruns/0/9a0b"]
    detail = run_detail(db, "mlruns/0/4f1c2e")
    assert {m["metric"]: m["points"] for m in detail["metrics"]} == {"train/loss": 10, "eval_loss": 1}
    assert detail["config"] == {
        "params.learning_rate": "0.0001",
        "tags.mlflow.runName": "sft-7b",
        "run_name": "sft-7b",
    }
    assert detail["skipped_files"] == []  # meta.yaml is read: the run's name, status and times
    assert (detail["status"], detail["status_info"]["mlflow_status"]) == ("running", "RUNNING")
    assert detail["status_info"]["start_time"] == 1732431600.0
    failed = run_detail(db, "mlruns/0/9a0b")
    assert (failed["status"], failed["status_info"]["end_time"]) == ("failed", 1732431650.0)
    assert failed["config"] == {"run_name": "sft-lr-high"}
    assert {m["metric"]: m["points"] for m in failed["metrics"]} == {"loss": 2}
    assert run_for_path(run / "metrics" / "train" / "loss", [root]).id == "mlruns/0/4f1c2e"


def test_the_platforms_jobs_in_one_folder_are_runs_with_their_status(tmp_path):
    root = tmp_path / "root"
    jobs = root / "platform"
    jobs.mkdir(parents=True)
    for job, state, last in (("job-1", "completed", 3), ("job-2", "running", 2)):
        lines = [
            {
                "step": s,
                "timestamp": f"2026-11-24T07:00:0{s}Z",
                "loss": {"total": 1.0 / s},
                "reward": {"mean": s / 10},
                "kl": {"value": 0.01},
            }
            for s in range(1, last + 1)
        ]
        (jobs / f"{job}_metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
        status = {
            "job_id": job,
            "status": state,
            "current_step": last,
            "total_steps": 3,
            "anomaly_detected": job == "job-2",
            "anomaly_reason": "reward flat" if job == "job-2" else None,
            "updated_at": "2026-11-24T07:00:09Z",
        }
        (jobs / f"{job}_status.json").write_text(json.dumps(status))
    db = tmp_path / "rw.duckdb"
    summary = json.loads(cli(db, "ingest", str(root), "--json").stdout)
    assert sorted(summary["runs"]) == ["platform/job-1", "platform/job-2"]
    one, two = run_detail(db, "platform/job-1"), run_detail(db, "platform/job-2")
    assert {m["metric"]: m["points"] for m in one["metrics"]} == {
        "loss/total": 3,
        "reward/mean": 3,
        "kl/value": 3,
    }
    assert (one["status"], one["total_steps"], two["status"]) == ("completed", 3, "running")
    assert two["status_info"]["anomaly_reason"] == "reward flat" and two["status_info"]["state"] == "running"
    assert two["status_info"]["updated_at"] == 1795503609.0


def test_an_hf_console_log_takes_logging_steps_from_the_trainer_state_beside_it(tmp_path):
    # A real DPO console log whose dicts were flushed in clumps (iiicellled/Clean-Code-Qwen dpo.log), beside
    # its run's trainer_state.json (logging_steps 10), both read from ../shared at test time.
    from tests.conftest import SHARED

    files = SHARED / "real-runs-wild" / "files"
    folder = tmp_path / "root" / "dpo"
    folder.mkdir(parents=True)
    (folder / "dpo.log").write_bytes((files / "iiicellled__Clean-Code-Qwen__dpo.log").read_bytes())
    state_file = (
        "iiicellled__Clean-Code-Qwen__output_models-qwen-coder-simplifier-dpo-lora-trainer_state.json"
    )
    (folder / "dpo_trainer_state.json").write_bytes((files / state_file).read_bytes())
    db = tmp_path / "rw.duckdb"
    assert json.loads(cli(db, "ingest", str(tmp_path / "root"), "--json").stdout)["runs"] == [
        "dpo",
        "dpo/dpo_trainer_state",
    ]
    store = Store(db)
    try:
        loss = "SELECT step, value FROM points WHERE run_id = ? AND metric = 'loss' ORDER BY step"
        console, state = store.rows(loss, ["dpo"]), store.rows(loss, ["dpo/dpo_trainer_state"])
    finally:
        store.close()
    assert [s for s, _ in console] == list(range(10, 161, 10))  # (1..16 without the state beside it)
    assert console == state
