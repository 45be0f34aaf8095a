"""Whole-document parsers: HF `trainer_state.json`, runwatch `status.json` / `run.json`, verl's checkpoint marker."""

from __future__ import annotations

import json
import math

from collector.formats import checkpoint_marker, hf_trainer_state, parser_for, run_config, status
from tests.collector.test_parsers_support import FuzzSample, points_as_tuples

STATE = b"""{
  "best_metric": 0.5,
  "best_model_checkpoint": "/home/someone/out/checkpoint-20",
  "epoch": 1.0,
  "eval_steps": 10,
  "global_step": 30,
  "log_history": [
    {"epoch": 0.3, "grad_norm": NaN, "learning_rate": 0.0, "loss": 4.3, "step": 10},
    {"epoch": 0.3, "eval_loss": 0.7, "eval_runtime": 1.5, "step": 10},
    {"epoch": 0.6, "grad_norm": Infinity, "learning_rate": 1e-05, "loss": 2.0, "step": 20, "note": "x"},
    {"epoch": 0.6, "eval_loss": 0.5, "step": 20.0},
    {"epoch": 1.0, "loss": 1.0},
    {"epoch": 1.0, "step": 30, "total_flos": 1e+16, "train_loss": 2.4, "train_runtime": 100.0}
  ],
  "logging_steps": 10,
  "max_steps": 30,
  "metric_for_best_model": "eval_loss",
  "num_train_epochs": 1,
  "save_steps": 10,
  "trial_name": null
}
"""


def test_every_numeric_key_of_log_history_is_a_point_with_its_hf_name():
    result = hf_trainer_state.parse(STATE)
    rows = points_as_tuples(result)
    assert [(s, m) for s, m, _, _ in rows] == [
        (10, "epoch"),
        (10, "grad_norm"),
        (10, "learning_rate"),
        (10, "loss"),
        (10, "epoch"),
        (10, "eval_loss"),
        (10, "eval_runtime"),
        (20, "epoch"),
        (20, "grad_norm"),
        (20, "learning_rate"),
        (20, "loss"),
        (20, "epoch"),
        (20, "eval_loss"),
        (30, "epoch"),
        (30, "total_flos"),
        (30, "train_loss"),
        (30, "train_runtime"),
    ]
    assert math.isnan(rows[1][2]) and rows[8][2] == math.inf
    assert hf_trainer_state.FORMAT.whole_document and result.consumed == len(STATE)
    assert [(b.line, b.reason) for b in result.bad] == [
        (5, "log_history entry 5 has no whole-number step: None")
    ]


def test_whole_file_facts_go_to_info():
    info = hf_trainer_state.parse(STATE).info
    assert info == {
        "best_model_checkpoint": "/home/someone/out/checkpoint-20",
        "best_metric": 0.5,
        "global_step": 30,
        "max_steps": 30,
        "num_train_epochs": 1,
        "eval_steps": 10,
        "save_steps": 10,
        "logging_steps": 10,
        "metric_for_best_model": "eval_loss",
        "epoch": 1.0,
        "best_checkpoint_step": 20,
    }


def test_a_half_written_state_is_reported_and_not_consumed():
    result = hf_trainer_state.parse(STATE[:300])
    assert result.consumed == 0 and len(result.points) == 0
    assert result.bad[0].reason.startswith("invalid JSON (incomplete write?)")
    assert hf_trainer_state.parse(b"").bad[0].line == 1
    assert hf_trainer_state.parse(b"{\n").bad[0].line == 2
    assert hf_trainer_state.parse(b'{"a": \xff}').bad[0].reason.startswith("non-UTF-8")
    assert hf_trainer_state.parse(b'{"global_step": 3}').bad[0].reason.endswith("no log_history list")


def test_status_and_run_config_are_info_only():
    doc = {"status": "running", "step": 5, "total_steps": 10, "pid": 1, "host": "h", "updated_at": 1.0}
    result = status.parse(json.dumps(doc).encode())
    assert status.FORMAT.whole_document and result.info == doc and len(result.points) == 0
    assert run_config.FORMAT.whole_document and checkpoint_marker.FORMAT.whole_document
    assert result.consumed == len(json.dumps(doc))
    config = {"config": {"trainer": {"total_epochs": 2}}, "versions": {"verl": "0.9.1"}}
    assert run_config.parse(json.dumps(config).encode()).info == config
    for bad in (b"", b'{"status": "run', b"[1]", b"\xff"):
        result = status.parse(bad)
        assert result.consumed == 0 and result.info == {} and len(result.bad) == 1
        assert result.bad[0].reason.startswith("status.json:")


def test_checkpoint_marker():
    assert checkpoint_marker.parse(b"120\n").info == {"latest_checkpointed_iteration": 120}
    for bad in (b"", b"abc", b"\xb2"):
        result = checkpoint_marker.parse(bad)
        assert result.consumed == 0 and result.bad and result.info == {}


def test_every_format_has_a_parser():
    from collector import formats

    for fmt in formats.names():
        assert callable(parser_for(fmt)) and formats.get(fmt).name == fmt


# What the garbage fuzz (test_parsers_garbage) damages for this format.
FUZZ = {
    "hf_trainer_state": FuzzSample(
        b'{"global_step": 2, "log_history": [{"step": 1, "loss": NaN}, {"step": 2, "eval_loss": 1}]}'
    ),
    "status": FuzzSample(b'{"status": "running", "step": 3}'),
    "run_config": FuzzSample(b'{"config": {"a": 1}}'),
    "checkpoint_marker": FuzzSample(b"12\n"),
}
