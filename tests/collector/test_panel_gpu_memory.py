"""The GPU memory panel: the peak GPU memory verl and torchtune log, in GiB, drawn on one chart of the run page.

Expected before looking at the page (from the files' own lines): the verl GRPO test log in real-runs-wild logs
`perf/max_memory_allocated_gb` 7.99 -> 9.60 and `perf/max_memory_reserved_gb` 12.25 -> 13.87 at steps 1-2, so
its page draws a "GPU memory" panel with those two; `perf/cpu_memory_used_gb` (406 GB of host memory) is not
GPU memory and stays out of it.
"""

from __future__ import annotations

from app.panels import role_panels
from collector.api import runs as api_runs
from collector.api.models import RunDetail
from collector.core.roles import role_of
from collector.ingest.reader import Ingestor
from collector.runs.service import RunService
from collector.store.db import Store
from tests.conftest import SHARED

VERL_LOG = (
    SHARED
    / "real-runs-wild"
    / "files"
    / "HappynessI__verl-for-AgentGym__Verl-Data-outputs-webshop_grpo_test-logs"
    "-test_20251213_235103.log"
)


def test_verl_and_torchtune_peak_memory_play_the_gpu_memory_role():
    for name in (
        "perf/max_memory_allocated_gb",  # verl
        "perf/max_memory_reserved_gb",
        "peak_memory_active",  # torchtune's training.get_memory_stats
        "peak_memory_alloc",
        "peak_memory_reserved",
        "train/peak_memory_alloc",  # through a W&B or TensorBoard callback's train/ prefix
    ):
        assert role_of(name) == "gpu_memory", name
    assert role_of("perf/cpu_memory_used_gb") is None


def test_a_real_verl_run_page_draws_its_gpu_memory_on_one_panel(tmp_path):
    store = Store(tmp_path / "t.duckdb")
    ingest = Ingestor(store, [VERL_LOG])
    try:
        ingest.ingest_all()
        service = RunService(store)
        [run] = [r["id"] for r in api_runs.runs(service)]
        detail = RunDetail.model_validate(api_runs.run(service, run))
    finally:
        ingest.close()
        store.close()
    [sent] = [p for p in detail.panels if p.title == "GPU memory"]
    assert (sent.roles, sent.y_title) == (["gpu_memory"], "GiB")
    roles = {"gpu_memory": sorted(m.metric for m in detail.metrics if m.role == "gpu_memory")}
    [panel] = role_panels(roles, [sent])
    assert panel.metrics == ("perf/max_memory_allocated_gb", "perf/max_memory_reserved_gb")
    last = {m.metric: m.last_value for m in detail.metrics}
    assert (
        round(last["perf/max_memory_allocated_gb"], 2),
        round(last["perf/max_memory_reserved_gb"], 2),
    ) == (
        9.6,
        13.87,
    )
