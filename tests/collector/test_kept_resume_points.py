"""One voice on a spike's resume point: a checkpoint an alert's action names to resume from is never "safe to
delete" while that alert counts (not resolved, or its run still going); the advice says why it is kept."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from collector.advice.recommend import AdviceInput, keep_for_actions, recommend_checkpoint
from tests.collector.test_daemon_support import cli, cli_json


def spiky_run(root: Path) -> Path:
    """A verl-style run whose grad norm spikes at steps 300-303, saved at 100, 200, 250, 300 and 400: the
    spike's action resumes from step 200 (the last save well before it), the advice keeps step 400."""
    run = root / "spiky"
    run.mkdir(parents=True)
    rng = random.Random(0)
    with (run / "metrics.jsonl").open("w") as f:
        for s in range(1, 401):
            loss, grad = 2.0 - s * 0.002 + rng.gauss(0, 0.02), 1.0 + rng.gauss(0, 0.05)
            if 300 <= s <= 303:
                loss, grad = loss * 6, grad * 80
            elif 304 <= s <= 310:
                loss *= 3
            f.write(json.dumps({"step": s, "data": {"train/loss": loss, "train/grad_norm": grad}}) + "\n")
    for step in (100, 200, 250, 300, 400):
        hf = run / f"global_step_{step}" / "huggingface"
        hf.mkdir(parents=True)
        (hf / "config.json").write_text("{}")
        (hf / "tokenizer.json").write_text("{}")
        save_file({"w": np.zeros((4, 4), dtype=np.float32)}, str(hf / "model.safetensors"))
    return run


def test_a_spikes_resume_point_is_kept_not_safe_to_delete(tmp_path):
    run = spiky_run(tmp_path / "root")
    db = tmp_path / "rw.duckdb"
    cli_json(db, "ingest", str(tmp_path / "root"))
    spikes = [a for a in cli_json(db, "alerts") if a["rule"] == "grad_spike"]
    assert spikes and {a["action"]["restart_step"] for a in spikes} == {200}
    advice = cli_json(db, "checkpoints", "--run", "spiky")
    assert 200 not in advice["deletable"] and advice["deletable"], advice
    kept = {k["step"]: k["why"] for k in advice["kept"]}
    assert kept[200] == "the grad_spike action resumes from it"
    assert kept[400].startswith("the recommended checkpoint")
    sizes = {c["step"]: c["bytes"] for c in advice["checkpoints"]}
    assert advice["frees_bytes"] == sum(sizes[s] for s in advice["deletable"])
    text = cli(db, "checkpoints", "--run", "spiky").stdout
    assert "kept step 200: the grad_spike action resumes from it" in text
    assert "deletable steps: " in text and "200" not in text.split("deletable steps: ")[1].split("\n")[0]

    # resolved while the run still goes on: its incident may yet come back, the resume point stays
    for a in spikes:
        cli(db, "resolve", str(a["id"]))
    assert 200 not in cli_json(db, "checkpoints", "--run", "spiky")["deletable"]

    # the run ended and the trouble is resolved: nothing resumes from it any more
    (run / "status.json").write_text(json.dumps({"state": "completed", "step": 400, "total_steps": 400}))
    cli_json(db, "ingest", str(tmp_path / "root"))
    assert cli_json(db, "run", "spiky")["status"] == "completed"
    ended = cli_json(db, "checkpoints", "--run", "spiky")
    assert 200 in ended["deletable"] and 200 not in {k["step"] for k in ended["kept"]}, ended
    # and the spike's action, still read on the alert review, says so beside the Checkpoints page
    for a in (a for a in cli_json(db, "alerts") if a["rule"] == "grad_spike"):
        assert a["action"]["keep"].endswith(
            "now that the trouble is resolved and the run has ended, the checkpoint advice lists it as safe to delete"
        ), a["action"]["keep"]
    # while it counted, the action said nothing of deleting
    assert all("safe to delete" not in a["action"]["text"] for a in spikes)


def test_keeping_a_resume_point_counts_the_freed_bytes_again_and_says_each_reason():
    saves = [
        {"step": s, "path": f"/r/global_step_{s}", "complete": True, "bytes": 10 * s} for s in (10, 20, 30)
    ]
    saves.append({"step": 40, "path": None, "complete": None, "inferred": True})
    advice = recommend_checkpoint(AdviceInput(saves, [(10, 3.0), (20, 1.0), (30, 2.0)], latest_step=30))
    assert advice["deletable"] == [10] and advice["frees_bytes"] == 100
    assert advice["kept"] == [
        {"step": 20, "why": "the recommended checkpoint; the best by val_loss 1"},
        {"step": 30, "why": "the latest: a resume loads it"},
    ]
    kept = keep_for_actions(advice, [(10, "grad_spike"), (10, "loss_spike"), (20, "nonfinite"), (40, "x")])
    assert kept["deletable"] == [] and kept["frees_bytes"] == 0
    assert kept["kept"] == [
        {"step": 10, "why": "the grad_spike and loss_spike actions resume from it"},
        {
            "step": 20,
            "why": "the recommended checkpoint; the best by val_loss 1; the nonfinite action resumes from it",
        },
        {"step": 30, "why": "the latest: a resume loads it"},
    ]  # (step 40 is inferred: never deletable, nothing to keep)
