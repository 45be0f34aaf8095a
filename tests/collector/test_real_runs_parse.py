"""Every real trainer_state.json in ../shared/real-runs parses with exactly the points it holds.

The expected count is computed here independently of the parser: the stdlib json module (which reads bare
NaN) and a count of the numeric values of each log_history entry other than `step`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from collector.formats import hf_trainer_state
from collector.formats.discover import classify
from tests.conftest import REAL_RUNS

REAL_FILES = sorted(REAL_RUNS.glob("*.json"))

# Counted once with the rule of `numeric_values` (a separate script) and pinned, so a change in the files or in the counting rule is noticed.
EXPECTED_POINTS = {
    "ChenguangYang96UCR__KG-LLM__outputs.json": 486,
    "CoralReefFish__whisper-tiny-nbaiLab__root.json": 6606,
    "Dheena731__tinyLlama-finetune__root.json": 1214,
    "Miguel-Alessio__qwen-chess-lora__logs.json": 9600,
    "Rishikarpe__LoRA-Fine-Tuning__outputs-checkpoint-1000.json": 400,
    "akanksha28pathak__SmolVLM_EndoscopyQA__root.json": 450,
    "anthonyrathe__fixed-whisperv2-flemish__root.json": 546,
    "pranavkumaarofficial__nlcli-wizard__outputs-checkpoint-255.json": 125,
    "srinath-manda__IITD_Feb26_AAIPL__outputs-checkpoint-500.json": 1250,
    "yongshuaiy__LLMs-final__output-checkpoint-669.json": 329,
}


def numeric_values(path: Path) -> list[tuple[int, str, float]]:
    history = json.loads(path.read_text())["log_history"]
    return [
        (entry["step"], key, float(value))
        for entry in history
        for key, value in entry.items()
        if key != "step" and isinstance(value, int | float)
    ]


def test_the_real_runs_are_all_there():
    assert sorted(p.name for p in REAL_FILES) == sorted(EXPECTED_POINTS)


@pytest.mark.parametrize("path", REAL_FILES, ids=lambda p: p.stem)
def test_real_trainer_state_parses_with_every_point(path):
    assert classify(path) == "hf_trainer_state"
    result = hf_trainer_state.parse(path.read_bytes())
    expected = numeric_values(path)
    assert len(result.points) == len(expected) == EXPECTED_POINTS[path.name]
    got = list(zip(result.points.step, result.points.metric, result.points.value, strict=True))
    assert [(s, m) for s, m, _ in got] == [(s, m) for s, m, _ in expected]
    assert all(
        a == b or (math.isnan(a) and math.isnan(b))
        for (_, _, a), (_, _, b) in zip(got, expected, strict=True)
    )
    assert (
        result.bad == [] and hf_trainer_state.FORMAT.whole_document and result.consumed == path.stat().st_size
    )
    state = json.loads(path.read_text())
    assert result.info["global_step"] == state["global_step"]
    assert result.info["best_model_checkpoint"] == state["best_model_checkpoint"]


def test_real_nan_grad_norms_are_kept():
    path = REAL_RUNS / "ChenguangYang96UCR__KG-LLM__outputs.json"
    result = hf_trainer_state.parse(path.read_bytes())
    nan_steps = sorted(
        s
        for s, m, v in zip(result.points.step, result.points.metric, result.points.value, strict=True)
        if m == "grad_norm" and math.isnan(v)
    )
    assert nan_steps[:3] == [1, 2, 6]


def test_best_checkpoint_step_is_read_from_a_foreign_absolute_path():
    path = REAL_RUNS / "akanksha28pathak__SmolVLM_EndoscopyQA__root.json"
    assert hf_trainer_state.parse(path.read_bytes()).info["best_checkpoint_step"] == 900
    path = REAL_RUNS / "pranavkumaarofficial__nlcli-wizard__outputs-checkpoint-255.json"
    info = hf_trainer_state.parse(path.read_bytes()).info
    assert (info["best_checkpoint_step"], info["best_global_step"]) == (200, 250)
