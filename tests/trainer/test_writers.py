"""The run-directory writers and the verl `Tracking` seam, without training."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

from tests.trainer.conftest import REPO
from tests.waiting import wait_for
from trainer.callbacks import CallbackList, RunCallback, RunInfo, is_validation_record
from trainer.writers import CsvHistoryWriter, MetricsJsonlWriter, RunJsonWriter, StatusWriter, metrics_line


def info(run_dir: Path, resume_step: int = 0, injected=None) -> RunInfo:
    return RunInfo(
        run_dir=run_dir,
        trainer="verl_sft",
        preset="smoke",
        config={"optim": {"lr_scheduler_type": "cosine", "lr_warmup_steps_ratio": 0.05}},
        total_steps=4,
        resume_step=resume_step,
        injected=injected or [],
    )


def test_metrics_line_keeps_nan_and_verl_shape():
    line = metrics_line(3, {"train/loss": float("nan"), "train/lr": 1e-3, "train/grad_norm": float("inf")})
    assert line == '{"step":3,"data":{"train/loss":NaN,"train/lr":0.001,"train/grad_norm":Infinity}}'
    back = json.loads(line)
    assert math.isnan(back["data"]["train/loss"]) and back["data"]["train/grad_norm"] == math.inf


def test_jsonl_appends_across_a_resume(tmp_path):
    first = MetricsJsonlWriter(tmp_path)
    first.on_train_begin(info(tmp_path))
    first.on_step_end(1, {"train/loss": 2.0})
    first.on_step_end(2, {"train/loss": 1.5})
    first.on_exception(2, "killed")
    second = MetricsJsonlWriter(tmp_path)
    second.on_train_begin(info(tmp_path, resume_step=1))
    second.on_step_end(2, {"train/loss": 1.6})
    second.on_validation_end(2, {"val/loss": 1.7})
    second.on_train_end(2)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1, 2, 2, 2]
    assert json.loads(lines[1])["data"]["train/loss"] == 1.5  # the first run's line is still there


def test_csv_widens_its_header_and_keeps_rows(tmp_path):
    path = tmp_path / "training_history.csv"
    writer = CsvHistoryWriter(path, "train")
    writer.on_train_begin(info(tmp_path))
    writer.on_step_end(1, {"train/loss": 2.0})
    writer.on_step_end(2, {"train/loss": 1.0, "train/grad_norm": float("nan")})
    writer.on_validation_end(2, {"val/loss": 3.0})  # not a training row
    writer.on_checkpoint_saved(2, "ckpt")  # rows are buffered; a checkpoint writes them
    with open(path, newline="") as fp:
        rows = list(csv.DictReader(fp))
    assert rows == [
        {"step": "1", "train/loss": "2.0", "train/grad_norm": ""},
        {"step": "2", "train/loss": "1.0", "train/grad_norm": "nan"},
    ]
    resumed = CsvHistoryWriter(path, "train")
    resumed.on_train_begin(info(tmp_path, resume_step=2))
    resumed.on_step_end(3, {"train/grad_norm": 0.5, "train/loss": 0.9})
    resumed.on_train_end(3)
    with open(path, newline="") as fp:
        assert [r["train/loss"] for r in csv.DictReader(fp)] == ["2.0", "1.0", "0.9"]


def test_fast_lines_match_the_json_and_csv_modules(tmp_path):
    import numpy as np

    metrics = {
        "train/loss": 0.1 + 0.2,
        "train/lr": 1e-7,
        "n": 3,
        "flag": True,
        "np": np.float32(0.5),
        "name": 'a,"b"',
        "neg": float("-inf"),
        "none": None,
    }
    assert json.loads(metrics_line(7, metrics)) == json.loads(
        json.dumps(
            {"step": 7, "data": {k: v.item() if hasattr(v, "item") else v for k, v in metrics.items()}}
        )
    )
    path = tmp_path / "training_history.csv"
    writer = CsvHistoryWriter(path, "train")
    writer.on_train_begin(info(tmp_path))
    writer.on_step_end(7, metrics)
    writer.on_train_end(7)
    with open(path, newline="") as fp:
        row = list(csv.DictReader(fp))[0]
    assert row == {
        "step": "7",
        "train/loss": repr(0.1 + 0.2),
        "train/lr": "1e-07",
        "n": "3",
        "flag": "True",
        "np": "0.5",
        "name": 'a,"b"',
        "neg": "-inf",
        "none": "",
    }


def test_lines_wait_in_memory_until_their_interval_a_checkpoint_or_the_end(tmp_path):
    jsonl = MetricsJsonlWriter(tmp_path)
    jsonl.FLUSH_EVERY_S = 3600.0
    history = CsvHistoryWriter(tmp_path / "training_history.csv", "train")
    history.FLUSH_EVERY_S = 3600.0
    for writer in (jsonl, history):
        writer.on_train_begin(info(tmp_path))
        writer.on_step_end(1, {"train/loss": 2.0})
        writer.on_step_end(2, {"train/loss": 1.0})
    assert (tmp_path / "metrics.jsonl").read_text() == ""
    assert (tmp_path / "training_history.csv").read_bytes() == b"step,train/loss\r\n"  # the header only
    for writer in (jsonl, history):
        writer.on_checkpoint_saved(2, "ckpt")
        writer.on_step_end(3, {"train/loss": 0.5})
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 2
    assert len((tmp_path / "training_history.csv").read_text().splitlines()) == 3
    for writer in (jsonl, history):
        writer.on_train_end(3)
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 3
    assert len((tmp_path / "training_history.csv").read_text().splitlines()) == 4


BUFFERED_CHILD = """
import sys, time
from pathlib import Path
from trainer.callbacks import RunInfo
from trainer.writers import CsvHistoryWriter, MetricsJsonlWriter
run_dir, mode = Path(sys.argv[1]), sys.argv[2]
info = RunInfo(run_dir=run_dir, trainer="verl_sft", preset="t", config={}, total_steps=None, resume_step=0)
jsonl, history = MetricsJsonlWriter(run_dir), CsvHistoryWriter(run_dir / "training_history.csv", "train")
jsonl.FLUSH_EVERY_S = 3600.0 if mode == "exit" else 0.05
history.FLUSH_EVERY_S = jsonl.FLUSH_EVERY_S
for writer in (jsonl, history):
    writer.on_train_begin(info)
    for step in range(1, 1001):
        writer.on_step_end(step, {"train/loss": 1.0 / step})
if mode == "exit":
    sys.exit(0)  # no on_train_end: the interpreter's exit writes the buffers
print("paused", flush=True)
time.sleep(600)  # a long pause in training: the background thread writes what is buffered
"""


def _run_child(run_dir: Path, mode: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-c", BUFFERED_CHILD, str(run_dir), mode], env=env, cwd=REPO, stdout=subprocess.PIPE
    )


def test_a_clean_exit_writes_every_buffered_line(tmp_path):
    child = _run_child(tmp_path, "exit")
    assert child.wait(timeout=120) == 0
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 1000
    assert len((tmp_path / "training_history.csv").read_text().splitlines()) == 1001


def test_a_pause_in_training_does_not_hold_lines_back_and_a_kill_loses_none_written(tmp_path):

    child = _run_child(tmp_path, "pause")
    try:
        assert child.stdout.readline() == b"paused\n"

        def flushed() -> list[str] | None:  # the background thread's interval is 0.05 s
            lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
            rows = (tmp_path / "training_history.csv").read_text().splitlines()
            return lines if len(lines) == 1000 and len(rows) == 1001 else None

        lines = wait_for(flushed, "the buffered lines written while training pauses", 60)
        assert json.loads(lines[-1]) == {"step": 1000, "data": {"train/loss": 0.001}}
    finally:
        child.kill()
        child.wait()
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 1000


def test_status_goes_running_then_failed_atomically(tmp_path):
    writer = StatusWriter(tmp_path)
    writer.on_train_begin(info(tmp_path))
    writer.on_step_end(2, {})
    # Within a second of the last write the step count waits for the next write (a rewrite costs ~1 ms).
    assert json.loads((tmp_path / "status.json").read_text())["step"] == 0
    writer.STEP_EVERY_S = 0.0
    writer.on_step_end(3, {})
    running = json.loads((tmp_path / "status.json").read_text())
    assert running["state"] == "running" and running["step"] == 3 and running["pid"] == os.getpid()
    writer.on_exception(3, "RuntimeError: boom")
    failed = json.loads((tmp_path / "status.json").read_text())
    assert failed["state"] == "failed" and failed["error"] == "RuntimeError: boom"
    assert failed["updated_at"] >= running["updated_at"]
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]  # no temporary file left behind


def test_run_json_keeps_first_start_and_all_faults(tmp_path):
    RunJsonWriter(tmp_path).on_train_begin(
        info(tmp_path, injected=[{"kind": "stall", "step": 2, "seconds": 1}])
    )
    first = json.loads((tmp_path / "run.json").read_text())
    RunJsonWriter(tmp_path).on_train_begin(info(tmp_path, resume_step=2))
    second = json.loads((tmp_path / "run.json").read_text())
    assert second["started_at"] == first["started_at"]
    assert second["injected"] == [{"kind": "stall", "step": 2, "seconds": 1}]
    assert [r["step"] for r in second["resumes"]] == [2]
    assert second["lr_scheduler"] == "cosine" and second["warmup_ratio"] == 0.05


def test_a_failing_writer_is_dropped_not_fatal(tmp_path, capsys):
    class Broken(RunCallback):
        def on_step_end(self, step, metrics):
            raise OSError("disk full")

    status = StatusWriter(tmp_path)
    status.STEP_EVERY_S = 0.0  # write the step count on every step
    callbacks = CallbackList([Broken(), status])
    callbacks.on_train_begin(info(tmp_path))
    callbacks.on_step_end(1, {"train/loss": 1.0})
    callbacks.on_step_end(2, {"train/loss": 1.0})
    assert json.loads((tmp_path / "status.json").read_text())["step"] == 2
    assert capsys.readouterr().err.count("writer Broken.on_step_end failed (OSError: disk full)") == 1


def test_validation_records_are_told_apart():
    assert is_validation_record({"val/loss": 1.0})
    assert is_validation_record({"val-core/acc": 1.0})
    assert not is_validation_record({"train/loss": 1.0, "val/loss": 1.0})
    assert not is_validation_record({})


PPO_LIKE = """
import json, sys
from pathlib import Path
import verl
from trainer import verl_seam
from verl.utils.tracking import Tracking
run_dir = Path(sys.argv[1])
verl_seam.install_writers(run_dir)
config = {"actor_rollout_ref": {"actor": {}}, "trainer": {"total_training_steps": 2}, "optim": {}}
import os
os.environ["VERL_FILE_LOGGER_PATH"] = str(run_dir / "verl_file_logger.jsonl")
(run_dir / "verl_file_logger.jsonl").write_text('{"step":0,"data":{}}' + chr(10))  # a crashed run's line
tracking = Tracking("p", "e", default_backend=["console", "file"], config=config)
tracking.log({"val-core/reward": 0.1}, step=0)
tracking.log({"actor/pg_loss": 0.5, "timing_s/step": 1.5}, step=1)
tracking.log({"actor/pg_loss": 0.4, "timing_s/step": 1.4}, step=2)
tracking.finish()
"""


def test_tracking_seam_serves_a_ppo_style_trainer(tmp_path):
    # verl's PPO/GRPO trainer logs through the same Tracking class; driving Tracking as it does shows the
    # same writers produce the same run directory (in a subprocess: the seam patches classes for good).
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": "", "RUNWATCH_PRESET": "grpo-test"}
    proc = subprocess.run(
        [sys.executable, "-c", PPO_LIKE, str(tmp_path)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "step:1 - actor/pg_loss:0.5 - timing_s/step:1.5" in proc.stdout  # verl's console format, untouched
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines == [
        {"step": 0, "data": {"val-core/reward": 0.1}},
        {"step": 1, "data": {"actor/pg_loss": 0.5, "timing_s/step": 1.5}},
        {"step": 2, "data": {"actor/pg_loss": 0.4, "timing_s/step": 1.4}},
    ]
    # verl's own file backend appends too, after the line an earlier (crashed) run left.
    verl_lines = (tmp_path / "verl_file_logger.jsonl").read_text().splitlines()
    assert len(verl_lines) == 4 and verl_lines[0] == '{"step":0,"data":{}}'
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["trainer"] == "verl_ppo" and run["preset"] == "grpo-test"
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["state"] == "completed" and status["step"] == 2


def test_record_texts_are_shared_within_a_run_and_owned_by_it(tmp_path):
    from trainer.writers import RecordTexts, default_writers

    texts = RecordTexts()
    record = {"train/loss": 0.5, "train/lr": 1e-3}
    first = texts.of(record)
    assert texts.of(record) is first  # the JSONL and CSV writers of one step format it once
    record["train/loss"] = float("nan")
    assert texts.of(record) == {"train/loss": "nan", "train/lr": "0.001"}
    one, two = default_writers(tmp_path / "a"), default_writers(tmp_path / "b")
    shared = {id(w.texts) for w in one if hasattr(w, "texts")}
    assert len(shared) == 1 and shared.isdisjoint({id(w.texts) for w in two if hasattr(w, "texts")})
