"""kill -9 in the middle of a run, then the same command again: verl resumes from the latest checkpoint,
and metrics.jsonl keeps every line the killed run wrote."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.trainer.conftest import REPO, launch, read_metrics, train_records
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

# Steps 1-7 run, the checkpoint of step 6 is written, then the process sleeps before step 8: a point
# where the kill is certain to land mid-run, whatever the machine's speed.
STALL = json.dumps({"kind": "stall", "step": 8, "seconds": 600})
ARGS = ["--steps", "12", "trainer.save_freq=3", "trainer.test_freq=3", "trainer.max_ckpt_to_keep=1"]


def test_kill_minus_9_then_resume_appends(built_data, tmp_path):
    out = tmp_path / "run"
    first = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainer.launch",
            "--preset",
            "smoke",
            "--out",
            str(out),
            *ARGS,
            "--inject",
            STALL,
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: launcher, torchrun and worker die together
    )
    try:
        wait_for(lambda: 7 in train_records(out) if (out / "metrics.jsonl").exists() else False, "step 7")
        wait_for(
            lambda: (
                (out / "latest_checkpointed_iteration.txt").exists()
                and (out / "latest_checkpointed_iteration.txt").read_text().strip() == "6"
            ),
            "the step-6 checkpoint",
        )
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    before = (out / "metrics.jsonl").read_text()
    killed_status = json.loads((out / "status.json").read_text())
    # Nobody could say otherwise; the step count is written at most once a second, so it may lag a step.
    assert killed_status["state"] == "running" and killed_status["step"] in (6, 7), killed_status

    second = launch(out, "smoke", *ARGS)
    assert second.rc == 0, second.output[-4000:]
    assert "resuming from step 6" in second.output

    after = (out / "metrics.jsonl").read_text()
    assert after.startswith(before), "the resumed run rewrote lines the killed run had written"
    resumed = [r["step"] for r in read_metrics(out)[len(before.splitlines()) :] if "train/loss" in r["data"]]
    assert resumed == [7, 8, 9, 10, 11, 12]  # step 7 was not checkpointed, so it is trained again
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "completed" and status["step"] == 12 and status["resumed_from"] == 6
    run = json.loads((out / "run.json").read_text())
    assert [r["step"] for r in run["resumes"]] == [6]
    assert run["injected"] == [json.loads(STALL)]  # the first start's fault is still on record
    # max_ckpt_to_keep=1 rotates what one process saved (3 went when 6 was written, 9 when 12 was); verl
    # 0.9.1 does not rotate checkpoints a previous process wrote, so the killed run's step-6 one stays.
    assert sorted(p.name for p in out.glob("global_step_*")) == ["global_step_12", "global_step_6"]
