"""Stop requests and anomaly marking against a real daemon: a `[stop]` rule writes the run's stop request and
records it on the alert; without one nothing is written; the API and the CLI ask a run to stop; a run with an
open error alert is marked `anomaly_detected` without its status changing."""

from __future__ import annotations

import json
import re

import pytest

from collector.api.client import ApiError
from collector.core.runtime import thresholds_path
from collector.core.stop_request import STOP_FILE
from collector.formats.unread import STOP_FILE_REASON
from tests.collector.test_daemon_support import Daemon, cli, cli_json, wait_for


def write_running_run(folder, nan_step: int | None, steps: int = 30) -> None:
    """A run folder whose status says running; a NaN at `nan_step` (the last step keeps its episode open:
    points after it would clear it within the same read)."""
    folder.mkdir(parents=True)
    (folder / "status.json").write_text(json.dumps({"state": "running", "step": steps, "total_steps": 100}))
    with (folder / "metrics.jsonl").open("w") as f:
        for step in range(1, steps + 1):
            loss = "NaN" if step == nan_step else f"{3.0 - step * 0.01:.4f}"
            f.write(f'{{"step":{step},"data":{{"train/loss":{loss},"train/grad_norm":1.0}}}}\n')


@pytest.fixture
def daemon(tmp_path):
    root, db = tmp_path / "runs", tmp_path / "state" / "rw.duckdb"
    root.mkdir()
    db.parent.mkdir()
    thresholds_path(db).write_text('[stop]\non = ["nonfinite"]\nseverity = "error"\n')
    (root / "guarded").mkdir()
    d = Daemon(db, [root])
    yield d, root, db
    d.ensure_stopped()


def test_a_stop_rule_writes_the_request_and_the_alert_records_it(daemon):
    d, root, db = daemon
    # A run whose own runwatch.toml turns stopping off: the run's file wins over the database's.
    unguarded = root / "unguarded"
    write_running_run(unguarded, nan_step=30)
    (unguarded / "runwatch.toml").write_text("[stop]\non = []\n")
    d.start()
    write_running_run(root / "guarded" / "nan", nan_step=30)
    request_file = root / "guarded" / "nan" / STOP_FILE
    wait_for(request_file.exists, "the stop request of the run with a NaN")
    request = json.loads(request_file.read_text())
    assert request["by"] == "rule" and request["rule"] == "nonfinite" and request["step"] == 30
    alert = cli_json(db, "alerts", "--run", "guarded/nan")
    (stopping,) = [a for a in alert if a["id"] == request["alert_id"]]
    assert stopping["rule"] == "nonfinite" and "asked the run to stop" in stopping["note"]
    history = d.client().get(f"/api/alerts/{stopping['id']}")["history"]
    assert [h["event"] for h in history] == ["opened", "stop_requested"]
    wait_for(lambda: cli_json(db, "alerts", "--run", "unguarded", "--rule", "nonfinite"), "the other NaN")
    assert not (unguarded / STOP_FILE).exists()
    # A run that is one file has no folder of its own: nothing is written into the folder holding it (the
    # root here, the folder of other runs too), and the log says why.
    with (root / "solo.jsonl").open("w") as f:
        f.write('{"step":1,"data":{"train/loss":2.0}}\n{"step":2,"data":{"train/loss":NaN}}\n')
    said = "run solo: the nonfinite alert asks to stop it, but it is the single file"
    wait_for(lambda: said in d.log.read_text(), "the collector to say the single-file run has no folder")
    assert not (root / STOP_FILE).exists()
    assert d.stop() == 0


def test_the_api_and_the_cli_ask_a_run_to_stop_and_the_first_request_stands(daemon):
    d, root, db = daemon
    write_running_run(root / "a", nan_step=None)
    (root / "done").mkdir()
    (root / "done" / "status.json").write_text(json.dumps({"state": "completed", "step": 5}))
    (root / "done" / "metrics.jsonl").write_text('{"step":1,"data":{"train/loss":1.0}}\n')
    d.start()
    client = d.client()
    wait_for(lambda: {r["id"] for r in client.get("/api/runs")} >= {"a", "done"}, "both runs")
    first = client.post("/api/runs/a/stop", {"reason": "diverging, saw it on the chart"})
    assert first["written"] and first["path"] == str((root / "a" / STOP_FILE).resolve())
    assert first["request"]["by"] == "person" and first["request"]["alert_id"] is None
    again = cli(db, "stop", "a", "--reason", "second thoughts")
    assert "already asked to stop" in again.stdout and "diverging, saw it on the chart" in again.stdout
    assert json.loads((root / "a" / STOP_FILE).read_text())["reason"] == "diverging, saw it on the chart"
    # What became of it, in the run's detail (and its own route), `collector run` and its --json.
    state = client.get("/api/runs/a/stop")
    assert state["state"] == "written" and state["by"] == "person", state
    assert state["reason"] == "diverging, saw it on the chart" and state["path"] == first["path"]
    assert client.get("/api/runs/a")["stop"] == state and cli_json(db, "run", "a")["stop"] == state
    said = " ".join(cli(db, "run", "a").stdout.split())
    assert re.search(r"stop asked \d+ s ago by person \(diverging, saw it on the chart\); written: ", said), (
        said
    )
    assert client.get("/api/runs/done/stop") is None and "no stop asked" in cli(db, "run", "done").stdout
    # The request in the run's folder is runwatch's own file: named as such among the run's files, and no
    # problem to list (it was "unknown format", so every stopped run counted a file not read).
    skipped = wait_for(lambda: client.get("/api/runs/a")["skipped_files"], "the stop file among a's files")
    assert [(f["path"].rsplit("/", 1)[-1], f["reason"]) for f in skipped] == [(STOP_FILE, STOP_FILE_REASON)]
    assert cli_json(db, "files", "--run", "a") == []
    with pytest.raises(ApiError) as ended:
        client.post("/api/runs/done/stop", {"reason": "x"})
    assert ended.value.status == 409 and "has ended (status.json: completed)" in str(ended.value)
    with pytest.raises(ApiError) as unknown:
        client.post("/api/runs/nope/stop", {})
    assert unknown.value.status == 404
    refused = cli(db, "stop", "done", check=False)
    # the words of a refusal through a team's lake (`StopState.said`)
    assert refused.returncode == 1 and "409 stop refused: run 'done' has ended" in refused.stderr
    assert d.stop() == 0


def test_an_open_error_alert_marks_the_run_without_changing_its_status(daemon):
    d, root, db = daemon
    thresholds_path(db).unlink()  # marking needs no stop rule
    write_running_run(root / "nan", nan_step=30)
    write_running_run(root / "fine", nan_step=None)
    d.start()
    runs = wait_for(lambda: [r for r in cli_json(db, "runs") if r["anomaly_detected"]], "the anomaly mark")
    assert [r["id"] for r in runs] == ["nan"]
    (nan,) = runs
    assert nan["status"] == "running"
    assert nan["anomaly_reason"].startswith("nonfinite on train/") and "at step 30" in nan["anomaly_reason"]
    fine = cli_json(db, "runs")
    assert {r["id"]: (r["anomaly_detected"], r["anomaly_reason"]) for r in fine}["fine"] == (False, None)
    one = d.client().get("/api/runs/nan")
    assert one["anomaly_detected"] and one["anomaly_reason"] == nan["anomaly_reason"]
    for alert in cli_json(db, "alerts", "--run", "nan", "--severity", "error"):
        cli(db, "resolve", str(alert["id"]), "--note", "known bad batch")
    assert d.client().get("/api/runs/nan")["anomaly_detected"] is False
    assert not (root / "nan" / STOP_FILE).exists()
    assert d.stop() == 0


def test_a_stop_file_written_by_hand_with_odd_fields_is_shown_not_a_crash(tmp_path):
    """A JSON object written by hand may hold anything: `collector run`, `collector stop` (and the run page,
    whose answers are typed the same way) show it as a request in force, not a validation error."""
    root, db = tmp_path / "runs", tmp_path / "rw.duckdb"
    write_running_run(root / "a", None, steps=5)
    (root / "a" / STOP_FILE).write_text(
        '{"reason": 7, "requested_at": "this morning", "by": ["me"], "step": 2.5}'
    )
    cli(db, "ingest", str(root))
    state = cli_json(db, "run", "a")["stop"]
    assert state["state"] == "written" and state["reason"] == "7" and state["by"] == "person", state
    assert state["asked_at"] is None, state
    assert "stop asked by person (7); written: " in " ".join(cli(db, "run", "a").stdout.split())
    again = cli(db, "stop", "a", "--reason", "mine")
    assert "already asked to stop" in again.stdout and "(7)" in again.stdout, again.stdout
    assert json.loads((root / "a" / STOP_FILE).read_text())["reason"] == 7  # the file is left as it is
