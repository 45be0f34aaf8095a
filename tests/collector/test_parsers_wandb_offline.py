"""W&B offline run files: a real one written by wandb (offline, in a subprocess), read whole and as it grows."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from collector.formats import wandb_offline
from tests.collector.test_parsers_support import FuzzSample, comparable, points_as_tuples

WRITER = textwrap.dedent(
    """
    import sys, wandb
    run = wandb.init(project="demo", dir=sys.argv[1], config={"lr": 1e-4, "model": {"name": "tiny"}})
    for step in range(40):
        run.log({"train/loss": 2.0 - step * 0.01, "train/lr": 1e-4, "nested": {"a": step}, "note": "x"}, step=step)
    run.log({"val/loss": float("nan")}, step=39)
    run.finish(exit_code=int(sys.argv[2]))
    """
)


@pytest.fixture(scope="module")
def offline_file(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wandb")
    env = os.environ | {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    subprocess.run([sys.executable, "-c", WRITER, str(out), "3"], env=env, check=True, timeout=120)
    (found,) = out.glob("wandb/offline-run-*/run-*.wandb")
    return found


def test_history_records_become_points_with_their_step_and_wall_time(offline_file):
    result = wandb_offline.parse(offline_file.read_bytes())
    assert result.bad == [] and result.consumed == offline_file.stat().st_size
    loss = [(s, v) for s, n, v, _ in points_as_tuples(result) if n == "train/loss"]
    assert loss == [(s, 2.0 - s * 0.01) for s in range(40)]
    assert {n for n in result.points.metric} == {"train/loss", "train/lr", "nested/a", "val/loss"}
    val = [(s, v) for s, n, v, _ in points_as_tuples(result) if n == "val/loss"]
    assert len(val) == 1 and val[0][0] == 39 and math.isnan(val[0][1])
    assert all(w is not None and w > 1.7e9 for w in result.points.wall_time)
    assert result.info["config"] == {"lr": 1e-4, "model": {"name": "tiny"}}
    assert result.info["exit_code"] == 3 and result.info["project"] == "demo"
    info = wandb_offline.run_info(result.info)
    assert info.status == "failed" and info.status_info == {"exit_code": 3}


def test_read_as_it_grows_equals_one_read(offline_file):
    data = offline_file.read_bytes()
    whole = comparable(points_as_tuples(wandb_offline.parse(data)))
    for cut in range(0, len(data) + 1, 97):
        rows, offset, chunk, state = [], 0, 1, None
        for end in (cut, len(data)):
            result = wandb_offline.parse(data[offset:end], chunk, state=state)
            assert result.bad == []
            rows += points_as_tuples(result)
            offset, chunk, state = offset + result.consumed, chunk + result.lines, result.state
        assert offset == len(data) and comparable(rows) == whole, cut


def test_a_file_that_is_not_a_wandb_file_is_one_bad_record():
    result = wandb_offline.parse(b"version https://git-lfs.github.com/spec/v1\n" + b"x" * 100)
    assert len(result.bad) == 1 and "not a W&B run file" in result.bad[0].reason and result.consumed == 0
    assert wandb_offline.sniff(b":W&B\xe1\xbe\x00") and not wandb_offline.sniff(b"{}")


# The Hugging Face Trainer's W&B callback: `define_metric("*", step_metric="train/global_step")`, one `log` call
# per log (its `_step` counts calls: 0, 1, 2 ...), evaluations in calls of their own at the same global step, and
# a last call with only the step (as yerinNam/Your-Military-Expert-... wandb/run-20240804_231327-uojy8xhg and
# wisdom-pan/ChatGLM-LoRA wandb/offline-run-20230714_143806-gpiov4nv log them: steps 30..804 and 100..1790).
HF_WRITER = textwrap.dedent(
    """
    import sys, wandb
    run = wandb.init(project="hf", dir=sys.argv[1])
    run.define_metric("train/global_step")
    run.define_metric("*", step_metric="train/global_step", step_sync=True)
    for step in range(30, 301, 30):
        run.log({"train/loss": 3.0 - step / 200, "train/global_step": step})
        if step % 150 == 0:
            run.log({"eval/loss": 2.0 - step / 1000, "train/global_step": step})
    run.log({"train/epoch": 3.0})
    run.finish()
    """
)


def test_a_step_metric_defined_for_every_key_is_the_step_axis(tmp_path):
    env = os.environ | {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    subprocess.run([sys.executable, "-c", HF_WRITER, str(tmp_path)], env=env, check=True, timeout=120)
    (found,) = tmp_path.glob("wandb/offline-run-*/run-*.wandb")
    data = found.read_bytes()
    result = wandb_offline.parse(data)
    points = points_as_tuples(result)
    assert [(s, v) for s, n, v, _ in points if n == "train/loss"] == [
        (s, 3.0 - s / 200) for s in range(30, 301, 30)
    ]
    assert [(s, v) for s, n, v, _ in points if n == "eval/loss"] == [(150, 1.85), (300, 1.7)]
    # the last call without the step metric stays at its last value; the axis itself is no point
    assert [s for s, n, _, _ in points if n == "train/epoch"] == [300]
    assert "train/global_step" not in set(result.points.metric)
    # read in pieces, the axis carries over in the parser's state
    whole = comparable(points)
    for cut in range(0, len(data) + 1, 331):
        rows, offset, chunk, state = [], 0, 1, None
        for end in (cut, len(data)):
            part = wandb_offline.parse(data[offset:end], chunk, state=state)
            rows += points_as_tuples(part)
            offset, chunk, state = offset + part.consumed, chunk + part.lines, part.state
        assert comparable(rows) == whole, cut


# A run that raises: wandb records the console output (`output_raw`) and exit code 1, as in
# NJUxlj/Travel-Agent-based-on-Qwen2-RLHF wandb/offline-run-20250408_115934-z86teftn (a DPO run's callback raising
# AttributeError at 0/138: before, "its status file says failed, with no error text"). A traceback printed and
# followed by more logging is not the error the run ended with.
CRASH_WRITER = textwrap.dedent(
    """
    import sys, traceback, wandb
    run = wandb.init(project="dpo", dir=sys.argv[1])
    try:
        raise ValueError("a warning the script printed and went on from")
    except ValueError:
        traceback.print_exc()
    run.log({"train/loss": 0.69})
    class Keys:
        pass
    print("  0%|          | 0/138 [00:00<?, ?it/s]")
    Keys().named_parameters()
    """
)


def test_a_run_that_raised_is_failed_with_the_error_its_console_output_ends_with(tmp_path):
    env = os.environ | {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    done = subprocess.run(
        [sys.executable, "-c", CRASH_WRITER, str(tmp_path)], env=env, timeout=120, capture_output=True
    )
    assert done.returncode == 1, done.stderr
    (found,) = tmp_path.glob("wandb/offline-run-*/run-*.wandb")
    data = found.read_bytes()
    info = wandb_offline.run_info(wandb_offline.parse(data, path=str(found)).info)
    error = info.status_info["error"]
    assert (info.status, info.status_info["exit_code"]) == ("failed", 1)
    assert error["text"] == "AttributeError: 'Keys' object has no attribute 'named_parameters'", error
    assert error["file"] == f"{found} (its console output)"
    # read as it grows, the error is the same
    offset, chunk, state, last = 0, 1, None, None
    for end in (len(data) // 3, 2 * len(data) // 3, len(data)):
        part = wandb_offline.parse(data[offset:end], chunk, path=str(found), state=state)
        offset, chunk, state = offset + part.consumed, chunk + part.lines, part.state
        last = part.info.get("error", last)
    assert last == error


# What the garbage fuzz (test_parsers_garbage) damages for this format.
def fuzz_sample(folder: Path) -> bytes:
    """A W&B run file framed by hand as wandb writes it: its header, then two history records, one chunk each."""
    import struct

    from wandb.proto import wandb_internal_pb2

    out = bytearray(b":W&B" + struct.pack("<HB", 0xBEE1, 0))
    for step in (1, 2):
        record = wandb_internal_pb2.Record()
        for key, value in (("_step", str(step)), ("train/loss", str(0.5 * step))):
            record.history.item.add(key=key, value_json=value)
        payload = record.SerializeToString()
        out += struct.pack("<IHB", 0, len(payload), 1) + payload
    return bytes(out)


FUZZ = {"wandb_offline": FuzzSample(fuzz_sample)}
