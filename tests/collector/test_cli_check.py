"""`python -m collector check RUN_OR_PATH [--fail-on warn|error]`: one pass, a verdict, an exit code for CI."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO


def _state(path, losses) -> None:
    """A trainer_state.json written here: one log per 10 steps."""
    history = [
        {"step": 10 * (i + 1), "loss": v, "grad_norm": 1.0, "learning_rate": 1e-4}
        for i, v in enumerate(losses)
    ]
    path.write_text(
        json.dumps({"global_step": 10 * len(losses), "max_steps": 10 * len(losses), "log_history": history})
    )


def _check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "collector", "check", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_prints_the_verdict_and_fails_at_the_level(tmp_path):
    run = tmp_path / "bad"
    run.mkdir()
    _state(run / "trainer_state.json", [2.0 - 0.01 * i for i in range(30)] + [float("nan")] + [1.6] * 5)
    failed = _check(str(run), "--json")
    assert failed.returncode == 2, failed.stderr
    verdict = json.loads(failed.stdout)
    assert verdict["failed"] and verdict["runs"][0]["verdict"] == "error"
    assert [a["rule"] for a in verdict["runs"][0]["alerts"]] == ["nonfinite"]
    # the error's action: no checkpoint folder, no save_steps, a trainer_state.json of an HF run: nothing
    # before the NaN (step 310) to go back to, and it says so
    action = verdict["runs"][0]["alerts"][0]["action"]
    assert action["trainer"] == "hf" and "trainer_state.json" in action["trainer_evidence"]
    text = _check(str(run))
    assert text.returncode == 2 and "ERROR" in text.stdout and "nonfinite" in text.stdout
    said = " ".join(line.strip() for line in text.stdout.splitlines())  # wrapped to the terminal
    assert f"action: {action['text']}" in said

    healthy = tmp_path / "good"
    healthy.mkdir()
    _state(healthy / "trainer_state.json", [2.0 * 0.98**i for i in range(40)])
    ok = _check(str(healthy), "--fail-on", "warn")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "OK" in ok.stdout


def test_check_names_a_missing_target(tmp_path):
    missing = _check(str(tmp_path / "nowhere"))
    assert missing.returncode == 1 and "does not exist" in missing.stderr


def test_a_run_of_which_no_point_was_read_is_not_counted_healthy(tmp_path):
    """A metrics file with no metric in it (here, lines without a step) gives a run with nothing judged: it is
    `no_data` (EMPTY, with the file and why), apart from the healthy ones; it fails nothing by itself."""
    good, empty = tmp_path / "runs" / "good", tmp_path / "runs" / "empty"
    good.mkdir(parents=True)
    empty.mkdir()
    _state(good / "trainer_state.json", [2.0 * 0.98**i for i in range(40)])
    (empty / "metrics.jsonl").write_text("".join(json.dumps({"note": f"line {i}"}) + "\n" for i in range(5)))
    text = _check(str(tmp_path / "runs"))
    assert text.returncode == 0, text.stdout + text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == "2 runs: 0 errors, 0 warnings, 1 healthy, 1 with no points read"
    said = " ".join(line.strip() for line in lines)
    assert "EMPTY  runs/empty" in said or "EMPTY  empty" in said, said
    assert "metrics.jsonl" in said and "nothing to judge" in said
    verdict = json.loads(_check(str(tmp_path / "runs"), "--json").stdout)
    assert {r["run"].rsplit("/", 1)[-1]: r["verdict"] for r in verdict["runs"]} == {
        "good": "ok",
        "empty": "no_data",
    }
    assert verdict["summary"] == {
        "runs": 2,
        "errors": 0,
        "warnings": 0,
        "healthy": 1,
        "no_data": 1,
        "exit_code": 0,
    }


def test_check_of_a_path_with_db_judges_only_the_runs_under_it(tmp_path):
    """`check PATH --db DB` reads PATH into a database that holds other runs too: the verdict is PATH's runs'
    (an error elsewhere in the database neither fails it nor shows in it)."""
    db = tmp_path / "team.duckdb"
    bad, good = tmp_path / "elsewhere" / "bad", tmp_path / "mine" / "good"
    bad.mkdir(parents=True)
    good.mkdir(parents=True)
    _state(bad / "trainer_state.json", [2.0 - 0.01 * i for i in range(30)] + [float("nan")] + [1.6] * 5)
    _state(good / "trainer_state.json", [2.0 * 0.98**i for i in range(40)])
    assert _check(str(bad.parent), "--db", str(db)).returncode == 2
    mine = _check(str(good.parent), "--db", str(db), "--json")
    assert mine.returncode == 0, mine.stdout + mine.stderr
    assert [r["run"] for r in json.loads(mine.stdout)["runs"]] == ["good"]
    # the run id form still judges that one run of the database
    assert _check("bad", "--db", str(db)).returncode == 2


def test_a_reader_that_closes_the_output_early_ends_check_quietly(tmp_path):
    # `python -m collector check DIR | head` printed a BrokenPipeError traceback once head had its lines (seen
    # checking the hunt's logs, docs/real-runs-checked.md): the read end is closed here before check writes
    run = tmp_path / "r"
    run.mkdir()
    _state(run / "trainer_state.json", [2.0 * 0.98**i for i in range(40)])
    child = subprocess.Popen(
        [sys.executable, "-m", "collector", "check", str(run)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    child.stdout.close()
    _, err = child.communicate(timeout=120)
    assert child.returncode == 141 and b"Traceback" not in err, err.decode()
