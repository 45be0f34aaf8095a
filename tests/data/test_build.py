"""`python -m data.build`: offline, deterministic, and in the shapes verl and transformers expect."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from data.build import build
from data.conversations import make_conversations, split_train_val
from tests.conftest import DATA_BUILD, REPO


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def two_builds(tmp_path_factory):
    a, b = tmp_path_factory.mktemp("a"), tmp_path_factory.mktemp("b")
    return build(a, rows=400, seed=7, vocab_size=384), a, b, build(b, rows=400, seed=7, vocab_size=384)


def test_same_seed_gives_the_same_bytes(two_builds):
    _, a, b, _ = two_builds
    for name in (
        "sft_train.parquet",
        "sft_val.parquet",
        "tokenizer/tokenizer.json",
        "model/model.safetensors",
    ):
        assert digest(a / name) == digest(b / name), name


def test_another_seed_gives_other_data(two_builds, tmp_path):
    _, a, _, _ = two_builds
    build(tmp_path, rows=400, seed=8, vocab_size=384)
    assert digest(tmp_path / "sft_train.parquet") != digest(a / "sft_train.parquet")


def test_layout_and_done_marker(two_builds):
    summary, a, _, _ = two_builds
    assert (a / ".done").is_file()
    assert summary["train_rows"] == 392 and summary["val_rows"] == 8  # 98/2
    for sub in ("tokenizer", "model"):
        assert (a / sub / "tokenizer.json").is_file() and (a / sub / "chat_template.jinja").is_file()
    assert (a / "model" / "config.json").is_file()


def test_messages_column_holds_chat_turns(two_builds):
    _, a, _, _ = two_builds
    table = pq.read_table(a / "sft_train.parquet")
    assert table.column_names == ["messages"]
    for conversation in table.column("messages").to_pylist()[:50]:
        roles = [m["role"] for m in conversation]
        assert roles[:3] == ["system", "user", "assistant"] and roles[-1] == "assistant"
        assert len(roles) in (3, 5) and all(m["content"] for m in conversation)


def test_split_is_disjoint_and_complete():
    rows = make_conversations(500, seed=3)
    train, val = split_train_val(rows, 0.02, seed=3)
    assert len(val) == 10 and len(train) == 490
    as_text = [json.dumps(r) for r in rows]
    assert sorted(json.dumps(r) for r in train + val) == sorted(as_text)


def test_tokenizer_has_chatml_and_model_is_tiny_qwen2(two_builds):
    summary, a, _, _ = two_builds
    tokenizer = AutoTokenizer.from_pretrained(a / "model")
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "def f(): pass"}], tokenize=False
    )
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\ndef f(): pass<|im_end|>\n"
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    ids = tokenizer("def total(xs):\n    return sum(xs)").input_ids
    assert tokenizer.decode(ids) == "def total(xs):\n    return sum(xs)"
    model = AutoModelForCausalLM.from_pretrained(a / "model")
    assert model.config.model_type == "qwen2" and model.config.vocab_size == len(tokenizer)
    assert 10_000 <= summary["parameters"] <= 1_000_000


def test_the_checkout_build_is_the_default_one():
    # `make data` builds data/build with the defaults; the trainer tests run on it.
    summary = json.loads((DATA_BUILD / "build.json").read_text())
    assert (DATA_BUILD / ".done").is_file()
    assert summary["rows"] == 4000 and summary["train_rows"] == 3920 and summary["val_rows"] == 80
    assert summary["vocab_size"] == 512 and 100_000 <= summary["parameters"] <= 200_000


def test_command_line_rejects_too_few_rows(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "data.build", "--out", str(tmp_path), "--rows", "10"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "--rows 10 is too small" in proc.stderr
    assert not (tmp_path / ".done").exists()
