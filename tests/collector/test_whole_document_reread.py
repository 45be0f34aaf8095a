"""A whole document rewritten in place (HF's trainer_state.json: truncated, then written) is re-read whole,
and the bad lines its half-written text left are forgotten (issue 24.4), against a real daemon: the run is
listed as a problem while the file is half-written, and not once the whole file is stored."""

from __future__ import annotations

import json
import os

from tests.collector.test_daemon_support import Daemon, cli_json, wait_for


def state(last: int) -> str:
    history = [
        {"step": s, "epoch": s / 100, "loss": 2.0 - s / 1000, "learning_rate": 1e-5}
        for s in range(10, last + 1, 10)
    ]
    return json.dumps(
        {"global_step": last, "max_steps": 1000, "logging_steps": 10, "log_history": history}, indent=2
    )


def test_a_rewritten_trainer_state_loses_its_old_bad_lines(tmp_path):
    root, db = tmp_path / "runs", tmp_path / "rw.duckdb"
    run = root / "hf-run"
    run.mkdir(parents=True)
    path = run / "trainer_state.json"
    path.write_text(state(100))
    d = Daemon(db, [root]).start()
    try:
        client = d.client()
        wait_for(lambda: (cli_json(db, "runs") or [{}])[0].get("last_step") == 100, "the first state")
        # Rewritten in place, caught half-way: truncated, then the first half of the new text.
        text = state(200)
        with path.open("r+") as f:
            f.truncate(0)
            f.write(text[: len(text) // 2])
        os.utime(path, ns=(0, path.stat().st_mtime_ns + 1_000_000_000))  # a change the daemon sees

        def bad_lines() -> list[dict]:
            return [p for p in client.get("/api/problem_files") if p["problem"] == "bad_lines"]

        wait_for(bad_lines, "the half-written state's bad lines")
        path.write_text(text)  # the write completes
        os.utime(path, ns=(0, path.stat().st_mtime_ns + 2_000_000_000))
        wait_for(lambda: cli_json(db, "runs")[0]["last_step"] == 200, "the whole new state")
        wait_for(lambda: not bad_lines(), "the old bad lines to go")
        assert not [p for p in cli_json(db, "files") if p["problem"] == "bad_lines"]
        assert d.stop() == 0
    finally:
        d.ensure_stopped()
