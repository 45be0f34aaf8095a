"""Checkpoint advice through the command line on the real runs: the API's one advice function, with the
run's real latest step, its own best metric, and an explicit --metric/--direction when asked."""

from __future__ import annotations

import pytest

from tests.collector.test_daemon_support import cli, cli_json

NLCLI = "pranavkumaarofficial__nlcli-wizard__outputs-checkpoint-255"
YONG = "yongshuaiy__LLMs-final__output-checkpoint-669"
WHISPER = "anthonyrathe__fixed-whisperv2-flemish__root"


@pytest.fixture(scope="module")
def db(tmp_path_factory, real_runs):
    path = tmp_path_factory.mktemp("advice") / "rw.duckdb"
    cli(path, "ingest", str(real_runs))
    return path


def test_a_best_step_that_was_never_saved_is_not_advised(db):
    # best_global_step is 250 but save_steps is 100: checkpoint-250 never existed.
    advice = cli_json(db, "checkpoints", "--run", NLCLI)
    steps = [c["step"] for c in advice["checkpoints"]]
    assert 250 not in steps and advice["recommended"]["step"] != 250
    assert steps == [100, 200, 255] and advice["metric"] == "eval_loss"


def test_the_latest_checkpoint_is_the_real_global_step(db):
    advice = cli_json(db, "checkpoints", "--run", YONG)
    steps = [c["step"] for c in advice["checkpoints"]]
    assert steps[-1] == 669 and 660 not in steps
    # Agrees with the run's own best_model_checkpoint (chosen by eval loss).
    assert advice["recommended"]["step"] == 200


def test_the_runs_own_best_metric_decides_unless_a_metric_is_named(db):
    own = cli_json(db, "checkpoints", "--run", WHISPER)
    # trainer_state: best_metric 9.6159 is eval_wer; best_model_checkpoint .../checkpoint-15000.
    assert (own["metric"], own["direction"]) == ("eval_wer", "min")
    assert own["recommended"]["step"] == 15000
    named = cli_json(db, "checkpoints", "--run", WHISPER, "--metric", "eval_loss")
    assert (named["metric"], named["direction"]) == ("eval_loss", "min")
    assert "eval_loss" in named["recommended"]["reason"]
    flipped = cli_json(db, "checkpoints", "--run", YONG, "--metric", "eval_loss", "--direction", "max")
    assert flipped["direction"] == "max" and flipped["recommended"]["step"] != 200


def test_a_bad_direction_is_refused_with_its_reason(db):
    out = cli(db, "checkpoints", "--run", WHISPER, "--direction", "up", check=False)
    assert out.returncode == 1 and "direction must be 'min' or 'max'" in out.stderr
