"""The README's Hugging Face `TrainerCallback` for stop requests, taken from the README as written, stops a
real `transformers.Trainer` run on the tiny local model and leaves a checkpoint of the step it stopped at."""

from __future__ import annotations

import re

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainerCallback, TrainingArguments

from collector.core.stop_request import write_stop_request
from tests.trainer.conftest import DATA_BUILD, REPO

pytestmark = pytest.mark.slow

ASK_AT_STEP = 3
MAX_STEPS = 40


def readme_callback() -> type:
    """The `RunwatchStop` class exactly as the README shows it."""
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    (code,) = [b for b in blocks if "class RunwatchStop(TrainerCallback)" in b]
    namespace: dict = {}
    exec(compile(code, "README.md:RunwatchStop", "exec"), namespace)
    return namespace["RunwatchStop"]


class Rows(torch.utils.data.Dataset):
    def __init__(self, tokenizer) -> None:
        texts = [f"def f{i}(x):\n    return x + {i}\n" for i in range(64)]
        self.enc = tokenizer(texts, padding="max_length", truncation=True, max_length=32, return_tensors="pt")

    def __len__(self) -> int:
        return self.enc["input_ids"].shape[0]

    def __getitem__(self, i: int) -> dict:
        ids = self.enc["input_ids"][i]
        return {"input_ids": ids, "attention_mask": self.enc["attention_mask"][i], "labels": ids.clone()}


class AskToStop(TrainerCallback):
    """Stands in for the collector: writes the stop request at one step, as `python -m collector stop` does."""

    def __init__(self, run_dir) -> None:
        self.run_dir = run_dir

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == ASK_AT_STEP:
            write_stop_request(self.run_dir, "loss diverged (test)", by="person")


def test_readme_callback_stops_a_real_hf_trainer_run(built_data, tmp_path, capsys):
    tokenizer = AutoTokenizer.from_pretrained(DATA_BUILD / "tokenizer")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(DATA_BUILD / "model")
    args = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=MAX_STEPS,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",  # only the stop saves
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=Rows(tokenizer),
        callbacks=[AskToStop(tmp_path), readme_callback()(args.output_dir)],
    )
    trainer.train()
    assert trainer.state.global_step == ASK_AT_STEP
    saved = tmp_path / f"checkpoint-{ASK_AT_STEP}"
    assert (saved / "trainer_state.json").is_file()
    assert AutoModelForCausalLM.from_pretrained(saved).config.model_type == "qwen2"
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == [saved.name]
    assert f"runwatch asked to stop at step {ASK_AT_STEP}: loss diverged (test)" in capsys.readouterr().out
