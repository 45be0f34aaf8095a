"""GRPO presets for verl 0.9.1's PPO trainer (`verl.trainer.main_ppo`) on CPU. Pure data, no I/O.

The task is small sums (`data/rl_tasks.py`), scored by `trainer/rl_reward.py`; the policy starts from the tiny
model warm-started on some sums (`data/build/rl_model`). Rollouts come from our `hf` rollout
(`trainer/hf_rollout.py`): verl's own rollout servers (vLLM, SGLang, TensorRT-LLM) are not installed (GPU builds).

- `grpo`: a healthy run: the policy sharpens toward its best answers (mean reward from about 0.27 to 0.3-0.45,
  entropy from 0.75 to about 0.2, KL to the reference about 0.1-0.2); greedy validation accuracy stays at the
  warm start's 0.38 (the tiny model learns no new sums in minutes).
- `grpo_collapse`: the reward function is switched off for real after step 10 (every score 0 from then on).
- `grpo_kl`: the learning rate is boosted 100x for steps 8-10: the policy jumps away from the reference.
- `grpo_truncate`: max response length 1 token, too short for any answer plus its end-of-turn token:
  every response is clipped (`response_length/clip_ratio` 1.0).
- `grpo_smoke`: a handful of steps for tests.
- `grpo_gpu`: GRPO on GPUs with verl's vLLM rollout and a real model (`trainer/run_grpo.sh`).
"""

from __future__ import annotations

from typing import Any

# verl's Hydra keys for main_ppo (`+` adds a key its config does not declare). Paths, process counts and the run
# folder are added by the launcher.
PPO_CPU_BASE: dict[str, Any] = {
    "trainer.use_v1": "false",  # the v1 trainer needs the `transfer_queue` package; the classic one does not
    "algorithm.adv_estimator": "grpo",
    "algorithm.use_kl_in_reward": "false",
    "data.train_batch_size": 8,
    "data.max_prompt_length": 32,
    "data.max_response_length": 8,
    "data.dataloader_num_workers": 0,
    "data.shuffle": "true",
    "data.seed": 42,
    "actor_rollout_ref.model.use_remove_padding": "false",
    "actor_rollout_ref.model.enable_gradient_checkpointing": "false",
    "+actor_rollout_ref.model.override_config.attn_implementation": "sdpa",
    "actor_rollout_ref.actor.strategy": "fsdp2",
    "actor_rollout_ref.actor.fsdp_config.strategy": "fsdp2",
    "actor_rollout_ref.actor.fsdp_config.dtype": "float32",  # about 4x faster than bf16 on CPU
    "actor_rollout_ref.actor.fsdp_config.use_torch_compile": "false",
    "actor_rollout_ref.actor.use_torch_compile": "false",
    "actor_rollout_ref.ref.strategy": "fsdp2",
    "actor_rollout_ref.ref.fsdp_config.strategy": "fsdp2",
    "actor_rollout_ref.ref.fsdp_config.dtype": "float32",
    "actor_rollout_ref.ref.fsdp_config.use_torch_compile": "false",
    # 2e-3 collapses the policy's entropy within 5 steps; 5e-4 lets it fall gradually.
    "actor_rollout_ref.actor.optim.lr": 5e-4,
    "actor_rollout_ref.actor.ppo_mini_batch_size": 8,  # one update per step
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 32,
    "actor_rollout_ref.actor.use_kl_loss": "true",
    "actor_rollout_ref.actor.kl_loss_coef": 0.01,
    "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
    "actor_rollout_ref.actor.entropy_coeff": 0,
    "actor_rollout_ref.actor.calculate_entropy": "true",
    "actor_rollout_ref.actor.checkpoint.save_contents": "[model,optimizer,extra,hf_model]",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 32,
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 32,
    "actor_rollout_ref.rollout.name": "hf",
    "actor_rollout_ref.rollout.n": 8,
    "actor_rollout_ref.rollout.temperature": 1.0,
    "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,
    "actor_rollout_ref.rollout.free_cache_engine": "false",
    "actor_rollout_ref.rollout.agent.num_workers": 1,
    # One reward worker: `grpo_collapse` counts the responses it scored (trainer/rl_reward.py).
    "reward.num_workers": 1,
    "reward.custom_reward_function.name": "compute_score",
    "trainer.device": "cpu",
    "trainer.logger": "[console]",
    "trainer.val_before_train": "true",
    "trainer.total_epochs": 100,
    "trainer.resume_mode": "auto",
    "trainer.project_name": "runwatch",
    "ray_kwargs.ray_init.num_cpus": 8,  # logical: every actor verl starts asks for one
    "+ray_kwargs.ray_init.include_dashboard": "false",
}


def _ppo(**changes: Any) -> dict[str, Any]:
    merged = dict(PPO_CPU_BASE)
    for key, value in changes.items():
        merged[key.replace("__", ".")] = value
    return merged


GRPO_STEPS = 30
# The collector's reward_collapse rule wants a 10-point rolling median 5 noise sigmas below its best for 20
# points, the noise measured over the last 100 points: it fires once the zeros outnumber the rewards (~step 50).
COLLAPSE_STEP = 10
COLLAPSE_STEPS = 60
KL_BOOST_STEP = 8
SAMPLES_PER_STEP = PPO_CPU_BASE["data.train_batch_size"] * PPO_CPU_BASE["actor_rollout_ref.rollout.n"]

GRPO = _ppo(trainer__total_training_steps=GRPO_STEPS, trainer__test_freq=5, trainer__save_freq=10)
GRPO_COLLAPSE = {
    **GRPO,
    "trainer.total_training_steps": COLLAPSE_STEPS,
    "trainer.test_freq": 6,
    "trainer.save_freq": 12,
    "+reward.custom_reward_function.reward_kwargs.collapse_after_step": COLLAPSE_STEP,
    "+reward.custom_reward_function.reward_kwargs.samples_per_step": SAMPLES_PER_STEP,
}
GRPO_KL = _ppo(trainer__total_training_steps=14, trainer__test_freq=7, trainer__save_freq=7)
GRPO_TRUNCATE = _ppo(
    trainer__total_training_steps=10, trainer__test_freq=5, trainer__save_freq=5, data__max_response_length=1
)
GRPO_SMOKE = _ppo(trainer__total_training_steps=4, trainer__test_freq=2, trainer__save_freq=2)
GRPO_DEMO = _ppo(trainer__total_training_steps=150, trainer__test_freq=10, trainer__save_freq=25)

# GRPO on GPUs (trainer/run_grpo.sh): verl's vLLM rollout, a real model, verl's GSM8K-style GRPO recipe.
PPO_GPU_BASE: dict[str, Any] = {
    "trainer.use_v1": "false",
    "algorithm.adv_estimator": "grpo",
    "algorithm.use_kl_in_reward": "false",
    "data.train_batch_size": 256,
    "data.max_prompt_length": 512,
    "data.max_response_length": 1024,
    "data.filter_overlong_prompts": "true",
    "data.truncation": "error",
    "actor_rollout_ref.model.use_remove_padding": "true",
    "actor_rollout_ref.model.enable_gradient_checkpointing": "true",
    "actor_rollout_ref.actor.strategy": "fsdp2",
    "actor_rollout_ref.actor.fsdp_config.strategy": "fsdp2",
    "actor_rollout_ref.ref.strategy": "fsdp2",
    "actor_rollout_ref.ref.fsdp_config.strategy": "fsdp2",
    "actor_rollout_ref.ref.fsdp_config.param_offload": "true",
    "actor_rollout_ref.actor.optim.lr": 1e-6,
    "actor_rollout_ref.actor.ppo_mini_batch_size": 64,
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 8,
    "actor_rollout_ref.actor.use_kl_loss": "true",
    "actor_rollout_ref.actor.kl_loss_coef": 0.001,
    "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
    "actor_rollout_ref.actor.entropy_coeff": 0,
    "actor_rollout_ref.actor.calculate_entropy": "true",
    "actor_rollout_ref.actor.checkpoint.save_contents": "[model,optimizer,extra,hf_model]",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 16,
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 16,
    "actor_rollout_ref.rollout.name": "vllm",
    "actor_rollout_ref.rollout.n": 5,
    "actor_rollout_ref.rollout.tensor_model_parallel_size": 2,
    "actor_rollout_ref.rollout.gpu_memory_utilization": 0.6,
    "reward.custom_reward_function.name": "compute_score",
    "trainer.device": "cuda",
    "trainer.logger": "[console]",
    "trainer.val_before_train": "true",
    "trainer.total_epochs": 15,
    "trainer.save_freq": 20,
    "trainer.test_freq": 5,
    "trainer.max_actor_ckpt_to_keep": 5,
    "trainer.resume_mode": "auto",
    "trainer.project_name": "runwatch",
}

# (name, description, overrides, faults)
RL_PRESETS: list[tuple[str, str, dict[str, Any], list[dict[str, Any]]]] = [
    ("grpo", f"healthy GRPO on small sums, {GRPO_STEPS} steps: reward up, entropy down, KL small", GRPO, []),
    ("grpo_demo", "the healthy GRPO run over 150 steps (make demo-rl)", GRPO_DEMO, []),
    (
        "grpo_collapse",
        f"GRPO whose reward function returns 0 for every response after step {COLLAPSE_STEP}",
        GRPO_COLLAPSE,
        [],
    ),
    (
        "grpo_kl",
        f"GRPO with the learning rate boosted 100x for steps {KL_BOOST_STEP}-{KL_BOOST_STEP + 2}: KL to the "
        "reference blows up",
        GRPO_KL,
        [{"kind": "lr_spike", "step": KL_BOOST_STEP, "steps": 3, "factor": 100.0}],
    ),
    (
        "grpo_truncate",
        "GRPO with a 1-token response limit: every response is clipped (response_length/clip_ratio 1.0)",
        GRPO_TRUNCATE,
        [],
    ),
    ("grpo_smoke", "four GRPO steps, validation and checkpoint every 2 (for tests)", GRPO_SMOKE, []),
]
# Not a CPU preset: vLLM rollout on GPUs.
RL_GPU_PRESETS = [
    ("grpo_gpu", "GRPO on GPUs with vLLM rollout (trainer/run_grpo.sh)", dict(PPO_GPU_BASE), [])
]
