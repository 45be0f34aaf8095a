"""Checkpoint advice for what people commit: `output/checkpoint-N/` holding only trainer_state.json (no weights).

The saves are inferred from the state file (save_steps, best_model_checkpoint, the final step), the best one is
recommended, and the reason says plainly that its weights are not in the folder. Fixtures are written here in
the shape of public HF runs (an overfitting LoRA run evaluated every save; a run evaluated once)."""

from __future__ import annotations

import json
from pathlib import Path

from collector.advice.recommend import AdviceInput, advice_for_run, recommend_checkpoint
from collector.ingest.checkpoints import scan_checkpoints
from tests.collector.test_daemon_support import cli


def _state(last: int, save_steps: int, evals: dict[int, float], best: str | None = None) -> dict:
    history = [{"step": s, "epoch": s / 70, "loss": 1.2 - s / (last * 1.2), "learning_rate": 3e-4}
               for s in range(50, last + 1, 50)]  # fmt: skip
    history += [{"step": s, "epoch": s / 70, "eval_loss": v, "eval_runtime": 3.1} for s, v in evals.items()]
    history.sort(key=lambda e: e["step"])
    return {
        "best_metric": evals.get(int(best.rsplit("-", 1)[1])) if best else None,
        "best_model_checkpoint": best,
        "global_step": last,
        "max_steps": last,
        "eval_steps": save_steps,
        "save_steps": save_steps,
        "logging_steps": 50,
        "log_history": history,
    }


def _write(root: Path, last: int, state: dict) -> Path:
    folder = root / "output" / f"checkpoint-{last}"
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps(state))
    return folder


# eval_loss lowest at the first save, then rising (overfitting): the MelDashti shape
RISING = {200: 0.3213, 400: 0.3256, 600: 0.379, 800: 0.378, 1000: 0.415, 1200: 0.423, 1400: 0.45}


def test_a_state_only_checkpoint_folder_is_indexed_as_saved_without_weights(tmp_path):
    folder = _write(tmp_path, 1460, _state(1460, 200, RISING))
    (folder / "training_args.bin").write_bytes(b"x")  # the trainer's, not the model's
    index = scan_checkpoints(tmp_path / "output")
    [c] = index.checkpoints
    assert (c.step, c.complete, c.state_only) == (1460, False, True)
    assert "only trainer_state.json" in c.problem and "weights of this save are not here" in c.problem


def test_check_recommends_the_inferred_best_and_says_its_weights_are_not_here(tmp_path):
    _write(tmp_path, 1460, _state(1460, 200, RISING))
    # (exit 2: the overfitting is an error alert; the advice is what this test reads)
    out = json.loads(
        cli(tmp_path / "db.duckdb", "check", str(tmp_path / "output"), "--json", check=False).stdout
    )
    [run] = out["runs"]
    assert run["recommended_step"] == 200
    reason = run["recommendation_reason"]
    assert "checkpoint-200's weights are not here: only checkpoint-1460's trainer_state.json is" in reason
    assert "complete" not in reason  # nobody has seen these checkpoints whole


def test_an_exactly_evaluated_save_and_the_runs_own_best_win_a_tie(tmp_path):
    # one evaluation at 500 (the run's best_model_checkpoint, written with a Windows path); the final save at
    # 630 has none of its own (an evaluation is never carried to a later save past another): 500 is kept
    state = _state(630, 500, {500: 1.6889}, best="./outputs\\checkpoint-500")
    folder = _write(tmp_path, 630, state)
    index = scan_checkpoints(folder.parent)
    seen = [{"step": c.step, "path": str(c.path), "complete": c.complete, "bytes": c.bytes,
             "state_only": c.state_only, "problem": c.problem} for c in index.checkpoints]  # fmt: skip
    info = {k: v for k, v in state.items() if k != "log_history"}
    advice = advice_for_run(seen, {"eval_loss": [(500, 1.6889)]}, [], info, 630)
    assert advice["recommended"]["step"] == 500
    assert "evaluated at step" not in advice["recommended"]["reason"]
    # 630 carries no evaluation (none since 500): it does not borrow 500's
    assert "among 1 saved checkpoint(s)" in advice["recommended"]["reason"]
    assert advice["deletable"] == [] and advice["no_recommendation"] is None


def test_without_evaluations_the_state_only_final_save_is_kept(tmp_path):
    folder = _write(tmp_path, 1500, _state(1500, 500, {}))
    index = scan_checkpoints(folder.parent)
    seen = [{"step": c.step, "path": str(c.path), "complete": c.complete, "bytes": c.bytes,
             "state_only": c.state_only} for c in index.checkpoints]  # fmt: skip
    advice = advice_for_run(seen, {}, [], {"global_step": 1500, "save_steps": 500.0}, 1500)
    assert advice["recommended"]["step"] == 1500
    assert (
        "checkpoint-1500's weights are not here: only its trainer_state.json is"
        in advice["recommended"]["reason"]
    )
    assert [c["step"] for c in advice["checkpoints"]] == [500, 1000, 1500]


def test_no_recommendation_always_says_why():
    none = recommend_checkpoint(AdviceInput([], [(100, 1.0)], [], "eval_loss", "min"))
    assert none["recommended"] is None and "No checkpoint was seen on disk" in none["no_recommendation"]
    broken = recommend_checkpoint(AdviceInput(
        [{"step": 100, "path": "checkpoint-100", "complete": False, "bytes": 10, "problem": "no config.json"}],
        [(100, 1.0)], [], "eval_loss", "min",
    ))  # fmt: skip
    assert "checkpoint at step 100: no config.json" in broken["no_recommendation"]
