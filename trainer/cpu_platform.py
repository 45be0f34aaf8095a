"""A CPU platform for verl 0.9.1, so its SFT and PPO/GRPO trainers run with gloo on a machine without CUDA.

verl asks its platform for a device module and calls `torch.cuda`-style functions on it (memory stats,
rng state, `empty_cache`, streams). On CPU those have no meaning; `CpuDeviceModule` answers them with
honest CPU values (no accelerator memory, nothing to synchronise) and leaves everything else to `torch.cpu`.
"""

from __future__ import annotations

import os
from contextlib import contextmanager, nullcontext
from types import ModuleType
from typing import Any

import torch
import torch.cpu
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry


class CpuDeviceModule(ModuleType):
    """`torch.cuda`'s interface as verl uses it, answered for the CPU."""

    def __init__(self) -> None:
        super().__init__("runwatch_cpu_device")

    def __getattr__(self, name: str) -> Any:
        # Anything not answered here (Stream, Event, current_stream, stream...) comes from torch.cpu itself.
        return getattr(torch.cpu, name)

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def current_device() -> str:
        return "cpu"

    @staticmethod
    def set_device(device: Any) -> None:
        return None

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "CPU"

    @staticmethod
    def synchronize(device: Any = None) -> None:
        return None

    @staticmethod
    def empty_cache() -> None:
        return None

    @staticmethod
    def ipc_collect() -> None:
        return None

    @staticmethod
    def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
        return None

    # No accelerator memory exists: every accelerator-memory figure is zero (CPU memory is reported by verl
    # separately as perf/cpu_memory_used_gb).
    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        return 0

    @staticmethod
    def max_memory_allocated(device: Any = None) -> int:
        return 0

    @staticmethod
    def memory_reserved(device: Any = None) -> int:
        return 0

    @staticmethod
    def max_memory_reserved(device: Any = None) -> int:
        return 0

    @staticmethod
    def reset_peak_memory_stats(device: Any = None) -> None:
        return None

    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        pages = os.sysconf("SC_PHYS_PAGES")
        free = os.sysconf("SC_AVPHYS_PAGES")
        size = os.sysconf("SC_PAGE_SIZE")
        return free * size, pages * size

    # verl saves the CPU generator itself under "cpu"; the accelerator generator is the same one here.
    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        torch.manual_seed(seed)


CPU_DEVICE_MODULE = CpuDeviceModule()


@PlatformRegistry.register(platform="cpu")
class PlatformCPU(PlatformBase):
    """verl platform `cpu`: device `cpu`, collective backend `gloo`."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        return CPU_DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        # Never auto-detected: chosen only by VERL_PLATFORM=cpu, which the plugin sets when CUDA is absent.
        return False

    def current_device(self) -> str:
        # verl passes this straight to `.to(device=...)`; an integer would mean cuda:0.
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        with nullcontext():
            yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        # verl's PPO trainer places one worker per Ray "GPU" and checks that enough exist; on CPU these are
        # logical slots, declared with `ray_kwargs.ray_init.num_gpus=N` (the launcher does).
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        # The slots are not devices: Ray must not point CUDA_VISIBLE_DEVICES at them.
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None
