"""`python -m trainer.launch --resume-from STEP`: a finished run resumed from an older checkpoint trains the
steps after it again, as runwatch's alert action tells a user to (the command is the action's own, run as is)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest

from collector.advice.action import action_for_alert, trainer_of
from tests.trainer.conftest import REPO, launch, read_metrics

pytestmark = pytest.mark.slow


def test_resume_from_an_older_checkpoint_trains_its_later_steps_again(built_data, tmp_path):
    out = tmp_path / "run"
    first = launch(out, "smoke", "trainer.max_ckpt_to_keep=null")
    assert first.rc == 0, first.output[-4000:]
    assert sorted(p.name for p in out.glob("global_step_*")) == ["global_step_3", "global_step_6"]
    lines_before = len(read_metrics(out))

    # an error alert at step 5 on this run: the action names the step-3 checkpoint and our launcher's command
    run_json = json.loads((out / "run.json").read_text())
    trainer = trainer_of("jsonl", ["jsonl", "run_config"], run_json, [str(out / "global_step_3")], [])
    checkpoints = [
        {"step": s, "path": str(out / f"global_step_{s}"), "complete": True, "inferred": False, "value": None}
        for s in (3, 6)
    ]
    advice = {"recommended": None, "checkpoints": checkpoints, "metric": "val/loss"}
    alert = {
        "rule": "nonfinite",
        "severity": "error",
        "metric": "train/loss",
        "first_step": 5,
        "last_step": 5,
    }
    action = action_for_alert(alert, advice, trainer, str(out), [(5, 5)])
    assert action["trainer"] == "runwatch" and action["restart_step"] == 3
    command = shlex.split(action["command"])
    assert command[:3] == ["python", "-m", "trainer.launch"] and "--resume-from" in command

    second = subprocess.run(
        [sys.executable, *command[1:]], cwd=REPO, capture_output=True, text=True, timeout=600, check=False
    )
    assert second.returncode == 0, (second.stdout + second.stderr)[-4000:]
    assert "resuming from step 3" in second.stdout
    resumed = [r["step"] for r in read_metrics(out)[lines_before:] if "train/loss" in r["data"]]
    assert resumed == [4, 5, 6]  # trained again from the step-3 checkpoint, not from the latest (6)
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "completed" and status["resumed_from"] == 3
    assert [r["step"] for r in json.loads((out / "run.json").read_text())["resumes"]] == [3]


def test_resume_from_a_missing_checkpoint_is_refused_before_anything_starts(built_data, tmp_path):
    out = tmp_path / "run"
    (out / "global_step_3").mkdir(parents=True)
    refused = launch(out, "smoke", "--resume-from", "4")
    assert refused.rc == 2
    assert "--resume-from 4: no checkpoint folder" in refused.output and "checkpoints in" in refused.output
    assert ": 3)" in refused.output


def test_a_grpo_run_resumes_from_an_older_checkpoint_too(built_data, tmp_path):
    # verl's PPO trainer (main_ppo under Ray) takes the same resume_path overrides
    out = tmp_path / "grpo"
    first = launch(out, "grpo_smoke")
    assert first.rc == 0, first.output[-4000:]
    assert {"global_step_2", "global_step_4"} <= {p.name for p in out.glob("global_step_*")}
    second = launch(out, "grpo_smoke", "--resume-from", "2")
    assert second.rc == 0, second.output[-4000:]
    assert (
        "resuming from step 2" in second.output
        and f"Load from checkpoint folder: {out}/global_step_2" in second.output
    )
    steps = [r["step"] for r in read_metrics(out) if "critic/score/mean" in r["data"]]
    assert steps == [1, 2, 3, 4, 3, 4]  # steps 3 and 4 trained again from the step-2 checkpoint
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "completed" and status["resumed_from"] == 2
