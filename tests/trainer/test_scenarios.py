"""Scenario presets make the tiny run misbehave for real, so the monitor has real trouble to catch."""

from __future__ import annotations

import json
import math
import statistics

import pytest

from tests.trainer.conftest import launch, train_records, val_losses
from trainer.presets import PRESETS

pytestmark = pytest.mark.slow


def test_nan_preset_writes_a_nan_loss_at_its_step(built_data, tmp_path):
    result = launch(tmp_path / "run", "nan", "--steps", "14", "trainer.test_freq=7", "trainer.save_freq=7")
    assert result.rc == 0, result.output[-4000:]
    steps = train_records(result.out)
    assert math.isnan(steps[12]["train/loss"]) and math.isnan(steps[12]["train/grad_norm"])
    # verl skips the non-finite update, so the run goes on with finite losses.
    assert all(math.isfinite(steps[s]["train/loss"]) for s in steps if s != 12)
    assert 'train/loss":NaN' in (result.out / "metrics.jsonl").read_text()
    assert json.loads((result.out / "run.json").read_text())["injected"] == [{"kind": "nan", "step": 12}]


def test_spike_preset_makes_grad_norm_and_loss_jump(built_data, tmp_path):
    result = launch(tmp_path / "run", "spike", "trainer.test_freq=30", "trainer.save_freq=30")
    assert result.rc == 0, result.output[-4000:]
    steps = train_records(result.out)
    calm_norm = statistics.median(steps[s]["train/grad_norm"] for s in range(10, 20))
    calm_loss = statistics.median(steps[s]["train/loss"] for s in range(15, 20))
    assert max(steps[s]["train/grad_norm"] for s in range(21, 26)) > 5 * calm_norm
    assert max(steps[s]["train/loss"] for s in range(21, 26)) > 1.5 * calm_loss
    injected = json.loads((result.out / "run.json").read_text())["injected"]
    assert injected == [{"kind": "lr_spike", "step": 20, "steps": 2, "factor": 150.0}]


def test_stall_sleeps_mid_run(built_data, tmp_path):
    # The mechanism, for real but short (the stall preset itself sleeps 90 s before step 15).
    stall = {"kind": "stall", "step": 4, "seconds": 8}
    result = launch(tmp_path / "run", "smoke", "--inject", json.dumps(stall))
    assert result.rc == 0, result.output[-4000:]
    steps = train_records(result.out)
    # The sleep is inside step 4's measured time; no other step comes near it.
    assert steps[4]["train/time(s)"] >= 8
    assert all(steps[s]["train/time(s)"] < 8 for s in steps if s != 4)
    assert "injected stall: sleeping 8 s before step 4" in result.output
    assert json.loads((result.out / "run.json").read_text())["injected"] == [stall]
    assert PRESETS["stall"].faults == [{"kind": "stall", "step": 15, "seconds": 90}]


def test_overfit_preset_val_loss_turns_up_while_train_loss_falls(built_data, tmp_path):
    result = launch(tmp_path / "run", "overfit")
    assert result.rc == 0, result.output[-4000:]
    val = val_losses(result.out)
    best_step = min(val, key=val.get)
    later = [s for s in val if s > best_step]
    assert later, f"val/loss never rose after its minimum at step {best_step}: {val}"
    assert val[max(val)] > val[best_step] * 1.05
    steps = train_records(result.out)
    last = max(steps)
    train_at_best = statistics.mean(steps[s]["train/loss"] for s in range(best_step - 7, best_step + 1))
    train_at_end = statistics.mean(steps[s]["train/loss"] for s in range(last - 7, last + 1))
    assert train_at_end < train_at_best
    # A validation and a checkpoint every 10 steps (save_freq == test_freq), all kept: the best one is there.
    assert sorted(val) == list(range(10, 121, 10))
    assert sorted(int(p.name.split("_")[-1]) for p in result.out.glob("global_step_*")) == sorted(val)
