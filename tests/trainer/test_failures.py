"""A run that dies says so in status.json (`failed`, with the error), whether it dies inside training or
before training began; metrics written before the death stay."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.trainer.conftest import launch, train_records

pytestmark = pytest.mark.slow


def test_error_during_training_marks_the_run_failed(built_data, tmp_path):
    result = launch(tmp_path / "run", "smoke", "--inject", '{"kind": "crash", "step": 4}')
    assert result.rc != 0
    status = json.loads((result.out / "status.json").read_text())
    assert status["state"] == "failed" and status["step"] == 3
    assert status["error"].startswith("RuntimeError: runwatch: injected crash at step 4")
    assert sorted(train_records(result.out)) == [1, 2, 3]
    assert (result.out / "global_step_3").is_dir()  # the checkpoint before the crash is intact


def test_death_before_training_is_reported_by_the_launcher(built_data, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(built_data / "model", model)
    (model / "model.safetensors").write_bytes(b"this is not a safetensors file")
    result = launch(tmp_path / "run", "smoke", "--model", str(model))
    assert result.rc != 0
    status = json.loads((result.out / "status.json").read_text())
    assert status["state"] == "failed" and status["step"] == 0
    assert status["error"].startswith(f"torchrun exited with code {result.rc}")
    assert "safetensors" in status["error"].lower() or "header" in status["error"].lower()
