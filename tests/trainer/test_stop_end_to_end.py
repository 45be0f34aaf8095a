"""Closing the loop on the CPU trainer: a real collector with a `[stop]` rule stops a real verl run that
goes NaN, within two steps of the alert, leaving a complete checkpoint from before the trouble and status
`stopped` with the reason; without the rule the same run goes to its end."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from collector.core.runtime import thresholds_path
from collector.core.stop_request import STOP_FILE
from tests.collector.test_daemon_support import Daemon, cli_json
from tests.trainer.conftest import REPO, launch, read_metrics, train_records
from tests.waiting import wait_for
from trainer.launch import without_signal_report

pytestmark = pytest.mark.slow

NAN_STEP = 12  # the nan preset's injected NaN (trainer/presets.py); it checkpoints every 10 steps
# From the NaN on, each step takes 3 s, as a step on a GPU does (the tiny CPU model's take a fraction of one).
# "Within two steps" is a promise about steps of real length: on 2 busy CPU cores the collector needs a second
# or two from the line written to the stop request, which is many of the CPU model's steps.
GPU_PACE = json.dumps({"kind": "slow", "step": NAN_STEP, "seconds": 3})


@pytest.fixture
def watched(tmp_path):
    root, db = tmp_path / "runs", tmp_path / "state" / "rw.duckdb"
    root.mkdir()
    db.parent.mkdir()
    daemon = Daemon(db, [root])
    yield daemon, root, db
    daemon.ensure_stopped()


def test_a_stop_rule_stops_the_nan_run_within_two_steps(built_data, watched):
    daemon, root, db = watched
    thresholds_path(db).write_text('[stop]\non = ["nonfinite"]\n')
    daemon.start()
    result = launch(root / "nan", "nan", "--steps", "24", "--inject", GPU_PACE)
    assert result.rc == 0, result.output[-4000:]
    status = json.loads((root / "nan" / "status.json").read_text())
    assert status["state"] == "stopped", status
    assert "nonfinite" in status["stop_reason"] and f"step {NAN_STEP}" in status["stop_reason"]
    request = json.loads((root / "nan" / STOP_FILE).read_text())
    assert request["by"] == "rule" and request["rule"] == "nonfinite" and request["step"] == NAN_STEP
    stopped_at = status["step"]
    assert NAN_STEP <= stopped_at <= NAN_STEP + 2, f"stopped after step {stopped_at}"
    assert max(train_records(root / "nan")) == stopped_at  # no step ran after the stop

    def complete_steps() -> set[int] | None:  # the daemon indexes the last save a cycle after it is written
        view = cli_json(db, "checkpoints", "--run", "nan")
        found = {c["step"] for c in view["checkpoints"] if c["complete"]}
        return found if stopped_at in found else None

    complete = wait_for(complete_steps, f"the daemon to index the step-{stopped_at} checkpoint")
    daemon_view = cli_json(db, "checkpoints", "--run", "nan")
    assert 10 in complete, daemon_view  # from before the trouble
    assert stopped_at in complete and status["last_checkpoint_step"] == stopped_at
    assert_log_ends_with_the_stop(result.output, root / "nan", stopped_at, status["stop_reason"])
    (alert,) = [a for a in cli_json(db, "alerts", "--run", "nan") if a["id"] == request["alert_id"]]
    assert "asked the run to stop" in alert["note"]
    assert daemon.stop() == 0


def test_without_a_stop_rule_the_nan_run_goes_to_its_end(built_data, watched):
    daemon, root, db = watched
    daemon.start()
    result = launch(root / "nan", "nan", "--steps", "16")
    assert result.rc == 0, result.output[-4000:]
    assert json.loads((root / "nan" / "status.json").read_text())["state"] == "completed"
    assert max(train_records(root / "nan")) == 16
    assert not (root / "nan" / STOP_FILE).exists()
    wait_for(
        lambda: cli_json(db, "alerts", "--run", "nan", "--rule", "nonfinite"), "the NaN seen by the daemon"
    )
    assert daemon.stop() == 0


def test_a_grpo_run_stops_on_a_users_request_after_the_step_it_is_in(built_data, watched):
    """verl's PPO/GRPO driver loop, not the SFT worker, polls the request: after the step it is logging it saves
    a checkpoint, says `stopped`, and the launcher exits 0."""
    daemon, root, db = watched
    daemon.start()
    run_dir = root / "grpo"
    command = [sys.executable, "-m", "trainer.launch", "--preset", "grpo_smoke", "--out", str(run_dir)]
    with subprocess.Popen(
        command + ["--steps", "30"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    ) as proc:
        try:
            asked_at = wait_for_step(run_dir, 2, proc)
            request = cli_json(db, "stop", "grpo", "--reason", "enough")
            output = proc.communicate(timeout=300)[0].decode(errors="replace")
        finally:
            proc.kill()
    assert proc.returncode == 0, output[-4000:]
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "stopped" and status["stop_reason"] == "enough", status
    assert request["written"] and request["request"]["by"] == "person", request
    stopped_at = status["step"]
    assert asked_at <= stopped_at < 30
    steps = {r["step"] for r in read_metrics(run_dir) if not all(k.startswith("val-") for k in r["data"])}
    assert max(steps) == stopped_at  # no step ran after the stop
    assert status["last_checkpoint_step"] == stopped_at and (run_dir / f"global_step_{stopped_at}").is_dir()
    # the driver's fit ended as at its last step: no actor died, nothing for Hydra or Ray to report
    assert "ActorDiedError" not in output and "Error executing job" not in output, output[-4000:]
    assert_log_ends_with_the_stop(output, run_dir, stopped_at, "enough")
    assert daemon.stop() == 0


def assert_log_ends_with_the_stop(output: str, run_dir, step: int, reason: str) -> None:
    """The trainer's log has no traceback and ends with the launcher's one line on the stop."""
    assert "Traceback" not in output, output[-4000:]
    last = [line for line in output.splitlines() if line.strip()][-1]
    expected = f"trainer.launch: stopped by runwatch at step {step}: {reason}; last checkpoint {run_dir}"
    assert last == f"{expected}/global_step_{step}", (last, output[-2000:])


def wait_for_step(run_dir, step: int, proc: subprocess.Popen, limit_s: float = 400) -> int:
    """Block until status.json says the run reached `step`; the step it says (fails if the run ends first)."""

    def reached() -> int | None:
        got = json.loads((run_dir / "status.json").read_text()).get("step") or 0
        return got if got >= step else None

    return wait_for(reached, f"{run_dir} to reach step {step}", limit_s, proc=proc, poll_s=0.5)


def test_a_run_stopped_by_a_signal_ends_its_log_with_one_line(built_data, tmp_path):
    """SIGTERM to the launcher (a person's kill, make's forwarded signal): torchrun's own SignalException
    traceback is left out, and the log ends with the signal, the step and the last checkpoint."""
    run_dir = tmp_path / "sft"
    command = [sys.executable, "-m", "trainer.launch", "--preset", "smoke", "--out", str(run_dir)]
    with subprocess.Popen(
        command + ["--steps", "40"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    ) as proc:
        try:
            wait_for_step(run_dir, 4, proc)  # the smoke preset saves every 3 steps
            proc.send_signal(signal.SIGTERM)
            output = proc.communicate(timeout=300)[0].decode(errors="replace")
        finally:
            proc.kill()
    assert proc.returncode != 0, output[-4000:]  # not finished: status.json says failed, stopped by SIGTERM
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "failed" and status["error"].startswith("stopped by SIGTERM"), status
    assert "SignalException" not in status["error"], status  # torchrun's report of the signal is no cause
    assert "Traceback" not in output and "SignalException" not in output, output[-4000:]
    saved = max(int(p.name.split("_")[-1]) for p in run_dir.glob("global_step_*"))
    last = [line for line in output.splitlines() if line.strip()][-1]
    assert last == (
        f"trainer.launch: stopped by SIGTERM at step {status['step']}; last checkpoint {run_dir}/global_step_{saved}"
    ), output[-2000:]


def test_only_torchruns_report_of_the_signal_is_left_out():
    """A worker's own traceback stays; torchrun's SignalException traceback goes, with nothing else."""
    lines = [
        "step:5 - train/loss:5.7\n",
        "[rank0]: Traceback (most recent call last):\n",
        '[rank0]:   File "x.py", line 1, in <module>\n',
        "[rank0]: RuntimeError: worker broke\n",
        "W1126 Received 15 death signal, shutting down workers\n",
        "Traceback (most recent call last):\n",
        '  File "run.py", line 9, in main\n',
        "    time.sleep(monitor_interval)\n",
        "torch.distributed.elastic.multiprocessing.api.SignalException: Process 7 got signal: 15\n",
    ]
    assert without_signal_report(lines) == lines[:5]
