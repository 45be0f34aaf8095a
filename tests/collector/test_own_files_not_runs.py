"""runwatch never reads its own files as a run: with the database inside the watched root, the database, its
alert log (JSONL, which would otherwise read as a run), token, WAL and scratch folder are listed as runwatch's
own, with the reason, and no run comes of them."""

from __future__ import annotations

import json

from collector.core.runtime import ensure_token
from collector.formats.discover import find_runs, run_for_path
from collector.formats.unread import runwatch_own_reason
from tests.collector.test_daemon_support import cli_json


def _run_folder(root):
    out = root / "output"
    out.mkdir(parents=True)
    rows = [{"step": s, "loss": 2.0 - s / 100} for s in range(1, 60)]
    rows += [{"step": 60, "loss": float("nan")}]  # an alert, so the alert log gets a line
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def test_the_database_inside_the_root_is_not_read_as_runs(tmp_path):
    _run_folder(tmp_path)
    db = tmp_path / "db.duckdb"
    first = cli_json(db, "ingest", str(tmp_path))
    assert first["runs"] == ["output"]
    log = tmp_path / "db.duckdb.alerts.jsonl"
    assert log.is_file() and log.read_text().strip()  # runwatch wrote its alert log into the root
    ensure_token(db)
    again = cli_json(db, "ingest", str(tmp_path))
    assert again["runs"] == ["output"]
    listed = {f["path"].rsplit("/", 1)[1]: f["reason"] for f in again["runwatch_files"]}
    assert (
        listed["db.duckdb.alerts.jsonl"] == "runwatch's own alert log (of the database db.duckdb): not a run"
    )
    assert listed["db.duckdb"] == "runwatch's own database: not a run"
    assert "API token" in listed["db.duckdb.token"]
    assert [r.id for r in find_runs([tmp_path])] == ["output"]
    # the daemon's path for a changed file: the alert log belongs to no run
    assert run_for_path(log, [tmp_path]) is None


def test_a_scratch_folder_beside_a_database_holds_no_run(tmp_path):
    (tmp_path / "rw.duckdb").write_bytes(b"DUCK")
    scratch = tmp_path / "rw.duckdb.ingest" / "123"
    scratch.mkdir(parents=True)
    (scratch / "piece.jsonl").write_text('{"step": 1, "loss": 1.0}\n')
    assert find_runs([tmp_path]) == []
    assert run_for_path(scratch / "piece.jsonl", [tmp_path]) is None


def test_names_alone_do_not_make_a_file_runwatchs():
    # an alerts.jsonl with no database beside it is somebody's metrics, read as usual
    assert runwatch_own_reason("train.alerts.jsonl", {"train.alerts.jsonl"}) is None
    assert runwatch_own_reason("x.wal", {"x.wal", "x"}) is not None
