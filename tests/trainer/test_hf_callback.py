"""`trainer.hf.RunwatchCallback` on a real `transformers.Trainer` run of the tiny local model, watched by a real
collector: the run shows up as running (status.json, run.json), `runwatch stop` asks it to stop through that
collector, and the run saves a checkpoint of the step, stops there and is `stopped` in the collector."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainerCallback, TrainingArguments

from tests.collector.test_daemon_support import Daemon, wait_for
from tests.trainer.conftest import DATA_BUILD, REPO
from trainer.hf import RunwatchCallback

pytestmark = pytest.mark.slow

ASK_AT_STEP = 3
MAX_STEPS = 40
RUN = "hf-run"


class Rows(torch.utils.data.Dataset):
    def __init__(self, tokenizer) -> None:
        texts = [f"def f{i}(x):\n    return x + {i}\n" for i in range(64)]
        self.enc = tokenizer(texts, padding="max_length", truncation=True, max_length=32, return_tensors="pt")

    def __len__(self) -> int:
        return self.enc["input_ids"].shape[0]

    def __getitem__(self, i: int) -> dict:
        ids = self.enc["input_ids"][i]
        return {"input_ids": ids, "attention_mask": self.enc["attention_mask"][i], "labels": ids.clone()}


class PersonAsksToStop(TrainerCallback):
    """At one step, waits until the collector lists the run as running, then runs `runwatch stop` against it."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.seen: dict = {}

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step != ASK_AT_STEP:
            return
        client = self.daemon.client()
        self.seen = wait_for(
            lambda: next(
                (r for r in client.get("/api/runs") if r["id"] == RUN and r["status"] == "running"), None
            ),
            "the collector to list the run as running",
        )
        client.close()
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "runwatch",
                "stop",
                RUN,
                "--db",
                str(self.daemon.db),
                "--reason",
                "loss diverged (test)",
                "--json",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["written"] is True


def test_runwatch_callback_runs_and_stops_a_real_hf_trainer(built_data, tmp_path, capsys):
    root = tmp_path / "runs"
    out_dir = root / RUN
    out_dir.mkdir(parents=True)
    daemon = Daemon(tmp_path / "runwatch.duckdb", [root]).start()
    try:
        tokenizer = AutoTokenizer.from_pretrained(DATA_BUILD / "tokenizer")
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        args = TrainingArguments(
            output_dir=str(out_dir),
            max_steps=MAX_STEPS,
            per_device_train_batch_size=4,
            learning_rate=1e-3,
            warmup_ratio=0.1,
            logging_steps=1,
            save_strategy="no",  # only the stop saves
            report_to="tensorboard",  # the run's live metrics, read by the collector
            use_cpu=True,
            disable_tqdm=True,
        )
        asker = PersonAsksToStop(daemon)
        trainer = Trainer(
            model=AutoModelForCausalLM.from_pretrained(DATA_BUILD / "model"),
            args=args,
            train_dataset=Rows(tokenizer),
            callbacks=[asker, RunwatchCallback()],
        )
        trainer.train()

        assert asker.seen["total_steps"] == MAX_STEPS
        assert trainer.state.global_step == ASK_AT_STEP
        saved = out_dir / f"checkpoint-{ASK_AT_STEP}"
        assert AutoModelForCausalLM.from_pretrained(saved).config.model_type == "qwen2"
        assert sorted(p.name for p in out_dir.glob("checkpoint-*")) == [saved.name]
        status = json.loads((out_dir / "status.json").read_text())
        assert (status["state"], status["step"], status["stop_reason"]) == (
            "stopped",
            ASK_AT_STEP,
            "loss diverged (test)",
        )
        assert status["last_checkpoint_step"] == ASK_AT_STEP
        run_json = json.loads((out_dir / "run.json").read_text())
        assert (run_json["trainer"], run_json["total_steps"], run_json["warmup_steps"]) == (
            "hf_trainer",
            MAX_STEPS,
            4,  # warmup_ratio 0.1 of 40 steps
        )
        assert run_json["config"]["learning_rate"] == 1e-3
        assert f"asked to stop at step {ASK_AT_STEP}: loss diverged (test)" in capsys.readouterr().out

        client = daemon.client()
        run = wait_for(
            lambda: next(
                (r for r in client.get("/api/runs") if r["id"] == RUN and r["status"] == "stopped"), None
            ),
            "the collector to see the run stopped",
        )
        assert run["last_step"] == ASK_AT_STEP
        checkpoints = client.get(f"/api/runs/{RUN}/checkpoints")
        assert [c["step"] for c in checkpoints["checkpoints"]] == [ASK_AT_STEP]
        # the run's config is what run.json and checkpoint-3/trainer_state.json say together: run.json's
        # vocabulary size (what loss_above_uniform needs) is not replaced by the trainer state's fields
        config = client.get(f"/api/runs/{RUN}")["config"]
        assert (config["vocab_size"], config["trainer"], config["global_step"]) == (
            512,
            "hf_trainer",
            ASK_AT_STEP,
        )
        client.close()
    finally:
        daemon.stop()


CRASHING_SCRIPT = """
import sys
sys.path.insert(0, {repo!r})
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainerCallback, TrainingArguments
from tests.trainer.test_hf_callback import Rows
from trainer.hf import RunwatchCallback

class Crash(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 2:
            raise RuntimeError("CUDA out of memory (test)")

tokenizer = AutoTokenizer.from_pretrained({data!r} + "/tokenizer")
tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
args = TrainingArguments(output_dir={out!r}, max_steps=40, per_device_train_batch_size=4, logging_steps=1,
                         save_strategy="no", report_to="none", use_cpu=True, disable_tqdm=True)
model = AutoModelForCausalLM.from_pretrained({data!r} + "/model")
Trainer(model=model, args=args, train_dataset=Rows(tokenizer), callbacks=[RunwatchCallback(), Crash()]).train()
"""


def test_a_script_that_dies_records_failed_with_its_error(built_data, tmp_path):
    out = tmp_path / "crash-run"
    script = tmp_path / "train.py"
    script.write_text(CRASHING_SCRIPT.format(repo=str(REPO), data=str(DATA_BUILD), out=str(out)))
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 1 and "CUDA out of memory (test)" in proc.stderr  # the traceback still prints
    status = json.loads((out / "status.json").read_text())
    assert (status["state"], status["step"]) == ("failed", 2)
    assert status["error"].startswith("RuntimeError: CUDA out of memory (test)\n")
    check = subprocess.run(
        [sys.executable, "-m", "runwatch", "check", str(out), "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    (verdict,) = json.loads(check.stdout)["runs"]
    assert verdict["status"] == "failed"
