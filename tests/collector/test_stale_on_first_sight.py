"""Staleness judged from when the data was written (issue 12 item 5): a run whose status says running but whose
files were last written hours ago is `stalled` the first time the collector sees it (its last point's time is
the file's modification time, not the moment of ingest); one silent for days most likely ended without saying
so (a warning, not an error); a finished run, or a log with no status file, is never called stalled for its
age."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from collector.ingest.segments import CLOCK_SLACK_S, written_at
from tests.conftest import REPO

HOUR = 3600.0


def _run(folder, state: str, age_s: float) -> None:
    """A run folder our trainer's way (metrics.jsonl, status.json), every file last written `age_s` ago."""
    folder.mkdir()
    then = time.time() - age_s
    lines = [json.dumps({"step": s, "data": {"train/loss": 2.0 - 0.01 * s}}) for s in range(1, 41)]
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    status = {"state": state, "step": 40, "total_steps": 100, "pid": 1, "updated_at": then}
    (folder / "status.json").write_text(json.dumps(status))
    for name in ("metrics.jsonl", "status.json"):
        os.utime(folder / name, (then, then))


def _console(folder, age_s: float) -> None:
    """A console log with no status file and no completion line, last written `age_s` ago."""
    folder.mkdir()
    then = time.time() - age_s
    text = "".join(f"step:{s} - train/loss:{2.0 - 0.01 * s}\n" for s in range(1, 41))
    (folder / "train.log").write_text(text)
    os.utime(folder / "train.log", (then, then))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("stale")
    _run(root / "hung", "running", 3 * HOUR)
    _run(root / "forgotten", "running", 72 * HOUR)
    _run(root / "finished", "completed", 72 * HOUR)
    _run(root / "live", "running", 5.0)
    _console(root / "old_log", 72 * HOUR)
    done = subprocess.run(
        [sys.executable, "-m", "collector", "check", str(root), "--json", "--fail-on", "error"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.stdout, done.stderr
    return {r["run"]: r for r in json.loads(done.stdout)["runs"]}


def _stalled(run: dict) -> list[dict]:
    return [a for a in run["alerts"] if a["rule"] == "stalled"]


def test_a_running_run_silent_for_hours_is_stalled_when_first_seen(runs):
    run = runs["hung"]
    assert run["status"] == "stalled", run
    (alert,) = _stalled(run)
    assert alert["severity"] == "error" and "no new point for 180" in alert["message"], alert


def test_a_running_run_silent_for_days_most_likely_ended_a_warning(runs):
    run = runs["forgotten"]
    assert run["status"] == "stalled", run
    (alert,) = _stalled(run)
    assert alert["severity"] == "warn" and "most likely ended without saying so" in alert["message"], alert


def test_finished_live_and_status_less_runs_are_not_called_stalled(runs):
    assert runs["finished"]["status"] == "completed" and not _stalled(runs["finished"])
    assert runs["live"]["status"] == "running" and not _stalled(runs["live"])
    # a log with no status file says nothing of running: its age alone raises nothing (an archive stays quiet)
    assert runs["old_log"]["status"] == "unknown" and runs["old_log"]["alerts"] == []


def test_recent_files_count_as_written_now_so_a_remote_clock_off_by_minutes_is_no_stall():
    now = 1_000_000.0
    assert written_at(now - 60, now) == now
    assert written_at(now - CLOCK_SLACK_S - 1, now) == now - CLOCK_SLACK_S - 1
