"""`python -m scripts.detect_report` as the lead runs it: a real subprocess over real files."""

from __future__ import annotations

import json
import subprocess


def run_report(python, repo, *args):
    return subprocess.run(
        [python, "-m", "scripts.detect_report", *map(str, args)],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_report_table_over_real_runs(python, repo, real_runs):
    files = sorted(real_runs.glob("*.json"))
    done = run_report(python, repo, *files)
    assert done.returncode == 0, done.stderr
    rows = [
        line for line in done.stdout.splitlines() if line.startswith("| ") and not line.startswith("| file")
    ]
    assert len(rows) == len(files) == 10
    yong = next(r for r in rows if r.startswith("| yongshuaiy"))
    assert "val_loss_rise warn eval_loss @250-" in yong and "ckpt 200 by eval_loss (min), agrees" in yong
    pranav = next(r for r in rows if r.startswith("| pranav"))
    assert (
        "the run's own is checkpoint-200 because the Trainer only compares evaluations made at save steps"
        in pranav
    )


def test_report_json_and_a_bad_file(python, repo, real_runs, tmp_path):
    broken = tmp_path / "trainer_state.json"
    broken.write_text('{"log_history": [{"step": 1, "loss": 2.0},')
    done = run_report(
        python,
        repo,
        "--json",
        real_runs / "Rishikarpe__LoRA-Fine-Tuning__outputs-checkpoint-1000.json",
        broken,
    )
    assert done.returncode == 1
    assert f"skipped {broken}: line 1: invalid JSON" in done.stderr
    (row,) = json.loads(done.stdout)
    assert {a["rule"] for a in row["alerts"]} == {"no_learning"}


def test_report_reads_with_the_projects_parser_only():
    from pathlib import Path

    from scripts import detect_report as report

    source = Path(report.__file__).read_text()
    # one trainer_state reader in the project: the parser; no second loader or json fallback in the report
    assert 'parser_for("hf_trainer_state")' in source and "json.loads" not in source
    # and one advice: the run service's, over the same run inputs the collector builds from the store
    assert "advise(" in source and "advice_for_run(" not in source and "recommend_checkpoint(" not in source
