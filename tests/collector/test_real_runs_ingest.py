"""Every real file in ../shared/real-runs and ../shared/real-runs-wild/files ingests with exact counts, one
value per (run, metric, step), and every file accounted for (read with points, or warned about, or listed).

The expected counts come from `sources.jsonl`'s facts (computed by the corpus's own script from the raw
numbers), except where a file repeats a step: the store keeps one value per step, so for the JSON and CSV formats
the expectation is the file's distinct steps, counted here with the stdlib `json` and `csv` modules.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from collector.api import runs as api_runs
from collector.ingest.reader import Ingestor
from collector.runs.service import RunService
from collector.store import read as store_read
from collector.store.db import Store
from tests.conftest import SHARED

WILD = SHARED / "real-runs-wild"
FACTS = {
    json.loads(line)["file"].removeprefix("files/"): json.loads(line)
    for line in (WILD / "sources.jsonl").open()
}
FILES = sorted((WILD / "files").iterdir()) + sorted((SHARED / "real-runs").glob("*.json"))
# The corpus's formats, as runwatch names them.
FORMAT_OF = {
    "LLaMA-Factory trainer_log.jsonl": "llamafactory_log",
    "HF Trainer trainer_state.json": "hf_trainer_state",
    "TRL GRPO trainer_state.json": "hf_trainer_state",
    "TRL DPO trainer_state.json": "hf_trainer_state",
    "HF Trainer console log": "hf_console",
    "verl console log": "console",
    "TensorBoard events": "tensorboard",
    "Lightning metrics.csv": "csv",
    "CSV metric history": "csv",
}
# LLaMA-Factory writes the HF Trainer's `learning_rate` as `lr`: runwatch stores it under the HF name.
RENAMED = {"lr": "learning_rate"}


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    store = Store(tmp_path_factory.mktemp("real") / "real.duckdb")
    ingestor = Ingestor(store, FILES)
    ingestor.ingest_all()
    runs = {Path(r["path"]).name: r for r in store_read.runs(store)}
    yield store, runs, ingestor
    ingestor.close()
    store.close()


def distinct_steps(path: Path, fmt: str) -> dict[str, set[int]]:
    """Steps with a value per metric, read with the stdlib (independent of runwatch's parsers)."""
    steps: dict[str, set[int]] = {}
    if fmt == "csv":
        for row in csv.DictReader(path.open()):
            for key, value in row.items():
                if key != "step" and value not in ("", None):
                    steps.setdefault(key, set()).add(int(row["step"]))
        return steps
    if fmt == "llamafactory_log":
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        step_key = "current_steps"
    else:
        records, step_key = json.loads(path.read_text())["log_history"], "step"
    for record in records:
        for key, value in record.items():
            if key not in (step_key, "total_steps", "percentage") and isinstance(value, int | float):
                steps.setdefault(RENAMED.get(key, key), set()).add(record[step_key])
    return steps


def test_every_file_is_read_or_listed(ingested):
    store, runs, _ = ingested
    sources = {Path(s["path"]).name: s for s in store_read.sources(store)}
    skipped = {Path(f["path"]).name for f in store_read.skipped_files(store)}
    assert set(sources) | skipped == {p.name for p in FILES}
    for name, fact in FACTS.items():
        assert sources[name]["format"] == FORMAT_OF[fact["format"]], name


@pytest.mark.parametrize("name", sorted(FACTS), ids=lambda n: n[:60])
def test_counts_match_the_facts(ingested, name):
    store, runs, _ = ingested
    fact, fmt = FACTS[name], FORMAT_OF[FACTS[name]["format"]]
    rows = store.rows(
        "SELECT metric, count(*), min(step), max(step) FROM points WHERE run_id = ? GROUP BY metric",
        [runs[name]["id"]],
    )
    stats = {m: {"points": n, "first_step": lo, "last_step": hi} for m, n, lo, hi in rows}
    kept = {s["metric"]: s["points"] for s in store_read.metric_stats(store, runs[name]["id"])}
    assert kept == {m: s["points"] for m, s in stats.items()}  # the per-metric summaries agree
    own_count = fmt in ("llamafactory_log", "hf_trainer_state", "csv")
    own = distinct_steps(WILD / "files" / name, fmt) if own_count else {}
    for metric, expected in fact["facts"]["metrics"].items():
        stored = stats[RENAMED.get(metric, metric)]
        if own_count:
            steps = own[RENAMED.get(metric, metric)]
            assert (stored["points"], stored["first_step"], stored["last_step"]) == (
                len(steps),
                min(steps),
                max(steps),
            )
            assert len(steps) <= expected["n"]  # a file that repeats a step has more records than steps
            continue
        evals = fmt == "hf_console" and "eval_loss" in fact["facts"]["metrics"]
        if evals and metric in ("epoch", "eval_loss"):
            # The corpus numbers evaluation dicts as steps of their own; runwatch attaches them to the
            # training step they follow: the training metrics keep their count, epoch and eval steps differ.
            assert 0 < stored["points"] <= expected["n"]
            continue
        assert stored["points"] == expected["n"], metric
        if fmt != "hf_console" or fact["facts"].get("step_source", "").startswith("tqdm"):
            assert (stored["first_step"], stored["last_step"]) == (
                expected["first_step"],
                expected["last_step"],
            )


def test_one_value_per_run_metric_and_step(ingested):
    store, _, _ = ingested
    assert (
        store.rows("SELECT run_id, metric, step FROM points GROUP BY ALL HAVING count(*) > 1 LIMIT 3") == []
    )


def test_files_that_give_no_point_say_so(ingested):
    store, runs, _ = ingested
    silent = []
    for name, run in runs.items():
        [source] = api_runs.run(RunService(store), run["id"])["sources"]
        if source["points"] == 0:
            assert source["warning"] and f"0 points from {source['lines']} lines" in source["warning"], name
            silent.append(name)
    # progress-only LLaMA-Factory logs, a verl job that crashed before step 1, one that never logged a metric
    assert sorted(silent) == [
        "AnthonyTang7__LLM-Assisted-RL__trainer_log.jsonl",
        "Mar2812__search_rl_r1__nq-search-r1-ppo-qwen2.5-3b-it-em.log",
        "gi7014__SunXiaochuan-V1__trainer_log.jsonl",
        "zhiyuanhubj__logic-rl-formula__grpo.log",
    ]


@pytest.mark.parametrize(
    "name", sorted(n for n, f in FACTS.items() if f["facts"].get("total_steps")), ids=lambda n: n[:60]
)
def test_total_steps_from_the_progress_records(ingested, name):
    _, runs, _ = ingested
    assert runs[name]["total_steps"] == FACTS[name]["facts"]["total_steps"][0]


@pytest.mark.parametrize(
    "name",
    sorted(n for n, f in FACTS.items() if FORMAT_OF[f["format"]] == "hf_console"),
    ids=lambda n: n[:60],
)
def test_hf_console_endings(ingested, name):
    """A completed run printed its train_runtime summary; a crash or kill after the last dict is its error."""
    store, runs, _ = ingested
    run = api_runs.run(RunService(store), runs[name]["id"])
    text = (WILD / "files" / name).read_text(errors="replace")
    summary = "'train_runtime'" in text
    assert (run["status"] == "completed") == summary
    error = (run["status_info"] or {}).get("error")
    assert (error is not None) == (not summary and FACTS[name]["facts"]["ending"]["error_in_last_60_lines"])
