"""An HF Trainer run folder as `RunwatchCallback` leaves it on a GPU (seen on an H100, 2026-11-26): TensorBoard
events (float32) and `checkpoint-N/trainer_state.json` (float64) give the same points, run.json the vocabulary.
Through a real DuckDB ingest (`check`): a point the second file gives again in other last digits is the point
judged, not a rewrite that rewinds the rules (a diverged loss was two alerts, from steps 5 and 15); an fp16 run
whose gradients went NaN from step 5 is one alert from step 5. Folders of those shapes, written here."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from tests.collector.test_daemon_support import cli

T0 = 1_795_000_000


def check(db: Path, folder: Path) -> dict:
    """`check --json` on a run folder; exit 2 says it found an error, which these runs have."""
    done = cli(db, "check", str(folder), "--json", check=False)
    assert done.returncode == 2, done.stderr
    [run] = json.loads(done.stdout)["runs"]
    return run


def hf_run(out: Path, history: list[dict], total: int, save: int = 100) -> None:
    """run.json, TensorBoard events of every logged value, and a checkpoint's trainer_state.json per `save`."""
    out.mkdir(parents=True)
    run = {"trainer": "hf_trainer", "total_steps": total, "warmup_steps": 0, "vocab_size": 512}
    (out / "run.json").write_text(json.dumps(run | {"config": {"learning_rate": 1.0, "max_steps": total}}))
    life = out / "runs" / "Nov26_11-04-49_host"
    writer = EventFileWriter(str(life))
    for entry in history:
        for key, value in entry.items():
            if key in ("step", "epoch"):
                continue
            tag = f"eval/{key[5:]}" if key.startswith("eval_") else f"train/{key}"
            summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
            writer.add_event(
                event_pb2.Event(step=entry["step"], wall_time=float(T0 + entry["step"]), summary=summary)
            )
    writer.close()
    [written] = life.glob("events.out.tfevents.*")
    named = life / f"events.out.tfevents.{T0}.host.1.0"  # named for when the run started, as HF's are
    written.rename(named)
    os.utime(named, (T0 + total, T0 + total))
    for at in range(save, total + 1, save):
        folder = out / f"checkpoint-{at}"
        folder.mkdir()
        state = {"global_step": at, "max_steps": total, "logging_steps": 5, "save_steps": save,
                 "eval_steps": 50, "log_history": [e for e in history if e["step"] <= at]}  # fmt: skip
        (folder / "trainer_state.json").write_text(json.dumps(state))  # NaN as HF writes it
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors").write_bytes(b"weights")
        os.utime(folder / "trainer_state.json", (T0 + at, T0 + at))


def test_a_diverged_loss_in_both_files_is_one_alert(tmp_path):
    steps = range(5, 401, 5)
    rng = np.random.default_rng(4)
    # above 2 x ln 512 = 12.48 from step 5 to 175, then back; the first two exact in float32 (as the H100 run's
    # were), the others not: the copies first differ at step 15, where a rewind judged the loss again
    exact = {5: 34.5, 10: 57.75}
    history = [
        {
            "step": s,
            "epoch": s / 100,
            "loss": exact.get(s) or float(40 + rng.random() * 30 if s <= 175 else 5 + rng.random()),
        }
        for s in steps
    ]
    hf_run(tmp_path / "diverge", history, 400)
    run = check(tmp_path / "db.duckdb", tmp_path / "diverge")
    alerts = [a for a in run["alerts"] if a["rule"] == "loss_above_uniform"]
    assert [(a["first_step"], a["last_step"]) for a in alerts] == [(5, 175)], alerts


def test_nan_gradients_from_step_5_are_one_alert_from_step_5(tmp_path):
    steps = range(5, 201, 5)
    history = []
    for s in steps:
        history.append({"step": s, "epoch": s / 62, "loss": 17.85 if s == 5 else 0.0, "grad_norm": math.nan})
        if s % 50 == 0:
            history.append({"step": s, "epoch": s / 62, "eval_loss": math.nan})
    hf_run(tmp_path / "fp16", history, 200)
    run = check(tmp_path / "db.duckdb", tmp_path / "fp16")
    [alert] = run["alerts"]
    assert (alert["rule"], alert["metric"], alert["severity"]) == ("nonfinite", "grad_norm", "error")
    assert (alert["first_step"], alert["last_step"]) == (5, 200)
    assert "eval_loss" in alert["message"]  # named beside it
    assert "at 40 logged steps in a row since step 5" in alert["message"], alert["message"]
    assert "logging_nan_inf_filter" in alert["message"] and "harmless once" not in alert["message"]
