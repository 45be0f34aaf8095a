"""What a run leaves behind is usable by other tools: the HF checkpoint by plain transformers, the W&B
mirror by reading its offline run file back."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tests.trainer.conftest import DATA_BUILD, train_records, val_losses
from trainer.wandb_mirror import find_offline_run_files, read_offline_history

pytestmark = pytest.mark.slow


def test_huggingface_checkpoint_loads_and_generates(smoke_run_1):
    folder = smoke_run_1.out / "global_step_6" / "huggingface"
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert model.config.model_type == "qwen2"
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Write `total` that sums a list."}],
        add_generation_prompt=True,
        tokenize=False,
    )
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=12, do_sample=False)
    assert out.shape[1] > ids.shape[1]
    assert isinstance(tokenizer.decode(out[0, ids.shape[1] :]), str)
    # The trained weights are not the initial ones: the checkpoint holds the run's model.
    initial = AutoModelForCausalLM.from_pretrained(DATA_BUILD / "model")
    before = initial.state_dict()["model.embed_tokens.weight"]
    after = model.state_dict()["model.embed_tokens.weight"]
    assert not torch.equal(before, after)


def test_wandb_offline_run_holds_the_same_metrics(smoke_run_1):
    files = find_offline_run_files(smoke_run_1.out)
    assert len(files) == 1, f"expected one offline wandb run under {smoke_run_1.out / 'wandb'}"
    rows = read_offline_history(files[0])
    by_step_loss = {row["_step"]: row["train/loss"] for row in rows if "train/loss" in row}
    expected = {step: data["train/loss"] for step, data in train_records(smoke_run_1.out).items()}
    assert by_step_loss == pytest.approx(expected)
    val = {row["_step"]: row["val/loss"] for row in rows if "val/loss" in row}
    assert val == pytest.approx(val_losses(smoke_run_1.out))
    assert all(math.isfinite(v) for v in by_step_loss.values())
