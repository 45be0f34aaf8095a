"""A flat folder of several runs' logs (collected side by side) is never merged into one run, and a file is a
copy of another only when that other holds points."""

from __future__ import annotations

import json

import pytest

from collector.formats.discover import find_runs
from tests.collector.test_daemon_support import cli
from tests.collector.test_discover import roles, write
from tests.conftest import SHARED

WILD = SHARED / "real-runs-wild" / "files"


def test_the_real_corpus_as_shipped_is_one_run_per_file(tmp_path):
    if not WILD.is_dir():
        pytest.fail(f"{WILD} is missing: the tests read the real logs from ../shared/real-runs-wild")
    files = sorted(p for p in WILD.iterdir() if p.is_file())
    runs = find_runs([WILD])
    # TensorBoard, LLaMA-Factory, trainer_state, console and CSV files side by side: 55 runs, not one "files"
    assert len(runs) == len(files) == 55
    assert sorted(s.path for r in runs for s in r.sources) == files
    assert all(r.skipped == [] for r in runs), [r.skipped for r in runs if r.skipped]

    db = tmp_path / "rw.duckdb"
    done = json.loads(cli(db, "ingest", str(WILD), "--json").stdout)
    assert len(done["runs"]) == 55 and "files" not in done["runs"]
    copies = [f for fs in done["not_read"].values() for f in fs if "copy of" in f["reason"]]
    assert not copies, copies
    for run in json.loads(cli(db, "runs", "--json").stdout):
        if run["last_step"] is not None and run["total_steps"]:
            assert run["last_step"] <= run["total_steps"], run  # the merged run was at 2,592 %


def test_logs_of_different_runs_in_one_folder_are_runs_of_their_own(tmp_path):
    write(tmp_path / "logs" / "sft.log", "{'loss': 1.0, 'epoch': 0.1}\n")
    write(tmp_path / "logs" / "dpo.log", "{'loss': 0.7, 'epoch': 0.1}\n")
    write(tmp_path / "one" / "train.log", "{'loss': 1.0, 'epoch': 0.1}\n")
    write(tmp_path / "one" / "train.log.1", "{'loss': 1.2, 'epoch': 0.05}\n")  # its earlier life
    write(tmp_path / "split" / "training_history.csv", "step,loss\n1,1\n")
    write(tmp_path / "split" / "validation_history.csv", "step,val/loss\n1,1\n")
    runs = {r.id: r for r in find_runs([tmp_path])}
    assert sorted(runs) == ["logs/dpo", "logs/sft", "one", "split"]
    assert len(runs["one"].metrics_sources()) == 2 and len(runs["split"].metrics_sources()) == 2


def test_a_file_is_a_copy_only_of_a_file_that_holds_points(tmp_path):
    progress = "".join(
        json.dumps({"current_steps": i, "total_steps": 50, "percentage": 2 * i}) + "\n" for i in range(1, 20)
    )
    console = "".join(
        f"{{'loss': {1.0 - i / 100}, 'learning_rate': 1e-4, 'epoch': {i / 10}}}\n" for i in range(9)
    )
    write(tmp_path / "progress-only" / "trainer_log.jsonl", progress)
    write(tmp_path / "progress-only" / "train.log", console)
    with_loss = progress.replace('"percentage"', '"loss": 1.0, "percentage"')
    write(tmp_path / "with-loss" / "trainer_log.jsonl", with_loss)
    write(tmp_path / "with-loss" / "train.log", console)
    runs = {r.id: r for r in find_runs([tmp_path])}
    # the LLaMA-Factory log holds no loss: the console log is read, not called its copy
    assert roles(runs["progress-only"])["train.log"][1] == "metrics"
    assert runs["progress-only"].skipped == []
    assert roles(runs["with-loss"])["train.log"][1] == "ignored"
    assert "copy of the metrics in trainer_log.jsonl" in runs["with-loss"].skipped[0][1]
