"""runwatch's verl plugin, imported by verl itself (`VERL_USE_EXTERNAL_MODULES=trainer.verl_plugin`).

verl imports external modules at the end of `import verl`, before its trainer module body runs, so what
this module patches is in place when the trainer looks it up. On import it:

1. without CUDA: registers the `cpu` platform (gloo), selects it (`VERL_PLATFORM=cpu`), lets verl pick its
   FSDP engine (registered for cuda/npu only: `VERL_ENGINE_DEVICE=cuda`), and replaces verl's process-group
   set-up, whose `cpu:gloo,cpu:gloo` backend string torch rejects, with a plain gloo one;
2. registers rollout `hf` (`trainer.hf_rollout`) for the PPO/GRPO trainer;
3. with RUNWATCH_RUN_DIR set: attaches the run-directory writers (`trainer.verl_seam`), and when the
   process group comes up, the checkpoint hooks and the scenario faults.

verl skips a plugin that fails to import without a word, so the plugin announces itself: `LOADED` is set,
`runwatch plugin loaded` is printed once per process, and run.json records `plugin`.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path

import torch

LOADED = False
# RUNWATCH_PLATFORM=cpu (set by the launcher for CPU presets) keeps a CPU run on the CPU where CUDA exists too.
PLATFORM = os.environ.get("RUNWATCH_PLATFORM") or ("cuda" if torch.cuda.is_available() else "cpu")


def _initialize_gloo_process_group(timeout_second: int = 36000):
    """verl's `initialize_global_process_group` for CPU: the same contract, with a gloo-only group."""
    torch.distributed.init_process_group(
        backend="gloo",
        timeout=timedelta(seconds=timeout_second),
        init_method=os.environ.get("DIST_INIT_METHOD", None),
    )
    return int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def _initialize_gloo_process_group_ray(timeout_second=None, backend=None):
    """verl's `initialize_global_process_group_ray` (PPO workers under Ray) for CPU: a gloo-only group.

    verl's default backend string there is `cpu:gloo,<device>:<ccl>`, i.e. `cpu:gloo,cpu:gloo`, which torch rejects.
    """
    if backend is None or backend.count("cpu:") > 1:
        backend = "gloo"
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group(
            backend=backend,
            rank=int(os.environ.get("RANK", 0)),
            world_size=int(os.environ.get("WORLD_SIZE", 1)),
            timeout=timedelta(seconds=timeout_second) if timeout_second is not None else None,
            init_method=os.environ.get("DIST_INIT_METHOD", None),
        )
    _unpin_cpu_offload()
    if os.environ.get("RUNWATCH_RUN_DIR"):
        from trainer import verl_seam

        verl_seam.install_faults(verl_seam.env_json("RUNWATCH_FAULTS", []))


def _unpin_cpu_offload() -> None:
    """verl's FSDP2 engine offloads forward-only models (the reference policy) with `CPUOffloadPolicy(pin_memory=True)`;
    pinning needs an accelerator. On CPU the parameters already live in host memory: offload without pinning."""
    from torch.distributed.fsdp import CPUOffloadPolicy
    from verl.workers.engine.fsdp import transformer_impl

    if getattr(transformer_impl.CPUOffloadPolicy, "_runwatch", False):
        return

    def cpu_offload_policy(pin_memory: bool = True) -> CPUOffloadPolicy:
        return CPUOffloadPolicy(pin_memory=False)

    cpu_offload_policy._runwatch = True
    transformer_impl.CPUOffloadPolicy = cpu_offload_policy


def _register_hf_rollout() -> None:
    """Rollout `hf` (`trainer.hf_rollout`) for the PPO/GRPO trainer, in verl's two rollout registries, in every
    process verl starts. By name only: the module itself imports verl, so it is loaded when first used."""
    from verl.workers.rollout import base, replica

    def load_replica():
        from trainer.hf_rollout import HFReplica

        return HFReplica

    base._ROLLOUT_REGISTRY[("hf", "async")] = "trainer.hf_rollout.HFServerAdapter"
    replica.RolloutReplicaRegistry.register("hf", load_replica)


def _install() -> None:
    global LOADED
    import verl.utils.distributed as distributed

    if PLATFORM == "cpu":
        os.environ.setdefault("VERL_PLATFORM", "cpu")
        os.environ.setdefault("VERL_ENGINE_DEVICE", "cuda")
        import trainer.cpu_platform  # noqa: F401 - registers the platform

    base_init = (
        _initialize_gloo_process_group if PLATFORM == "cpu" else distributed.initialize_global_process_group
    )
    run_dir = os.environ.get("RUNWATCH_RUN_DIR")

    def initialize_global_process_group(*args, **kwargs):
        result = base_init(*args, **kwargs)
        if run_dir:
            # Here verl is fully imported, so its worker and checkpoint classes can be patched safely.
            from trainer import verl_seam, verl_stop

            verl_seam.install_checkpoint_hooks()
            verl_seam.install_faults(verl_seam.env_json("RUNWATCH_FAULTS", []))
            verl_stop.install_stop_check(Path(run_dir), verl_seam.STATE)
        return result

    distributed.initialize_global_process_group = initialize_global_process_group
    if PLATFORM == "cpu":
        # verl's worker modules import this name when they are first imported, which is after this plugin.
        distributed.initialize_global_process_group_ray = _initialize_gloo_process_group_ray
    _register_hf_rollout()
    if run_dir:
        from trainer import verl_seam

        # Let an exception reach sys.excepthook (and status.json) instead of Hydra's own report-and-exit.
        os.environ["HYDRA_FULL_ERROR"] = "1"
        extra = verl_seam.env_json("RUNWATCH_EXTRA", {})
        extra["plugin"] = {"module": __name__, "platform": PLATFORM, "loaded": True}
        os.environ["RUNWATCH_EXTRA"] = json.dumps(extra)
        verl_seam.install_writers(Path(run_dir))
        from trainer import verl_stop

        verl_stop.install_ppo_stop()
    LOADED = True
    if os.environ.get("RANK", "0") == "0":
        print(f"runwatch plugin loaded: platform={PLATFORM} run_dir={run_dir or '-'}", flush=True)


_install()
