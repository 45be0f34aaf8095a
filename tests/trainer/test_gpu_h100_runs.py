"""The first runs made on a GPU: `scripts/gpu_hf_check.py` on one NVIDIA H100 80GB (2026-11-26, torch
2.11.0+cu130, transformers 5.17.0, Python 3.12.3; the device image's own packages, no runwatch install), the
repo's tiny Qwen2 from data/build through the Hugging Face Trainer with `trainer.hf.RunwatchCallback`.

`gpu_h100_runs/` keeps what runwatch reads of each run: run.json, status.json, the TensorBoard events and the last
checkpoint's trainer_state.json (no weights, so these checkpoints are incomplete and no advice names one here;
the whole folders' advice is in docs/architecture.md, "GPU runs"). What the numbers show, written before runwatch
read them:
- healthy (bf16, lr 3e-4, cosine, 600 steps): eval_loss falls to 1.68 at the last step; nothing to say.
- diverge (lr 1.0, no warm-up, no clipping): loss 17.9 at step 5, up to 77 by step 15, above 2 x ln(512) until
  step 160, then down to an eval_loss of 4.79 by 400: diverged from the start, one error.
- stopped (as healthy, a stop request at step 230): status stopped at 231, no alert.
- fp16 (fp16 at lr 1.0, no clipping): grad_norm NaN from step 5 on, the logged loss exactly 0 from step 10 (the
  Trainer's NaN filter), eval_loss NaN: one nonfinite error, and it must not read the 0 loss as a perfect fit.
- accum8 (gradient accumulation 8): a healthy run; the logged loss is not scaled by the accumulation.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUNS = Path(__file__).resolve().parent / "gpu_h100_runs"

# run -> (verdict, status, alerts as (rule, metric, first step))
EXPECTED = {
    "hf-gpu-healthy": ("ok", "completed", set()),
    "hf-gpu-diverge": ("error", "completed", {("loss_above_uniform", "loss", 5)}),
    "hf-gpu-stopped": ("ok", "stopped", set()),
    "hf-gpu-fp16": ("error", "completed", {("nonfinite", "grad_norm", 5)}),
    "hf-gpu-accum8": ("ok", "completed", set()),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_gpu_run_gets_the_verdict_its_numbers_call_for(tmp_path, name):
    run = tmp_path / name
    shutil.copytree(RUNS / name, run)
    res = subprocess.run(
        [sys.executable, "-m", "collector", "check", "--json", str(run)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    verdict, status, alerts = EXPECTED[name]
    assert res.returncode == (2 if verdict == "error" else 0), res.stderr  # `check`: exit 2 on an error alert
    (got,) = json.loads(res.stdout)["runs"]
    assert (got["verdict"], got["status"]) == (verdict, status), got
    assert {(a["rule"], a["metric"], a["first_step"]) for a in got["alerts"]} == alerts, got["alerts"]
    # every file is read, but the stop request, which is named as runwatch's own, not a metrics file
    assert [Path(f["path"]).name for f in got["not_read"]] == (
        ["runwatch.stop"] if name == "hf-gpu-stopped" else []
    )
    if name == "hf-gpu-fp16":
        (alert,) = got["alerts"]
        assert "logged as exactly 0" in alert["message"]  # the NaN filter's zeros are not a perfect fit
        assert alert["severity"] == "error"
