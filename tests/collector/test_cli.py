"""The command line as real subprocesses: against a running daemon (through the API) and on the database
directly, with the same JSON either way; tables for people; errors that say what is wrong."""

from __future__ import annotations

import json

from tests.collector.test_api import NAN_STEP, STEPS, write_run
from tests.collector.test_daemon_support import Daemon, cli, cli_json, wait_for

HF_RUN = "yongshuaiy__LLMs-final__output-checkpoint-669"


def _all(db) -> dict:
    """Every read command's JSON for the database (through whatever backend the CLI picks)."""
    return {
        "runs": cli_json(db, "runs"),
        "metrics": cli_json(db, "metrics", "--run", "a", "--metric", "train/loss", "--points", "50"),
        "raw": cli_json(db, "metrics", "--run", "a", "--metric", "train/loss", "--points", str(STEPS)),
        "alerts": cli_json(db, "alerts", "--state", "all"),
        "checkpoints": cli_json(db, "checkpoints", "--run", HF_RUN),
    }


def test_cli_through_the_daemon_and_directly_agree(tmp_path, real_runs):
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    write_run(root / "a" / "metrics.jsonl")
    db = tmp_path / "rw.duckdb"
    daemon = Daemon(db, [root, real_runs]).start()
    try:
        wait_for(
            lambda: (
                len(cli_json(db, "runs")) == 11
                and cli_json(db, "alerts", "--run", "a", "--rule", "nonfinite")
            ),
            "every run and the NaN alert",
        )
        via_api = _all(db)
        quiet = cli(db, "runs")
        assert quiet.returncode == 0 and "HTTP Request" not in quiet.stderr and "INFO" not in quiet.stderr
        nan_alert = cli_json(db, "alerts", "--run", "a", "--rule", "nonfinite")[0]
        acked = cli_json(db, "ack", str(nan_alert["id"]), "--note", "seen it")
        assert (acked["state"], acked["note"]) == ("acked", "seen it")
        assert daemon.stop() == 0
    finally:
        daemon.ensure_stopped()

    direct = _all(db)  # no collector now: the CLI opens the database itself
    via_api["alerts"] = [
        a | {"state": "acked", "note": "seen it"} if a["id"] == nan_alert["id"] else a
        for a in via_api["alerts"]
    ]
    for key in ("metrics", "raw", "checkpoints"):
        assert json.dumps(direct[key]) == json.dumps(via_api[key]), key

    # The ack moved that alert to the top (newest change first) and changed its updated_at.
    def comparable(rows: list[dict]) -> str:
        return json.dumps(
            sorted(({k: v for k, v in r.items() if k != "updated_at"} for r in rows), key=lambda r: r["id"])
        )

    assert comparable(direct["alerts"]) == comparable(via_api["alerts"])
    assert [r["id"] for r in direct["runs"]] == [r["id"] for r in via_api["runs"]]

    m = direct["metrics"]
    assert (m["run"], m["metric"], m["downsampled"], m["total_points"]) == ("a", "train/loss", True, STEPS)
    assert {"steps", "values", "min", "max", "first", "last"} <= set(m) and len(m["steps"]) == 50
    raw = direct["raw"]
    assert (
        not raw["downsampled"]
        and len(raw["steps"]) == STEPS
        and raw["values"][NAN_STEP - 1] != raw["values"][NAN_STEP - 1]
    )
    run_a = next(r for r in direct["runs"] if r["id"] == "a")
    assert {"id", "path", "format", "status", "last_step"} <= set(run_a) and run_a["last_step"] == STEPS
    assert direct["checkpoints"]["recommended"]["step"] == 200 and "deletable" in direct["checkpoints"]

    resolved = cli_json(db, "resolve", str(nan_alert["id"]), "--note", "fixed the lr")
    assert resolved["state"] == "resolved" and resolved["history"][-1]["note"] == "fixed the lr"

    table = cli(db, "runs").stdout
    assert table.splitlines()[0].split()[:3] == ["id", "status", "steps"]
    assert HF_RUN[:5] in table and HF_RUN[-3:] in table  # shortened from the middle to fit
    picked = cli(db, "checkpoints", "--run", HF_RUN).stdout
    assert "keep step 200" in picked
    deletable = ", ".join(map(str, cli_json(db, "checkpoints", "--run", HF_RUN)["deletable"])) or "none"
    assert picked.rstrip().endswith(f"deletable steps: {deletable}"), picked  # the steps, not a Python list


def test_ingest_twice_adds_nothing_and_errors_are_clear(tmp_path, real_runs):
    db = tmp_path / "rw.duckdb"
    first = json.loads(cli(db, "ingest", str(real_runs), "--json").stdout)
    second = json.loads(cli(db, "ingest", str(real_runs), "--json").stdout)
    assert first["points_added"] > 20_000 and len(first["runs"]) == 10
    assert second["points_added"] == 0 and second["points"] == first["points"]

    missing = cli(db, "metrics", "--run", "nope", "--metric", "loss", check=False)
    assert missing.returncode == 1 and "no run 'nope'" in missing.stderr
    bad_alert = cli(db, "ack", "424242", check=False)
    assert bad_alert.returncode == 1 and "no alert with id 424242" in bad_alert.stderr
    nowhere = cli(tmp_path / "none.duckdb", "runs", check=False)
    assert nowhere.returncode == 1 and "no database" in nowhere.stderr


def test_ingest_goes_through_a_running_daemon(tmp_path):
    root = tmp_path / "root"
    (root / "b").mkdir(parents=True)
    db = tmp_path / "rw.duckdb"
    daemon = Daemon(db, [root]).start()
    try:
        (root / "b" / "metrics.jsonl").write_text('{"step":1,"data":{"train/loss":1.0}}\n')
        out = cli(db, "ingest", str(root / "b"))
        assert "queued for the running collector" in out.stdout
        wait_for(
            lambda: cli_json(db, "metrics", "--run", "b", "--metric", "train/loss").get("steps") == [1],
            "run b",
        )
        refused = cli(db, "ingest", str(tmp_path), check=False)
        assert refused.returncode == 1 and "outside the watched roots" in refused.stderr
    finally:
        assert daemon.stop() == 0
