"""Pre-flight checks fail fast, with a message naming what is wrong, before anything starts."""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import replace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.trainer.conftest import REPO
from trainer.preflight import RunPlan, check_run, count_steps
from trainer.presets import PRESETS, merge_overrides, override_value


@pytest.fixture
def plan(built_data, tmp_path) -> RunPlan:
    return RunPlan(
        out=tmp_path / "run",
        nproc=2,
        train_files=[built_data / "sft_train.parquet"],
        val_files=[built_data / "sft_val.parquet"],
        model_path=built_data / "model",
        tokenizer_path=None,
        train_batch_size=8,
        micro_batch_size=4,
        train_max_samples=-1,
        total_epochs=1,
        total_steps=None,
    )


def test_a_good_plan_passes(plan):
    assert check_run(plan) == []
    assert (plan.out).is_dir()


def test_batch_not_divisible_by_processes_times_micro_batch(plan):
    problems = check_run(replace(plan, nproc=3))
    assert len(problems) == 1
    assert "data.train_batch_size=8 must be divisible by processes x micro batch (3 x 4 = 12)" in problems[0]


def test_missing_train_file_is_named(plan, tmp_path):
    missing = tmp_path / "nope.parquet"
    problems = check_run(replace(plan, train_files=[missing]))
    assert problems == [
        f"train file {missing} does not exist (build it with `python -m data.build --out data/build`)"
    ]


def test_parquet_without_messages_column(plan, tmp_path):
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"prompt": ["hi"]}), bad)
    problems = check_run(replace(plan, val_files=[bad]))
    assert problems == [f"validation file {bad} has no `messages` column (columns: prompt)"]


def test_model_without_weights_or_tokenizer(plan, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(plan.model_path / "config.json", model / "config.json")
    problems = check_run(replace(plan, model_path=model))
    assert any("has no weights" in p and str(model) in p for p in problems)
    assert any("has no tokenizer.json" in p for p in problems)


def test_output_folder_not_writable(plan, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    problems = check_run(replace(plan, out=blocker / "run"))
    assert len(problems) == 1 and problems[0].startswith(f"output folder {blocker / 'run'} is not writable")


def test_validation_set_smaller_than_one_batch_per_process(plan):
    problems = check_run(replace(plan, train_batch_size=96, micro_batch_size=4))
    assert any("validation set has 80 rows: fewer than one batch of 48 per process" in p for p in problems)


def test_more_steps_than_the_data_gives(plan):
    problems = check_run(replace(plan, train_max_samples=64, total_steps=100))
    assert problems == [
        "trainer.total_training_steps=100 is more than the 8 steps 1 epoch(s) of the train set give: "
        "raise trainer.total_epochs"
    ]


def test_step_count_matches_verl_samplers(plan):
    # 64 rows over 2 ranks, 4 per rank per step: 8 steps per epoch.
    assert count_steps(3920, replace(plan, train_max_samples=64, total_epochs=40)) == 320
    assert count_steps(3920, replace(plan, total_steps=6)) == 6
    assert count_steps(3920, replace(plan, nproc=1)) == 490


def test_user_overrides_replace_preset_keys():
    merged = merge_overrides(
        PRESETS["smoke"].overrides, ["optim.lr=1e-4", "model.override_config.attn_implementation=eager"]
    )
    assert override_value(merged, "optim.lr") == "1e-4"
    assert sum(1 for item in merged if item.split("=")[0].lstrip("+") == "optim.lr") == 1
    assert "model.override_config.attn_implementation=eager" in merged
    assert not any(item.startswith("+model.override_config.attn_implementation") for item in merged)


def test_launcher_refuses_and_starts_nothing(built_data, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "trainer.launch", "--preset", "smoke", "--out", str(out), "--nproc", "3"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "pre-flight failed for preset 'smoke', nothing was started" in proc.stderr
    assert "must be divisible by processes x micro batch (3 x 4 = 12)" in proc.stderr
    assert not (out / "status.json").exists() and not (out / "metrics.jsonl").exists()


def test_launcher_rejects_an_unknown_fault(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainer.launch",
            "--preset",
            "smoke",
            "--out",
            str(tmp_path),
            "--inject",
            '{"kind":"fire"}',
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "kind must be one of nan, lr_spike, stall, crash" in proc.stderr


def test_gpu_preset_maps_the_seed_hyperparameters():
    gpu = PRESETS["gpu"].overrides
    assert (
        gpu["optim.lr"] == 2e-5 and gpu["optim.betas"] == "[0.9,0.95]" and gpu["optim.weight_decay"] == 0.01
    )
    assert gpu["optim.lr_warmup_steps_ratio"] == 0.05 and gpu["optim.clip_grad"] == 1.0
    assert gpu["optim.lr_scheduler_type"] == "cosine" and gpu["trainer.total_epochs"] == 2
    assert (
        gpu["trainer.save_freq"] == gpu["trainer.test_freq"] == 500 and gpu["trainer.max_ckpt_to_keep"] == 5
    )
    assert gpu["trainer.seed"] == 42 and gpu["data.max_length"] == 4096
    assert gpu["data.train_batch_size"] == 128 and gpu["data.micro_batch_size_per_gpu"] == 2
    assert not PRESETS["gpu"].cpu


def test_demo_preset_checkpoints_where_it_validates():
    demo = PRESETS["demo"].overrides
    assert demo["trainer.save_freq"] == demo["trainer.test_freq"]
    assert {f["kind"] for f in PRESETS["demo"].faults} == {"lr_spike"}
