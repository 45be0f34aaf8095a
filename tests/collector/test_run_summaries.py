"""The overview's recommended checkpoint is kept from one request to the next and rebuilt when what the
advice reads changes: a new evaluation, a new checkpoint, the run's runwatch.toml. A real daemon over a
real run folder, read over real HTTP."""

from __future__ import annotations

import json

import numpy as np
from safetensors.numpy import save_file

from tests.collector.test_api import write_checkpointed_run
from tests.collector.test_daemon_support import Daemon, wait_for


def recommended(client) -> int | None:
    return next(r for r in client.get("/api/runs") if r["id"] == "ck")["recommended_step"]


def test_the_recommended_step_follows_new_evaluations_checkpoints_and_config(tmp_path):
    root = tmp_path / "root"
    run_dir = root / "ck"
    write_checkpointed_run(run_dir)
    daemon = Daemon(tmp_path / "rw.duckdb", [root]).start()
    try:
        client = daemon.client()
        wait_for(lambda: recommended(client) == 20, "the first recommendation (best val/loss at 20)")
        assert recommended(client) == 20  # served again from what was built, same answer
        assert client.get("/api/runs/ck")["recommended_step"] == 20

        # A better evaluation at 50 and its complete checkpoint: the recommendation moves.
        hf = run_dir / "global_step_50" / "huggingface"
        hf.mkdir(parents=True)
        (hf / "config.json").write_text("{}")
        (hf / "tokenizer.json").write_text("{}")
        save_file({"w": np.zeros((4, 4), dtype=np.float32)}, str(hf / "model.safetensors"))
        with (run_dir / "metrics.jsonl").open("a") as f:
            f.write(json.dumps({"step": 50, "data": {"train/loss": 0.5}}) + "\n")
            f.write(json.dumps({"step": 50, "data": {"val/loss": 1.0}}) + "\n")
        wait_for(lambda: recommended(client) == 50, "the recommendation to follow the better evaluation")

        # The run's own config asks for the highest val/loss instead: rebuilt without any new point.
        (run_dir / "runwatch.toml").write_text('[advice]\nmetric = "val/loss"\ndirection = "max"\n')
        wait_for(lambda: recommended(client) == 10, "the recommendation to follow runwatch.toml")
        assert client.get("/api/runs/ck/checkpoints")["recommended"]["step"] == 10
    finally:
        daemon.ensure_stopped()
