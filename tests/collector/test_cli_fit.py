"""The CLI as a person reads it in a terminal: tables that fit `$COLUMNS` on real logs, `--db` from the
environment, and exit codes that tell a usage error from a finding."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.collector.test_cli_check import _state
from tests.conftest import REPO, SHARED

WILD = SHARED / "real-runs-wild" / "files"


def _run(*args: str, columns: int = 100, env: dict | None = None, cwd=REPO) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != "RUNWATCH_DB"}
    return subprocess.run(
        [sys.executable, "-m", "collector", *args],
        cwd=cwd,
        env=base | {"COLUMNS": str(columns), "PYTHONPATH": str(REPO)} | (env or {}),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def wild_db(tmp_path_factory):
    """The real-runs-wild corpus laid out one folder per file (copied under tmp, never into the repo),
    ingested once."""
    if not WILD.is_dir():
        pytest.fail(f"{WILD} is missing: the tests read the real logs from ../shared/real-runs-wild")
    root = tmp_path_factory.mktemp("wild") / "runs"
    for f in sorted(WILD.iterdir()):
        (root / f.name[:80]).mkdir(parents=True)
        shutil.copy(f, root / f.name[:80] / f.name)
    db = root.parent / "rw.duckdb"
    done = _run("ingest", "--db", str(db), str(root))
    assert done.returncode == 0, done.stderr
    return db


@pytest.mark.parametrize("columns", [100, 60])
def test_tables_fit_the_terminal_on_real_logs(wild_db, columns):
    for command in ("runs", "alerts", "files"):
        out = _run(command, "--db", str(wild_db), columns=columns)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        too_wide = [line for line in lines if len(line) > columns]
        assert not too_wide, f"{command}: {len(too_wide)} lines wider than {columns}: {too_wide[:3]}"
        assert len(lines) > 5, command
    runs = _run("runs", "--db", str(wild_db), "--json")
    ids = [r["id"] for r in json.loads(runs.stdout)]
    table = _run("runs", "--db", str(wild_db)).stdout
    longest = max(ids, key=len)
    # a long id keeps both its ends (runs of one repository differ at the end), cut in the middle
    assert any(
        line.startswith(longest[:10]) and longest[-5:] in line and "…" in line for line in table.splitlines()
    )
    alerts = json.loads(_run("alerts", "--db", str(wild_db), "--json").stdout)
    message = max(alerts, key=lambda a: len(a["message"]))["message"]
    text = _run("alerts", "--db", str(wild_db)).stdout
    # the message wrapped under its row: all its words are there, on lines of their own
    under = " ".join(line.strip() for line in text.splitlines() if line.startswith("    "))
    assert " ".join(message.split()[:6]) in under


def test_check_says_the_verdict_first_and_exits_by_what_it_found(tmp_path):
    runs = tmp_path / "runs"
    for name, losses in (
        ("bad", [2.0 - 0.01 * i for i in range(30)] + [float("nan")] + [1.6] * 5),
        ("good", [2.0 * 0.98**i for i in range(40)]),
        ("good-too", [3.0 * 0.98**i for i in range(40)]),
    ):
        (runs / name).mkdir(parents=True)
        _state(runs / name / "trainer_state.json", losses)
    out = _run("check", str(runs))
    assert out.returncode == 2, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "3 runs: 1 error, 0 warnings, 2 healthy"
    assert lines[1].startswith("ERROR") and "bad" in lines[1]
    # after the troubled run's details, one line per healthy run
    assert [line.split()[0] for line in lines[-2:]] == ["OK", "OK"]
    assert all(len(line) <= 100 for line in lines)
    verdict = json.loads(_run("check", str(runs), "--json").stdout)
    assert verdict["summary"] == {
        "runs": 3,
        "errors": 1,
        "warnings": 0,
        "healthy": 2,
        "no_data": 0,
        "exit_code": 2,
    }
    assert verdict["failed"] and verdict["fail_on"] == "error"


def test_usage_errors_exit_1_never_2(tmp_path):
    typo = _run("check", str(tmp_path), "--fail-on", "fatal")
    assert typo.returncode == 1 and "invalid choice: 'fatal'" in typo.stderr
    assert _run("nosuchcommand").returncode == 1
    assert _run("runs", "--no-such-flag").returncode == 1


def test_only_warnings_exit_3_with_fail_on_warn(tmp_path):
    # a run whose loss plateaus then rises a little: not an error; find one on the real corpus instead of
    # guessing a threshold: the real wild logs hold runs with warnings only
    if not WILD.is_dir():
        pytest.fail(f"{WILD} is missing")
    name = "JuncyLu__trl_DAPO__runs-grpo-Qwen2.5-VL-3B-Instruct-runs-Oct22_18-14-56_instance-20251022-125445"
    log = next(WILD.glob(name + "*"))
    (tmp_path / "run").mkdir()
    shutil.copy(log, tmp_path / "run" / log.name)
    verdict = json.loads(_run("check", str(tmp_path / "run"), "--json").stdout)
    assert verdict["summary"]["errors"] == 0 and verdict["summary"]["warnings"] == 1, verdict
    assert _run("check", str(tmp_path / "run"), "--fail-on", "warn").returncode == 3
    assert _run("check", str(tmp_path / "run")).returncode == 0


def test_db_defaults_to_the_environment_then_the_project_folder(tmp_path, wild_db):
    named = _run("runs", "--json", env={"RUNWATCH_DB": str(wild_db)}, cwd=tmp_path)
    assert named.returncode == 0 and len(json.loads(named.stdout)) > 40
    # no --db, no RUNWATCH_DB: .runwatch/runwatch.duckdb of the folder it runs in
    missing = _run("runs", cwd=tmp_path)
    assert missing.returncode == 1
    assert f"no database at {tmp_path / '.runwatch' / 'runwatch.duckdb'}" in missing.stderr


def test_runs_says_what_an_rl_run_is_judged_by_in_its_loss_columns(wild_db):
    """An RL run (verl consoles, TRL GRPO trainer states) logs a reward and a validation score, seldom a loss:
    `runs` shows them in the loss columns, marked and said under the table (the columns read "-" for a verl
    run: nothing said how it was doing); `--json` keeps `train_loss`/`val_loss` as they were."""
    listed = json.loads(_run("runs", "--db", str(wild_db), "--json").stdout)
    rl = [r for r in listed if r["kind"] == "rl"]
    verl = [r for r in rl if "verl" in r["id"] and r["reward"] is not None and r["val_score"] is not None]
    grpo = [r for r in rl if r["format"] == "hf_trainer_state" and r["reward"] is not None]
    assert verl and grpo, sorted({r["format"] for r in rl})
    assert all(r["train_loss"] is None for r in verl)  # the JSON's losses: still the losses alone
    for columns in (100, 60):
        out = _run("runs", "--db", str(wild_db), columns=columns)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert not [line for line in lines if len(line) > columns]
        assert "r: an RL run's latest reward, s: its latest validation" in " ".join(out.stdout.split())
    table = _run("runs", "--db", str(wild_db), columns=400).stdout.splitlines()  # whole ids
    for r in verl + grpo:
        [row] = [line for line in table if line.startswith(r["id"] + " ")]
        assert f"r:{r['reward']:.6g}" in row, row
        if r["val_score"] is not None:
            assert f"s:{r['val_score']:.6g}" in row, row
    sft = next(r for r in listed if r["kind"] == "sft" and r["train_loss"] is not None)
    [row] = [line for line in table if line.startswith(sft["id"] + " ")]
    assert f"{sft['train_loss']:.6g}" in row and "r:" not in row
