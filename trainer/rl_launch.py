"""What `trainer.launch` does differently for a GRPO preset (`Preset.trainer == "ppo"`).

verl's PPO trainer is `python -m verl.trainer.main_ppo` (Hydra config `ppo_trainer`): one driver process that
starts a local Ray cluster, whose actors are the training workers (FSDP2, gloo on CPU), the rollout servers
(`hf`, trainer/hf_rollout.py), the agent-loop and reward workers. The plugin is loaded in each of them through
`VERL_USE_EXTERNAL_MODULES`, which they inherit with the rest of the launcher's environment.
"""

from __future__ import annotations

import sys
from pathlib import Path

from trainer.preflight import _check_model, _check_writable, parquet_rows
from trainer.presets import override_value

REPO = Path(__file__).resolve().parents[1]
REWARD_FILE = REPO / "trainer" / "rl_reward.py"
RL_COLUMNS = ("prompt", "data_source", "reward_model")


def ppo_paths(out: Path, data: Path, model: Path | None, nproc: int, cpu: bool) -> dict[str, object]:
    """The launcher's own overrides for main_ppo: data, model, reward file, run folder, processes."""
    paths: dict[str, object] = {
        "data.train_files": str(data / "rl_train.parquet"),
        "data.val_files": str(data / "rl_val.parquet"),
        "actor_rollout_ref.model.path": str(model or data / "rl_model"),
        "reward.custom_reward_function.path": str(REWARD_FILE),
        "trainer.default_local_dir": str(out),
        "trainer.experiment_name": out.name,
        "trainer.n_gpus_per_node": nproc,
        "trainer.nnodes": 1,
        "hydra.run.dir": str(out / ".hydra"),
        "hydra.output_subdir": ".",
    }
    if cpu:
        # verl places one training worker per Ray "GPU": on CPU, logical slots (trainer/cpu_platform.py).
        paths["+ray_kwargs.ray_init.num_gpus"] = nproc
    return paths


def _check_rl_parquet(path: Path, role: str) -> list[str]:
    if not path.is_file():
        return [f"{role} file {path} does not exist (build it with `python -m data.build --out data/build`)"]
    try:
        import pyarrow.parquet as pq

        names = pq.read_schema(path).names
    except Exception as exc:
        return [f"{role} file {path} is not a readable parquet file ({type(exc).__name__}: {exc})"]
    missing = [c for c in RL_COLUMNS if c not in names]
    if missing:
        return [
            f"{role} file {path} lacks verl's RL columns {', '.join(missing)} (columns: {', '.join(names)})"
        ]
    return []


def _files(overrides: list[str], key: str) -> list[Path]:
    raw = override_value(overrides, key)
    if raw in (None, "null", "None", ""):
        return []
    return [Path(p.strip(" '\"")) for p in raw.strip("[]").split(",") if p.strip()]


def check_ppo_run(overrides: list[str], out: Path, nproc: int) -> tuple[list[str], int, int]:
    """Problems that would stop main_ppo minutes in, the total steps, and the train rows."""
    problems: list[str] = []
    if nproc < 1:
        problems.append(f"--nproc {nproc}: need at least one process")
    train, val = _files(overrides, "data.train_files"), _files(overrides, "data.val_files")
    for path in train:
        problems += _check_rl_parquet(path, "train")
    for path in val:
        problems += _check_rl_parquet(path, "validation")
    problems += _check_model(Path(override_value(overrides, "actor_rollout_ref.model.path")), None)
    problems += _check_writable(out)
    batch = int(override_value(overrides, "data.train_batch_size", 8))
    mini = int(override_value(overrides, "actor_rollout_ref.actor.ppo_mini_batch_size", batch))
    if batch % max(1, nproc) or mini % max(1, nproc) or batch % max(1, mini):
        problems.append(
            f"data.train_batch_size={batch} and actor_rollout_ref.actor.ppo_mini_batch_size={mini} must be "
            f"multiples of --nproc {nproc}, and the batch a multiple of the mini-batch"
        )
    samples = batch * int(override_value(overrides, "actor_rollout_ref.rollout.n", 1)) // max(1, nproc)
    for key in (
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
    ):
        micro = override_value(overrides, key)
        if micro not in (None, "null") and samples % int(micro):
            problems.append(
                f"{key}={micro} must divide the {samples} samples each process gets "
                f"(data.train_batch_size x rollout.n / --nproc {nproc}); verl asserts it after start-up"
            )
    rows = sum(parquet_rows(p) for p in train) if not problems else 0
    total = override_value(overrides, "trainer.total_training_steps")
    epochs = int(override_value(overrides, "trainer.total_epochs", 1))
    capacity = rows // max(1, batch) * epochs
    if not problems and capacity < 1:
        problems.append(f"the train set ({rows} rows) holds no full batch of data.train_batch_size={batch}")
    steps = int(total) if total not in (None, "null") else capacity
    if not problems and steps > capacity:
        problems.append(
            f"trainer.total_training_steps={steps} is more than the {capacity} steps {epochs} epoch(s) of the "
            "train set give: raise trainer.total_epochs"
        )
    return problems, steps, rows


def missing_packages() -> list[str]:
    """What verl's PPO trainer imports without declaring it, when absent here (checked before a real start)."""
    import importlib.util

    return [name for name in ("cachetools",) if importlib.util.find_spec(name) is None]


def ppo_command(overrides: list[str]) -> list[str]:
    """verl's own PPO/GRPO entry point (it starts its own Ray cluster; no torchrun)."""
    return [sys.executable, "-m", "verl.trainer.main_ppo", *overrides]
