"""GRPO presets for verl 0.9.1's PPO trainer (`verl.trainer.main_ppo`) on CPU. Pure data, no I/O.

The task is small sums (`data/rl_tasks.py`), scored by `trainer/rl_reward.py`; the policy starts from the tiny
model warm-started on some sums (`data/build/rl_model`). Rollouts come from our `hf` rollout
(`trainer/hf_rollout.py`): verl's own rollout servers (vLLM, SGLang, TensorRT-LLM) need GPUs.

- `grpo`: a healthy run: reward and validation accuracy rise, KL to the reference grows slowly.
- `grpo_collapse`: the reward function is switched off for real after step 10 (every score 0 from then on).
- `grpo_kl`: the learning rate is boosted 100x for steps 12-14: the policy jumps away from the reference.
- `grpo_truncate`: max response length 1 token, too short for any answer plus its end-of-turn token:
  every response is clipped (`response_length/clip_ratio` 1.0).
- `grpo_smoke`: a handful of steps for tests.
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
    "actor_rollout_ref.actor.optim.lr": 2e-3,
    "actor_rollout_ref.actor.ppo_mini_batch_size": 8,  # one update per step
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 64,
    "actor_rollout_ref.actor.use_kl_loss": "true",
    "actor_rollout_ref.actor.kl_loss_coef": 0.01,
    "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
    "actor_rollout_ref.actor.entropy_coeff": 0,
    "actor_rollout_ref.actor.calculate_entropy": "true",
    "actor_rollout_ref.actor.checkpoint.save_contents": "[model,optimizer,extra,hf_model]",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 64,
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 64,
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
COLLAPSE_STEP = 10
SAMPLES_PER_STEP = PPO_CPU_BASE["data.train_batch_size"] * PPO_CPU_BASE["actor_rollout_ref.rollout.n"]

GRPO = _ppo(trainer__total_training_steps=GRPO_STEPS, trainer__test_freq=5, trainer__save_freq=10)
GRPO_COLLAPSE = {
    **GRPO,
    "+reward.custom_reward_function.reward_kwargs.collapse_after_step": COLLAPSE_STEP,
    "+reward.custom_reward_function.reward_kwargs.samples_per_step": SAMPLES_PER_STEP,
}
GRPO_TRUNCATE = {**GRPO, "data.max_response_length": 1}
GRPO_SMOKE = _ppo(trainer__total_training_steps=4, trainer__test_freq=2, trainer__save_freq=2)
GRPO_DEMO = _ppo(trainer__total_training_steps=150, trainer__test_freq=10, trainer__save_freq=25)

# (name, description, overrides, faults)
RL_PRESETS: list[tuple[str, str, dict[str, Any], list[dict[str, Any]]]] = [
    ("grpo", f"GRPO on small sums, {GRPO_STEPS} steps: reward and validation accuracy rise", GRPO, []),
    ("grpo_demo", "the healthy GRPO run over 150 steps (make demo-rl)", GRPO_DEMO, []),
    (
        "grpo_collapse",
        f"GRPO whose reward function returns 0 for every response after step {COLLAPSE_STEP}",
        GRPO_COLLAPSE,
        [],
    ),
    (
        "grpo_kl",
        "GRPO with the learning rate boosted 100x at steps 12-14: KL to the reference blows up",
        GRPO,
        [{"kind": "lr_spike", "step": 12, "steps": 3, "factor": 100.0}],
    ),
    (
        "grpo_truncate",
        "GRPO with a 1-token response limit: every response is clipped (response_length/clip_ratio 1.0)",
        GRPO_TRUNCATE,
        [],
    ),
    ("grpo_smoke", "four GRPO steps, validation and checkpoint every 2 (for tests)", GRPO_SMOKE, []),
]
