"""The CPU plugin is really loaded by verl (verl skips a plugin that fails to import, silently)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.trainer.conftest import REPO

PROBE = """
import json, sys
import verl  # verl imports VERL_USE_EXTERNAL_MODULES at the end of its own import
from verl.plugin.platform.platform_manager import PlatformRegistry
from verl.utils.device import get_device_name, get_nccl_backend, get_torch_device
import verl.utils.distributed as distributed
cls = PlatformRegistry.get("cpu")
found = {
    "plugin_imported": "trainer.verl_plugin" in sys.modules,
    "cpu_platform": None if cls is None else f"{cls.__module__}.{cls.__name__}",
    "init_group": distributed.initialize_global_process_group.__module__,
}
try:
    found.update(device=get_device_name(), backend=get_nccl_backend(), device_name=get_torch_device().get_device_name())
except Exception as exc:  # stock verl on a machine without CUDA
    found["device_error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(found))
"""


def probe(plugin: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERL_", "RUNWATCH_"))}
    env["PYTHONPATH"] = str(REPO)
    env["CUDA_VISIBLE_DEVICES"] = ""
    if plugin is not None:
        env["VERL_USE_EXTERNAL_MODULES"] = plugin
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_verl_loads_the_plugin_and_runs_on_the_cpu_platform():
    found = probe("trainer.verl_plugin")
    assert found["plugin_imported"] is True
    assert found["cpu_platform"] == "trainer.cpu_platform.PlatformCPU"
    assert found["device"] == "cpu" and found["backend"] == "gloo" and found["device_name"] == "CPU"
    assert found["init_group"] == "trainer.verl_plugin"


def test_without_the_plugin_verl_has_no_cpu_platform():
    # The control: the assertions above can fail, and do when verl is not told to load the plugin.
    found = probe(None)
    assert found["plugin_imported"] is False and found["cpu_platform"] is None
    assert found["init_group"] == "verl.utils.distributed"
    assert found.get("device") != "cpu"


@pytest.mark.slow
def test_a_real_run_records_the_plugin(smoke_run_1):
    doc = json.loads((smoke_run_1.out / "run.json").read_text())
    assert doc["plugin"] == {"module": "trainer.verl_plugin", "platform": "cpu", "loaded": True}
    assert "runwatch plugin loaded: platform=cpu" in smoke_run_1.output
