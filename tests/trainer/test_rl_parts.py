"""The GRPO pieces that need no training run: the reward rule, the sampler of the `hf` rollout, the rollout's
registration in verl (through the real plugin in a fresh process), the RL data, pre-flight, and
trainer/run_grpo.sh checked with --dry-run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
import torch

from data.rl_tasks import DATA_SOURCE, split_pairs
from tests.trainer.conftest import REPO
from trainer import rl_reward
from trainer.hf_rollout import sample_next
from trainer.presets import PRESETS


def test_the_reward_is_one_for_the_exact_sum_and_partial_credit_for_a_close_number():
    def score(answer: str) -> float:
        return rl_reward.compute_score(DATA_SOURCE, answer, "12", {"split": "test"})

    assert score("12") == 1.0 and score(" 12<|im_end|>") == 1.0
    assert score("13") == score("11") == pytest.approx(0.45)
    assert score("7") == pytest.approx(0.25) and score("2") == 0.0 and score("30") == 0.0
    for malformed in ("12 13", "", "twelve", "-12", "1.2"):
        assert score(malformed) == 0.0, malformed


def test_the_collapse_switches_the_reward_off_after_its_step_for_training_responses_only(monkeypatch):
    monkeypatch.setattr(rl_reward, "_train_responses", 0)
    kwargs = {"collapse_after_step": 2, "samples_per_step": 3}
    scores = [rl_reward.compute_score(DATA_SOURCE, "4", "5", {"split": "train"}, **kwargs) for _ in range(9)]
    assert scores == [0.45] * 6 + [0.0] * 3  # steps 1-2 scored, step 3 on: zero
    # Validation answers are neither counted nor switched off.
    assert rl_reward.compute_score(DATA_SOURCE, "5", "5", {"split": "test"}, **kwargs) == 1.0


def test_other_data_sources_get_verls_own_rules():
    # verl's GSM8K rule reads the answer after "####".
    assert rl_reward.compute_score("openai/gsm8k", "so #### 72", "72", {"split": "test"}) == 1.0
    assert rl_reward.compute_score("openai/gsm8k", "so #### 71", "72", {"split": "test"}) == 0.0


def test_sampling_greedy_top_k_and_log_probs():
    logits = torch.tensor([0.0, 3.0, 1.0, 2.0])
    token, logprob = sample_next(logits.clone(), temperature=0.0, top_k=-1, top_p=1.0)
    assert token == 1 and logprob == pytest.approx(float(torch.log_softmax(logits, -1)[1]))
    torch.manual_seed(0)
    drawn = {sample_next(logits.clone(), temperature=1.0, top_k=2, top_p=1.0)[0] for _ in range(200)}
    assert drawn == {1, 3}  # only the two best tokens
    torch.manual_seed(0)
    drawn = {sample_next(logits.clone(), temperature=1.0, top_k=-1, top_p=0.5)[0] for _ in range(200)}
    assert drawn == {1}  # the best token alone holds more than half the mass
    _, logprob = sample_next(logits.clone(), temperature=1.0, top_k=2, top_p=1.0)
    assert logprob < 0 and torch.isfinite(torch.tensor(logprob))


PROBE = """
import json
import verl
from verl.workers.rollout.base import get_rollout_class
from verl.workers.rollout.replica import get_rollout_replica_class
import verl.utils.distributed as distributed
print(json.dumps({
    "adapter": get_rollout_class("hf", "async").__module__ + "." + get_rollout_class("hf", "async").__name__,
    "replica": get_rollout_replica_class("hf").__name__,
    "ray_group": distributed.initialize_global_process_group_ray.__module__,
}))
"""


def test_the_plugin_registers_rollout_hf_in_verl():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERL_", "RUNWATCH_"))}
    env.update(PYTHONPATH=str(REPO), CUDA_VISIBLE_DEVICES="", VERL_USE_EXTERNAL_MODULES="trainer.verl_plugin")
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found == {
        "adapter": "trainer.hf_rollout.HFServerAdapter",
        "replica": "HFReplica",
        "ray_group": "trainer.verl_plugin",
    }


def test_rl_data_is_in_verls_format_and_splits_the_sums(built_data):
    train = pq.read_table(built_data / "rl_train.parquet").to_pylist()
    val = pq.read_table(built_data / "rl_val.parquet").to_pylist()
    assert len(train) + len(val) == 100 and len(val) == 16
    row = train[0]
    assert set(row) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    assert row["data_source"] == DATA_SOURCE and row["prompt"][0]["role"] == "user"
    a, b = (int(t.rstrip("?")) for t in row["prompt"][0]["content"].split() if t.rstrip("?").isdigit())
    assert row["reward_model"] == {"style": "rule", "ground_truth": str(a + b)}
    assert {r["extra_info"]["split"] for r in train} == {"train"} and {
        r["extra_info"]["split"] for r in val
    } == {"test"}
    questions = {r["prompt"][0]["content"] for r in train}
    assert not questions & {r["prompt"][0]["content"] for r in val}
    assert split_pairs(42) == split_pairs(42) and split_pairs(42) != split_pairs(7)
    assert (built_data / "rl_model" / "model.safetensors").is_file()


def launch(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainer.launch", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_grpo_dry_run_is_verls_main_ppo_with_the_hf_rollout(built_data, tmp_path):
    proc = launch("--preset", "grpo", "--out", str(tmp_path / "run"), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    command = proc.stdout.strip()
    assert "-m verl.trainer.main_ppo " in command and "torch.distributed.run" not in command
    for part in (
        "actor_rollout_ref.rollout.name=hf",
        "algorithm.adv_estimator=grpo",
        f"data.train_files={built_data / 'rl_train.parquet'}",
        f"actor_rollout_ref.model.path={built_data / 'rl_model'}",
        f"reward.custom_reward_function.path={REPO / 'trainer' / 'rl_reward.py'}",
        "+ray_kwargs.ray_init.num_gpus=1",
        f"trainer.default_local_dir={tmp_path / 'run'}",
    ):
        assert part in command, part


def test_grpo_preflight_names_a_data_set_without_rl_columns(built_data, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "rl_train.parquet").symlink_to(built_data / "sft_train.parquet")  # SFT rows: no `prompt`
    (data / "rl_val.parquet").symlink_to(built_data / "rl_val.parquet")
    proc = launch("--preset", "grpo", "--out", str(tmp_path / "run"), "--data", str(data), "--dry-run")
    assert proc.returncode == 2
    assert "rl_train.parquet lacks verl's RL columns prompt, data_source, reward_model" in proc.stderr
    assert not (tmp_path / "run" / "status.json").exists()


def test_run_grpo_sh_dry_run_uses_vllm_on_gpus(built_data, tmp_path):
    env = {**os.environ, "MODEL_PATH": str(built_data / "rl_model"), "PYTHON": sys.executable}
    script = REPO / "trainer" / "run_grpo.sh"
    # The small sums hold 84 prompts: a GPU batch of 256 is refused before anything starts.
    proc = subprocess.run(
        [str(script), "--dry-run", "8", str(tmp_path / "run")], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 2 and "holds no full batch of data.train_batch_size=256" in proc.stderr
    proc = subprocess.run(
        [
            str(script),
            "--dry-run",
            "8",
            str(tmp_path / "run"),
            "data.train_batch_size=64",
            "actor_rollout_ref.rollout.n=4",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    command = proc.stdout.strip()
    for part in (
        "-m verl.trainer.main_ppo ",
        "actor_rollout_ref.rollout.name=vllm",
        "trainer.device=cuda",
        "trainer.n_gpus_per_node=8",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
        f"actor_rollout_ref.model.path={built_data / 'rl_model'}",
        "data.train_batch_size=64",
    ):
        assert part in command, part
    assert "ray_init.num_gpus" not in command  # real GPUs: Ray finds them itself
    assert not PRESETS["grpo_gpu"].cpu
    usage = subprocess.run([str(script)], env=env, capture_output=True, text=True)
    assert usage.returncode == 2 and "usage:" in usage.stderr


def test_grpo_preflight_checks_micro_batches_against_samples_per_process(built_data, tmp_path):
    # 8 prompts x 8 samples over 3 processes: no micro batch divides that; verl would assert after start-up.
    proc = launch("--preset", "grpo", "--out", str(tmp_path / "run"), "--nproc", "3", "--dry-run")
    assert proc.returncode == 2
    assert "must be multiples of --nproc 3" in proc.stderr
    proc = launch(
        "--preset", "grpo", "--out", str(tmp_path / "run"), "--dry-run",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=48",
    )  # fmt: skip
    assert proc.returncode == 2
    assert "ppo_micro_batch_size_per_gpu=48 must divide the 64 samples each process gets" in proc.stderr
