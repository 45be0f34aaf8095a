"""Team mode with real parts: a throwaway PostgreSQL on 127.0.0.1 as the DuckLake catalog, real `serve`
processes (the team venv's interpreter, DuckDB 1.4.4 with the DuckLake and Postgres extensions) on different
roots writing one lake, and a real reader `serve --store` answering the API for all of them."""

from __future__ import annotations

import json
import math
import os
import random
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from unittest.mock import ANY

import pytest

from collector.api.client import ApiError, Client
from collector.core.runtime import thresholds_path
from tests.collector.test_daemon_support import REPO, Daemon, cli, cli_json, wait_for
from tests.pg_support import PgServer, team_cluster

TEAM_PYTHON = Path(os.environ.get("RUNWATCH_TEAM_PYTHON") or REPO / ".venv-team" / "bin" / "python")


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    yield from team_cluster(TEAM_PYTHON)


class TeamDaemon(Daemon):
    """`serve` under the team venv's interpreter, publishing into (or, without roots, reading) the lake."""

    def start(self, wait: bool = True) -> TeamDaemon:
        cmd = [str(TEAM_PYTHON), "-m", "collector", "serve", "--db", str(self.db), *map(str, self.roots)]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [*self.prefix, *cmd, "--port", "0", *self.extra],
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        if wait:
            wait_for(self._ready, f"{self.db}'s collector to serve", timeout=180)
        return self


def lake_args(dsn: str, data: Path, name: str | None = None) -> list[str]:
    out = ["--store", f"ducklake:postgres:{dsn}", "--data-path", str(data)]
    return [*out, "--collector", name] if name else out


def write_steps(path: Path, first: int, last: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        for s in range(first, last + 1):
            f.write(json.dumps({"step": s, "data": {"train/loss": 1.0 / s, "train/lr": s * 1e-6}}) + "\n")


def raw(client: Client, run: str, metric: str = "train/loss") -> tuple[list[int], list[float]]:
    series = client.get(f"/api/runs/{run}/metrics", {"metric": metric, "after": 0})["series"][0]
    return series["steps"], series["values"]


def exactly(client: Client, run: str, last: int) -> bool:
    """The run's loss in the lake is steps 1..last, each once, each with the value written."""
    steps, values = raw(client, run)
    return steps == list(range(1, last + 1)) and all(
        math.isclose(v, 1.0 / s) for s, v in zip(steps, values, strict=True)
    )


def overview_step(client: Client, run: str) -> int | None:
    """The run's `last_step` as the reader's overview (`GET /api/runs`) says it."""
    return next(r["last_step"] for r in client.get("/api/runs") if r["id"] == run)


def test_two_collectors_one_lake_one_reader_and_a_stop_through_the_lake(pg, tmp_path):
    dsn, data = pg.new_database("two"), tmp_path / "lake"
    write_steps(tmp_path / "alice" / "exp" / "sft" / "metrics.jsonl", 1, 300)
    write_steps(tmp_path / "bob" / "exp" / "sft" / "metrics.jsonl", 1, 200)
    (tmp_path / "alice" / "exp" / "sft" / "status.json").write_text('{"state": "running"}')
    write_steps(tmp_path / "alice" / "solo.jsonl", 1, 5)  # a run that is one file in alice's root
    alice = TeamDaemon(tmp_path / "alice.duckdb", [tmp_path / "alice"], *lake_args(dsn, data, "alice"))
    bob = TeamDaemon(tmp_path / "bob.duckdb", [tmp_path / "bob"], *lake_args(dsn, data, "bob"))
    thresholds_path(bob.db).write_text('[stop]\non = ["nonfinite"]\nseverity = "error"\n')  # a rule stops
    reader = TeamDaemon(tmp_path / "reader.duckdb", [], *lake_args(dsn, data))
    try:
        alice.start()
        bob.start()
        reader.start()
        client = reader.client()
        assert client.get("/api/health")["ok"] is True
        said = f"team lake: publishing into ducklake:postgres:{dsn} as collector 'alice' (runs alice/RUN)"
        wait_for(lambda: said in alice.log.read_text(), "alice's log naming the lake and its name there")
        # Both collectors' runs, under their names: the same relative run id on two roots is two runs.
        wait_for(lambda: exactly(client, "alice/exp/sft", 300), "alice's 300 steps in the lake")
        wait_for(lambda: exactly(client, "bob/exp/sft", 200), "bob's 200 steps in the lake")
        ids = ["alice/exp/sft", "alice/solo", "bob/exp/sft"]
        wait_for(
            lambda: sorted(r["id"] for r in client.get("/api/runs")) == ids, "the three runs in the lake"
        )
        wait_for(lambda: overview_step(client, "alice/exp/sft") == 300, "the reader's overview at step 300")
        assert sorted(r["id"] for r in cli_json(reader.db, "runs")) == ids  # the CLI finds the team's API
        # Live: lines written later reach the reader through the lake, and so do the alerts they raise.
        write_steps(tmp_path / "alice" / "exp" / "sft" / "metrics.jsonl", 301, 350)
        wait_for(lambda: exactly(client, "alice/exp/sft", 350), "alice's new lines in the lake")
        # The reader keeps its overview per lake snapshot: the commit that brought them builds it again.
        wait_for(lambda: overview_step(client, "alice/exp/sft") == 350, "the reader's overview at step 350")
        with (tmp_path / "bob" / "exp" / "sft" / "metrics.jsonl").open("a") as f:
            f.write('{"step": 201, "data": {"train/loss": NaN, "train/lr": 0.0002}}\n')
        nan = wait_for(
            lambda: client.get("/api/alerts", {"run": "bob/exp/sft", "rule": "nonfinite", "state": "all"}),
            "bob's NaN alert in the lake",
        )
        assert [a["first_step"] for a in nan] == [201]
        assert nan[0]["id"] < 2**53  # exact as a JSON number in a browser (a double)
        # bob's [stop] rule wrote the run's stop file itself; the reader tells it from the alert's history.
        assert wait_for(lambda: client.get("/api/runs/bob/exp/sft/stop"), "bob's rule stop on the reader") == {
            "state": "written", "asked_at": ANY, "by": "rule", "reason": "nonfinite", "alert_id": nan[0]["id"],
            "collector": "bob", "collector_live": True,
            "path": str(tmp_path / "bob" / "exp" / "sft" / "runwatch.stop"),
        }  # fmt: skip
        assert json.loads((tmp_path / "bob" / "exp" / "sft" / "runwatch.stop").read_text())["by"] == "rule"
        # An ack on the team's API is applied by the collector that raised the alert, then published back.
        said = cli(reader.db, "ack", str(nan[0]["id"]), "--note", "seen on the team page").stdout
        assert "(open; acked is asked of the collector that owns the run" in " ".join(said.split()), said
        wait_for(
            lambda: client.get(f"/api/alerts/{nan[0]['id']}")["state"] == "acked",
            "the ack applied by bob, published",
        )
        assert client.get(f"/api/alerts/{nan[0]['id']}")["note"] == "seen on the team page"
        # Incidents are grouped from the lake's alerts; resolving one on the reader is asked of bob through the
        # lake, bob applies it to each of its alerts and publishes them, and the reader then shows it.
        incidents = client.get("/api/runs/bob/exp/sft/incidents")
        assert [i["run"] for i in incidents] == ["bob/exp/sft"]
        incident = incidents[0]
        asked = client.post(f"/api/incidents/{incident['id']}/resolve", {"note": "bad batch dropped (team)"})
        assert asked["state_requested"] == "resolved" and asked["changed"] == []
        assert sorted(asked["requested"]) == sorted(incident["alert_ids"]), asked
        for alert_id in incident["alert_ids"]:
            wait_for(
                lambda a=alert_id: client.get(f"/api/alerts/{a}")["state"] == "resolved",
                f"alert {alert_id} of the incident resolved by bob, published",
            )
            assert client.get(f"/api/alerts/{alert_id}")["note"] == "bad batch dropped (team)"
        own = [a for a in bob.client().get("/api/alerts", {"state": "all"}) if a["rule"] == "nonfinite"]
        assert [a["state"] for a in own] == ["resolved"]  # in bob's own file: bob applied it
        # What became of it, on the reader: the incident's `change`, and `collector incidents` says it.
        change = client.get("/api/runs/bob/exp/sft/incidents")[0]["change"]
        assert change["state"] == change["outcome"] == "resolved" and change["collector"] == "bob", change
        said = " ".join(cli(reader.db, "incidents", "--run", "bob/exp/sft").stdout.split())
        assert re.search(r"resolve asked \d+ s ago; applied by collector bob \d+ s later", said), said
        # A change bob cannot apply (a state this version never asks) is refused, and every reader says why.
        odd = "INSERT INTO lake.team_alert_changes VALUES (?, 'muted', NULL, ?, NULL, NULL)"
        lake_sql(dsn, data, odd, [nan[0]["id"], time.time()])
        change = wait_for(
            lambda: (c := client.get("/api/runs/bob/exp/sft/incidents")[0]["change"])["done_at"] and c,
            "bob refusing the change it cannot apply",
        )
        assert change["state"] == "muted" and "not 'muted'" in change["outcome"], change
        said = " ".join(cli(reader.db, "alerts", "--run", "bob/exp/sft").stdout.split())
        assert "muted asked" in said and "refused by collector bob" in said and "not 'muted'" in said, said
        # An id that is no incident is refused on the reader as on a collector.
        with pytest.raises(ApiError, match="no incident"):
            client.post(f"/api/incidents/{incident['id'] + 1}/ack", {"note": "x"})
        # A second collector may not take a live collector's name.
        twin = subprocess.run(
            [str(TEAM_PYTHON), "-m", "collector", "serve", "--db", str(tmp_path / "twin.duckdb"),
             str(tmp_path / "bob"), "--once", *lake_args(dsn, data, "alice")],
            cwd=REPO, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert twin.returncode != 0 and "a collector named 'alice' is live" in twin.stderr, twin.stderr[
            -2000:
        ]
        # A stop asked at the reader (the CLI, through its API) reaches the owning collector: its stop file.
        said = cli(reader.db, "stop", "alice/exp/sft", "--reason", "loss diverged (team test)").stdout
        said = " ".join(said.split())
        assert "asked to stop through the team lake: the collector that owns the run writes" in said, said
        assert "what became of it: collector run alice/exp/sft" in said, said
        stop_file = tmp_path / "alice" / "exp" / "sft" / "runwatch.stop"
        wait_for(stop_file.exists, "alice's collector to write the stop file asked through the lake")
        assert "loss diverged (team test)" in stop_file.read_text()
        # What became of it, on the reader: the run's detail, its stop route, `collector run` (within COLUMNS).
        state = wait_for(
            lambda: (s := client.get("/api/runs/alice/exp/sft/stop"))["state"] == "written" and s,
            "the reader to show alice's stop written",
        )
        assert state["collector"] == "alice" and state["collector_live"] is True, state
        assert state["by"] == "person" and state["reason"] == "loss diverged (team test)", state
        assert state["done_at"] >= state["asked_at"] and state["path"] == str(stop_file), state
        assert client.get("/api/runs/alice/exp/sft")["stop"] == state
        assert cli_json(reader.db, "run", "alice/exp/sft")["stop"] == state
        shown = subprocess.run(
            [sys.executable, "-m", "collector", "run", "alice/exp/sft", "--db", str(reader.db)],
            cwd=REPO, capture_output=True, text=True, env=os.environ | {"COLUMNS": "60"}, check=True,
        ).stdout  # fmt: skip
        assert all(len(line) <= 60 for line in shown.splitlines()), shown
        said = " ".join(shown.split())
        assert "by person (loss diverged (team test)); written by collector alice" in said, said
        # A run that has ended is refused at the reader as alone: a stop file left in its folder would stop
        # it again once it is resumed.
        (tmp_path / "bob" / "exp" / "sft" / "status.json").write_text('{"state": "completed"}')
        wait_for(
            lambda: (
                next(r["status"] for r in client.get("/api/runs") if r["id"] == "bob/exp/sft") == "completed"
            ),
            "bob's run completed in the lake",
        )
        refused = cli(reader.db, "stop", "bob/exp/sft", check=False)
        assert refused.returncode == 1 and "409 stop refused: run 'bob/exp/sft' has ended" in refused.stderr
        # One asked all the same (an older reader; or the run ended after it was asked) is refused by bob, who
        # says why in the same words, and the reader shows it.
        old_ask = "INSERT INTO lake.team_stops VALUES (?, 'old reader', ?, 'person', NULL, NULL)"
        lake_sql(dsn, data, old_ask, ["bob/exp/sft", time.time()])
        state = wait_for(
            lambda: (s := client.get("/api/runs/bob/exp/sft/stop"))["state"] == "refused" and s,
            "bob refusing the stop of its ended run",
        )
        assert state["outcome"] == "run 'bob/exp/sft' has ended (status.json: completed); nothing to stop"
        said = " ".join(cli(reader.db, "run", "bob/exp/sft").stdout.split())
        assert "by person (old reader); refused by collector bob" in said and state["outcome"] in said, said
        # A run that is one file has no folder to ask, as alone (its collector wrote the stop file into the root).
        refused = cli(reader.db, "stop", "alice/solo", check=False)
        assert refused.returncode == 1 and "409" in refused.stderr and "is the single file" in refused.stderr
        assert not (tmp_path / "alice" / "runwatch.stop").exists()
        # Asked of a collector that is not running: the request waits in the lake, and the reader says so.
        alice.ensure_stopped()
        cli(reader.db, "stop", "alice/exp/sft", "--reason", "again, alice away")
        said = " ".join(cli(reader.db, "run", "alice/exp/sft").stdout.split())
        assert "(again, alice away); not yet written: collector alice" in said, said
        away = "not yet written: collector alice is not running (it writes the stop file once it runs)"
        wait_for(
            lambda: away in " ".join(cli(reader.db, "run", "alice/exp/sft").stdout.split()),
            "the reader to say alice is not running (30 s after her last heartbeat)",
            timeout=120,
        )
    finally:
        for d in (alice, bob, reader):
            d.ensure_stopped()


# One statement on the lake from a process of its own (what an older reader, or psql-like tooling, would do).
LAKE_SQL = (
    "import json, sys, duckdb\n"
    "from collector.store.lake import LakeSpec, attach, load_extensions\n"
    "con = duckdb.connect()\n"
    "load_extensions(con)\n"
    "attach(con, LakeSpec.parse(sys.argv[1], sys.argv[2]))\n"
    "print(json.dumps(con.execute(sys.argv[3], json.loads(sys.argv[4])).fetchall()))\n"
)


def lake_sql(dsn: str, data: Path, sql: str, params: list | None = None, check: bool = True) -> list | None:
    """The statement's rows; None when it failed and not `check` (e.g. a table no collector has made yet)."""
    done = subprocess.run(
        [str(TEAM_PYTHON), "-c", LAKE_SQL, f"ducklake:postgres:{dsn}", str(data), sql, json.dumps(params or [])],
        cwd=REPO, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0 or not check, done.stderr[-2000:]
    return json.loads(done.stdout) if done.returncode == 0 else None


COMPACT_PROBE = """
import json, sys, time
import duckdb
from collector.store.db import Store
from collector.store.lake import LAKE, LakePublisher, LakeSpec
from collector.store.lake_compaction import MERGE_FROM_FILES
pub = LakePublisher(Store(sys.argv[3]), LakeSpec.parse(sys.argv[1], sys.argv[2]), "probe")
pub._connect()
pub.cur.execute(f"CREATE TABLE {LAKE}.compact_probe(a INTEGER)")
for a in range(MERGE_FROM_FILES):  # a commit, a small file each: a merge has something to record
    pub.cur.execute(f"INSERT INTO {LAKE}.compact_probe VALUES (?)", [a])
def compact(every_s):
    for _ in range(30):  # a collector's commit racing the merge: tried again, as the publishing thread does
        try:
            return pub.compact(every_s)
        except duckdb.TransactionException:
            time.sleep(0.2)
    raise RuntimeError("every compaction conflicted")
print(json.dumps([compact(0.0), compact(3600.0), compact(0.0)]))
"""


def test_a_lake_compacted_by_one_collector_is_not_compacted_again_by_another_within_the_period(pg, tmp_path):
    """Compaction is the whole lake's: N collectors each compacting every COMPACT_EVERY_S merged it N times over,
    and a collector publishes nothing while it compacts (seen at 4 x 250 runs: batches held 0.2-3 s). A
    compaction within the period, any collector's (the catalog's `compacted_table` change), makes `compact`
    pass."""
    dsn, data = pg.new_database("compacting"), tmp_path / "lake"
    done = subprocess.run(
        [str(TEAM_PYTHON), "-c", COMPACT_PROBE, f"ducklake:postgres:{dsn}", str(data), str(tmp_path / "p.duckdb")],
        cwd=REPO, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    # merged; passed (merged 0 s ago, within an hour); merged again when the period is 0 s
    assert json.loads(done.stdout) == [True, False, True]


def test_the_owning_collector_refuses_a_stop_of_an_ended_or_single_file_run_and_says_why(pg, tmp_path):
    """A stop row in the lake that the reader would refuse now (from an older reader, or a run that ended after
    it was asked) gets no stop file from the owner either: a single file's folder is the watched root (every
    sibling's stop file), an ended run's stop file would stop it again once resumed. The refusal is the
    request's outcome in the lake; a live run beside them is stopped as asked."""
    dsn, data, root = pg.new_database("refused"), tmp_path / "lake", tmp_path / "alice"
    for run in ("done", "live"):
        write_steps(root / "exp" / run / "metrics.jsonl", 1, 5)
    (root / "exp" / "done" / "status.json").write_text('{"state": "completed"}')
    write_steps(root / "single.jsonl", 1, 5)
    alice = TeamDaemon(tmp_path / "alice.duckdb", [root], *lake_args(dsn, data, "alice"))
    try:
        alice.start()
        wait_for(
            lambda: (
                {r["id"]: r["status"] for r in alice.client().get("/api/runs")}.get("exp/done") == "completed"
            ),
            "alice's runs read, exp/done completed",
        )
        published = "SELECT count(*) FROM lake.runs WHERE status = 'completed'"  # (team_stops made with it)
        wait_for(lambda: lake_sql(dsn, data, published, check=False) == [[1]], "alice's runs in the lake")
        asked = ["alice/exp/done", "alice/single", "alice/exp/live"]
        for i, run in enumerate(asked):  # as a reader before 96d1d47 / 8d9b4fd asked them
            lake_sql(
                dsn, data, "INSERT INTO lake.team_stops VALUES (?, 'old reader', ?, 'person', NULL, NULL)",
                [run, time.time() + i],
            )  # fmt: skip
        sql = "SELECT run_id, outcome FROM lake.team_stops WHERE done_at IS NOT NULL ORDER BY asked_at"

        def carried_out() -> list | None:
            rows = lake_sql(dsn, data, sql)
            return rows if len(rows) == len(asked) else None

        outcomes = wait_for(
            carried_out, "alice carrying out the three stops asked", proc=alice.proc, log=alice.log
        )
        assert [r for r, _ in outcomes] == asked
        said = dict(outcomes)
        assert "has ended (status.json: completed); nothing to stop" in said["alice/exp/done"], said
        assert "is the single file" in said["alice/single"] and "no run folder" in said["alice/single"], said
        assert said["alice/exp/live"] == "written"
        assert (root / "exp" / "live" / "runwatch.stop").exists()
        assert (
            not (root / "runwatch.stop").exists() and not (root / "exp" / "done" / "runwatch.stop").exists()
        )
        assert "nothing to stop" in alice.log.read_text()  # the owner's log says it too
    finally:
        alice.ensure_stopped()


def test_team_mode_asked_of_the_wrong_venv_or_without_its_folder_says_what_to_do(tmp_path, python):
    """Without DuckLake (the project's DuckDB 2.0 venv) or without --data-path: a clear error, nothing started."""
    (tmp_path / "root").mkdir()
    base = [
        python,
        "-m",
        "collector",
        "serve",
        "--db",
        str(tmp_path / "c.duckdb"),
        str(tmp_path / "root"),
        "--once",
    ]
    store = ["--store", "ducklake:postgres:dbname=lake host=127.0.0.1 port=1 user=nobody"]
    wrong_venv = subprocess.run(
        [*base, *store, "--data-path", str(tmp_path / "lake")], cwd=REPO, capture_output=True, text=True
    )
    assert wrong_venv.returncode == 1
    assert "team mode needs DuckDB 1.4.4" in wrong_venv.stderr and "make team-venv" in wrong_venv.stderr
    no_folder = subprocess.run([*base, *store], cwd=REPO, capture_output=True, text=True)
    assert no_folder.returncode == 1 and "--store needs --data-path" in no_folder.stderr, no_folder.stderr


def test_kill_9_mid_commit_and_postgres_restarted_lose_and_duplicate_nothing(pg, tmp_path):
    rng = random.Random(20261126)
    dsn, data = pg.new_database("kill"), tmp_path / "lake"
    metrics = tmp_path / "root" / "live" / "metrics.jsonl"
    write_steps(metrics, 1, 2000)
    carol = TeamDaemon(tmp_path / "carol.duckdb", [tmp_path / "root"], *lake_args(dsn, data, "carol"))
    reader = TeamDaemon(tmp_path / "reader.duckdb", [], *lake_args(dsn, data))
    written = 2000
    try:
        carol.start()
        reader.start()
        client = reader.client()
        # kill -9 at random moments while lines keep coming (a batch follows their commit, every 0.5-1 s).
        for _ in range(4):
            deadline = time.monotonic() + rng.uniform(1.0, 4.0)
            while time.monotonic() < deadline:
                write_steps(metrics, written + 1, written + 50)
                written += 50
                time.sleep(0.05)
            carol.kill9()
            carol.start(wait=rng.random() < 0.5)
        wait_for(lambda: exactly(client, "carol/live", written) or None, f"{written} steps, each once", 180)
        # Postgres restarted under the writer: the collector keeps its file, waits and goes on.
        pg.stop()
        write_steps(metrics, written + 1, written + 500)
        written += 500
        wait_for(
            lambda: "publishing failed" in carol.log.read_text(), "the collector to notice the lake is gone"
        )
        down = cli(
            reader.db, "runs", check=False
        )  # the team API says why it cannot answer (it was a bare 500)
        assert (
            down.returncode == 1
            and "503 this team API cannot reach the lake's Postgres catalog" in down.stderr
        )
        assert "password" not in down.stderr and "user=" not in down.stderr, down.stderr
        pg.start()
        write_steps(metrics, written + 1, written + 100)
        written += 100
        wait_for(
            lambda: exactly(client, "carol/live", written) or None, f"{written} steps after the restart", 180
        )
        assert "publishing again" in carol.log.read_text()
        assert carol.proc.poll() is None, "the collector exited while Postgres was down"
        # A resumed run rewrites its last 100 steps with other values: the lake holds what the collector's own
        # file holds, value for value (the rewritten series is published again whole).
        with metrics.open("a") as f:
            for s in range(written - 99, written + 1):
                f.write(json.dumps({"step": s, "data": {"train/loss": 2.0 / s, "train/lr": s * 1e-6}}) + "\n")
        own = carol.client()
        wait_for(lambda: raw(own, "live")[1][-1] == 2.0 / written, "carol's file to hold the rewritten steps")
        wait_for(
            lambda: raw(client, "carol/live") == raw(own, "live"), "the lake to hold the rewritten values"
        )
        steps, values = raw(client, "carol/live")
        assert steps == list(range(1, written + 1)) and values[-100:] == [
            2.0 / s for s in range(written - 99, written + 1)
        ]
    finally:
        carol.ensure_stopped()
        reader.ensure_stopped()
        if not pg.running():
            pg.start()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
