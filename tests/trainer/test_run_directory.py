"""A short real verl SFT run on CPU, with 1 and 2 processes, writes the whole run directory."""

from __future__ import annotations

import csv
import json
import math
import re

import pytest

from tests.trainer.conftest import read_metrics, train_records, val_losses

pytestmark = pytest.mark.slow

STEP_KEYS = {"train/loss", "train/grad_norm", "train/lr", "train/time(s)", "train/global_tokens"}


@pytest.fixture(params=["smoke_run_1", "smoke_run_2"])
def run(request):
    return request.getfixturevalue(request.param)


def test_metrics_jsonl_has_every_step_and_validation(run):
    records = read_metrics(run.out)
    assert all(set(r) == {"step", "data"} for r in records)
    steps = train_records(run.out)
    assert sorted(steps) == [1, 2, 3, 4, 5, 6]
    for step, data in steps.items():
        assert set(data) >= STEP_KEYS, f"step {step} lacks {STEP_KEYS - set(data)}"
        assert math.isfinite(data["train/loss"]) and data["train/time(s)"] > 0
    # The smoke preset validates every 3 steps; verl logs val/loss as a record of its own.
    assert sorted(val_losses(run.out)) == [3, 6]
    assert train_records(run.out)[6]["train/loss"] < train_records(run.out)[1]["train/loss"]


def test_csv_histories_match_the_jsonl(run):
    with open(run.out / "training_history.csv", newline="") as fp:
        rows = list(csv.DictReader(fp))
    assert [int(r["step"]) for r in rows] == [1, 2, 3, 4, 5, 6]
    steps = train_records(run.out)
    for row in rows:
        assert float(row["train/loss"]) == pytest.approx(steps[int(row["step"])]["train/loss"])
    with open(run.out / "validation_history.csv", newline="") as fp:
        val_rows = list(csv.DictReader(fp))
    assert {int(r["step"]): float(r["val/loss"]) for r in val_rows} == pytest.approx(val_losses(run.out))


def test_status_json_says_completed(run):
    status = json.loads((run.out / "status.json").read_text())
    assert status["state"] == "completed"
    assert status["step"] == status["total_steps"] == 6
    assert isinstance(status["pid"], int) and status["host"]
    assert isinstance(status["updated_at"], float) and status["error"] is None


def test_run_json_records_config_versions_and_schedule(run):
    doc = json.loads((run.out / "run.json").read_text())
    assert doc["trainer"] == "verl_sft" and doc["preset"] == "smoke"
    assert doc["config"]["trainer"]["default_local_dir"] == str(run.out)
    assert doc["config"]["optim"]["lr_scheduler_type"] == "cosine"
    assert doc["lr_scheduler"] == "cosine" and doc["warmup_ratio"] == 0.05
    assert doc["total_steps"] == 6 and doc["vocab_size"] == 512
    assert doc["steps_per_epoch"] == 490 and doc["nproc"] in (1, 2)
    assert doc["injected"] == []
    assert {"python", "torch", "verl", "transformers"} <= set(doc["versions"])
    assert doc["versions"]["verl"] == "0.9.1"
    assert isinstance(doc["started_at"], float)


def test_checkpoints_in_verl_layout(run):
    assert (run.out / "latest_checkpointed_iteration.txt").read_text().strip() == "6"
    for step in (3, 6):
        folder = run.out / f"global_step_{step}"
        assert (folder / "huggingface" / "model.safetensors").is_file()
        assert (folder / "huggingface" / "config.json").is_file()
        assert list(folder.glob("model_world_size_*_rank_*.pt"))


def test_console_output_in_verl_format(run):
    assert re.search(r"^step:1 - .*train/loss:[0-9.]+ - ", run.output, re.MULTILINE)
    assert "train/time(s):" in run.output
    assert "runwatch plugin loaded: platform=cpu" in run.output


def test_one_and_two_processes_train_the_same_model(smoke_run_1, smoke_run_2):
    # Same seed, same global batch: FSDP2 over 2 gloo ranks must compute the same losses as 1 process.
    one, two = train_records(smoke_run_1.out), train_records(smoke_run_2.out)
    for step in one:
        assert two[step]["train/loss"] == pytest.approx(one[step]["train/loss"], rel=1e-3)
    assert json.loads((smoke_run_2.out / "run.json").read_text())["nproc"] == 2
