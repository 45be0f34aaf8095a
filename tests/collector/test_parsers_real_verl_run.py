"""A real (CPU) verl SFT run: discovery, every parser of its views, and its checkpoint index agree.

One short run of the `smoke` preset writes metrics.jsonl, the CSV histories, status/run.json, checkpoints, and
verl's console output (kept here as train.log in the run folder). The same points must come out of the JSONL,
of the two CSVs together, and (for what verl prints) of the console log.
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from collector.formats import console, csv_history, jsonl, parser_for
from collector.formats.discover import find_runs
from collector.ingest.checkpoints import scan_checkpoints
from tests.conftest import DATA_BUILD, REPO

pytestmark = pytest.mark.slow


def rows(result) -> set[tuple]:
    p = result.points
    return {
        (s, m, "nan" if math.isnan(v) else round(v, 6))
        for s, m, v in zip(p.step, p.metric, p.value, strict=True)
    }


@pytest.fixture(scope="module")
def verl_run(tmp_path_factory):
    if not (DATA_BUILD / ".done").is_file():
        pytest.fail(f"{DATA_BUILD} is not built: run `make data`")
    root = tmp_path_factory.mktemp("verl")
    run_dir = root / "sft-smoke"
    proc = subprocess.run(
        [sys.executable, "-m", "trainer.launch", "--preset", "smoke", "--out", str(run_dir), "--nproc", "1"],
        cwd=REPO,
        capture_output=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir / "train.log").write_bytes(proc.stdout + proc.stderr)
    return root, run_dir


def test_discovery_finds_the_run_and_reads_the_jsonl(verl_run):
    root, run_dir = verl_run
    [run] = find_runs([root])
    assert (run.id, run.dir, run.format) == ("sft-smoke", run_dir, "jsonl")
    roles = {s.path.name: s.role for s in run.sources}
    assert roles["metrics.jsonl"] == "metrics"
    assert roles["training_history.csv"] == roles["validation_history.csv"] == roles["train.log"] == "ignored"
    assert roles["status.json"] == roles["run.json"] == roles["latest_checkpointed_iteration.txt"] == "meta"
    for source in run.sources:
        result = parser_for(source.format)(source.path.read_bytes(), 1)
        assert result.bad == [], (source.path.name, result.bad[:3])
    assert parser_for("status")((run_dir / "status.json").read_bytes()).info["state"] == "completed"


def test_jsonl_and_csv_views_hold_the_same_points(verl_run):
    _, run_dir = verl_run
    from_jsonl = jsonl.parse((run_dir / "metrics.jsonl").read_bytes())
    train = csv_history.parse((run_dir / "training_history.csv").read_bytes())
    val = csv_history.parse((run_dir / "validation_history.csv").read_bytes())
    assert len(from_jsonl.points) > 0 and from_jsonl.bad == train.bad == val.bad == []
    assert rows(from_jsonl) == rows(train) | rows(val)
    assert len(from_jsonl.points) == len(train.points) + len(val.points)


def test_console_log_holds_the_training_points_verl_printed(verl_run):
    _, run_dir = verl_run
    printed = console.parse((run_dir / "train.log").read_bytes())
    from_jsonl = rows(jsonl.parse((run_dir / "metrics.jsonl").read_bytes()))
    loss = {r for r in rows(printed) if r[1] == "train/loss"}
    assert loss and loss == {r for r in from_jsonl if r[1] == "train/loss"}


def test_checkpoints_are_complete_and_the_marker_names_the_last(verl_run):
    _, run_dir = verl_run
    index = scan_checkpoints(run_dir)
    assert index.checkpoints and all(c.complete and c.kind == "verl" for c in index.checkpoints)
    assert index.latest_marker == index.checkpoints[-1].step
    assert all(c.bytes > 0 for c in index.checkpoints)
