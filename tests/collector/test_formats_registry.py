"""The format registry: one descriptor per module, recognition by name and content, run facts per format."""

from __future__ import annotations

import importlib
import json
from pathlib import PurePath

from collector import formats
from collector.core.model import RunInfo
from collector.formats import discover


def test_every_listed_module_declares_one_format_with_its_own_parser():
    seen = set()
    for module_name in formats.MODULES:
        module = importlib.import_module(f"collector.formats.{module_name}")
        fmt = module.FORMAT
        assert fmt.parse is module.parse and fmt.name not in seen and fmt.role in ("metrics", "meta")
        assert formats.get(fmt.name) is fmt
        seen.add(fmt.name)
    assert set(formats.names()) == seen


def test_names_alone_decide_without_reading_and_sniffed_names_need_the_content(tmp_path):
    for name, fmt in [
        ("status.json", "status"),
        ("run.json", "run_config"),
        ("trainer_state.json", "hf_trainer_state"),
        ("latest_checkpointed_iteration.txt", "checkpoint_marker"),
        ("events.out.tfevents.1.host", "tensorboard"),
        ("train.JSONL", "jsonl"),
        ("job.out", "console"),
    ]:
        assert discover.classify(tmp_path / "absent" / name) == fmt  # never opened
    samples = {
        "a.csv": (b"step,loss\n1,2\n", "csv"),
        "b.csv": (b"name,loss\nx,2\n", None),
        "c.txt": (b"loading\nstep:3 - loss:1.5\n", "console"),
        "d.txt": (b"hello\n", None),
        "e.json": (json.dumps({"log_history": []}).encode(), "hf_trainer_state"),
        "f.json": (b"{}", None),
        "metrics.jsonl.1": (b'{"step": 1, "data": {"a": 1}}\n', "jsonl"),  # a rotated log: its base's format
        "trainer_state.json.1": (json.dumps({"log_history": []}).encode(), None),  # not a log: a stale copy
    }
    for name, (content, fmt) in samples.items():
        (tmp_path / name).write_bytes(content)
        assert discover.classify(tmp_path / name) == fmt, name


def test_a_pattern_with_a_slash_matches_the_end_of_the_path():
    path = PurePath("/runs/mlruns/0/abc/metrics/loss")
    assert formats._matches(path, "metrics/*") and formats._matches(path, "abc/metrics/*")
    assert not formats._matches(path, "params/*") and not formats._matches(PurePath("loss"), "metrics/*")


def test_each_format_says_what_its_info_means_for_the_run():
    doc = {"status": "running", "total_steps": 10, "pid": 1}
    assert formats.get("status").run_info(doc) == RunInfo(status="running", status_info=doc, total_steps=10)
    assert formats.get("status").run_info({"state": "failed"}).status == "failed"
    config = {"max_steps": 30, "lr": 1e-5}
    assert formats.get("run_config").run_info(config) == RunInfo(config_part=config, total_steps=30)
    hf = {"global_step": 5, "max_steps": 50, "best_checkpoint_step": None}
    assert formats.get("hf_trainer_state").run_info(hf) == RunInfo(config_part=hf, total_steps=50)
    marker = formats.get("checkpoint_marker")
    assert marker.run_info(marker.parse(b"120\n").info) == RunInfo(checkpoint_marker=120)
    assert all(formats.get(f).run_info is None for f in ("csv", "tensorboard"))
    # a flat JSONL says only the end it shows (the HF Trainer's summary line), never a status of its own
    assert formats.get("jsonl").run_info({"completed": True}) == RunInfo(ended="completed")
    assert formats.get("jsonl").run_info({}) == RunInfo()
    assert {f for f in formats.names() if formats.get(f).whole_document} == {
        "hf_trainer_state",
        "status",
        "run_config",
        "checkpoint_marker",
        "platform_status",
        "mlflow_entry",
        "mlflow_meta",
    }


def test_binary_framings_are_not_newline_records():
    assert {f for f in formats.names() if not formats.get(f).lines} == {
        "tensorboard",
        "hf_tensorboard",
        "wandb_offline",
    }
