"""The team lake's format (`store/lake_format.py`) with real parts: a throwaway Postgres cluster, collectors and
readers as real `serve` processes, and the older collector itself, its code taken from this repository's history.

A collector older than 38b4216 counted what it had published from `team_marks`, which newer collectors no longer
write: on a lake they wrote it would publish every point again. Format 2 makes it stop at start, saying to
upgrade, having published nothing; and this code refuses a lake of a newer format the same way."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.store.lake_format import FORMAT, TOO_OLD
from collector.store.lake_reader import OLDER_COLLECTORS
from tests.collector.test_daemon_support import REPO, wait_for
from tests.collector.test_team import TEAM_PYTHON, TeamDaemon, lake_args, lake_sql, write_steps
from tests.pg_support import PgServer, team_cluster

# The newest collector that reads its marks from `team_marks` (38b4216's parent): the code a team may still run.
FORMAT_1_COMMIT = "4367796"


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    yield from team_cluster(TEAM_PYTHON)


def serve_once(code: Path, db: Path, roots: list[Path], *args: str) -> subprocess.CompletedProcess:
    """`serve --once` of the code in `code` (a checkout's root): one pass, one batch, then exit."""
    return subprocess.run(
        [str(TEAM_PYTHON), "-m", "collector", "serve", "--db", str(db), *map(str, roots), "--once", "--port", "0",
         *args],
        cwd=code, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def lake_points(dsn: str, data: Path) -> list:
    """Each (step, how many times the lake holds it) of alice's run's loss."""
    return lake_sql(
        dsn,
        data,
        """SELECT step, count(*) FROM lake.points WHERE run_id = 'alice/exp/sft' AND metric = 'train/loss'
           GROUP BY step ORDER BY step""",
    )


def format_1_code(tmp_path: Path) -> Path:
    """FORMAT_1_COMMIT's `collector` package, from this clone's history."""
    has = subprocess.run(
        ["git", "cat-file", "-e", f"{FORMAT_1_COMMIT}^{{commit}}"], cwd=REPO, capture_output=True
    )
    if has.returncode != 0:
        pytest.skip(
            f"this clone has no commit {FORMAT_1_COMMIT} (a shallow clone): the older collector cannot be run; "
            "test_a_lake_of_older_collectors_is_upgraded_and_refuses_them checks the same refusal"
        )
    out = tmp_path / "format-1"
    out.mkdir()
    archive = subprocess.run(
        ["git", "archive", FORMAT_1_COMMIT, "collector"], cwd=REPO, capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True)
    return out


def test_an_older_collector_stops_on_a_lake_this_code_wrote_and_publishes_nothing_twice(pg, tmp_path):
    """The older collector writes a lake; this code takes it over from the same file (the lake upgraded, nothing
    published twice) and publishes more; the older one started again on that file (a downgrade) would publish
    its points again from its stale marks: it exits 1 at start, naming the lake and saying to upgrade, and the
    lake holds every point once."""
    old = format_1_code(tmp_path)
    dsn, data = pg.new_database("downgrade"), tmp_path / "lake"
    root, db = tmp_path / "alice", tmp_path / "alice.duckdb"
    metrics = root / "exp" / "sft" / "metrics.jsonl"
    write_steps(metrics, 1, 100)
    first = serve_once(old, db, [root], *lake_args(dsn, data, "alice"))
    assert first.returncode == 0, first.stderr[-3000:]
    assert lake_sql(dsn, data, "SELECT count(*) FROM lake.team_marks")[0][0] > 0  # a format-1 lake
    assert lake_points(dsn, data) == [[s, 1] for s in range(1, 101)]

    write_steps(metrics, 101, 120)
    new = serve_once(REPO, db, [root], *lake_args(dsn, data, "alice"))
    assert new.returncode == 0, new.stderr[-3000:]
    assert lake_points(dsn, data) == [[s, 1] for s in range(1, 121)]
    assert lake_sql(dsn, data, "SELECT max(format) FROM lake.team_format") == [[FORMAT]]

    write_steps(metrics, 121, 130)
    again = serve_once(old, db, [root], *lake_args(dsn, data, "alice"))
    assert again.returncode == 1, again.stderr[-3000:]
    said = again.stderr.strip().splitlines()[-1]
    assert said.startswith(f"collector serve: cannot publish into the lake ducklake:postgres:{dsn}"), said
    assert TOO_OLD in said, said
    assert "Traceback" not in again.stderr
    assert lake_points(dsn, data) == [
        [s, 1] for s in range(1, 121)
    ]  # nothing twice, nothing of the older one's
    # This code goes on where it was.
    done = serve_once(REPO, db, [root], *lake_args(dsn, data, "alice"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert lake_points(dsn, data) == [[s, 1] for s in range(1, 131)]


# A lake as format-1 collectors left it: their names in `team_collectors`, marks in `team_marks` (bob's; the
# statements are the older code's own).
FORMAT_1_LAKE = [
    "CREATE TABLE lake.team_collectors (name VARCHAR, ns BIGINT, host VARCHAR, pid BIGINT, started_at DOUBLE, "
    "heartbeat_at DOUBLE)",
    "CREATE TABLE lake.team_marks (ns BIGINT, series BIGINT, points BIGINT, last_step BIGINT, replaced BIGINT)",
    "INSERT INTO lake.team_collectors VALUES ('bob', 7, 'elsewhere', 1, 1.0, 2.0)",
    "INSERT INTO lake.team_marks VALUES (7, 30064771073, 10, 10, 0)",
]
# What a format-1 collector reads when it starts (claiming its name) and at its first batch (its marks).
FORMAT_1_READS = [
    "SELECT host, pid, heartbeat_at, ns FROM lake.team_collectors WHERE name = 'bob'",
    "SELECT name FROM lake.team_collectors WHERE ns = 7 AND name <> 'bob'",
    "SELECT series & 4294967295, points, last_step, replaced FROM lake.team_marks WHERE ns = 7",
    "SELECT count(*) FROM lake.team_collectors",
]


def test_a_lake_of_older_collectors_is_upgraded_and_refuses_them(pg, tmp_path):
    """A format-1 lake (made here, as those collectors made it): this code's first collector upgrades it in one
    transaction (the names kept, `team_format` says 2), and every read a format-1 collector makes of its tables
    then fails with TOO_OLD. A team API on it says, before, that older collectors wrote it, and after, counts the
    names kept."""
    dsn, data = pg.new_database("upgrade"), tmp_path / "lake"
    for statement in FORMAT_1_LAKE:
        lake_sql(dsn, data, statement)
    reader = TeamDaemon(tmp_path / "desk.duckdb", [], *lake_args(dsn, data))
    try:
        reader.start()
        lake = reader.client().get("/api/health")["lake"]
        assert lake["collectors"] == 0 and lake["message"] == OLDER_COLLECTORS, lake
        root = tmp_path / "alice"
        write_steps(root / "exp" / "sft" / "metrics.jsonl", 1, 20)
        new = serve_once(REPO, tmp_path / "alice.duckdb", [root], *lake_args(dsn, data, "alice"))
        assert new.returncode == 0, new.stderr[-3000:]
        lake = reader.client().get("/api/health")["lake"]
        assert lake["collectors"] == 2 and "message" not in lake, lake  # bob's name kept, alice's
    finally:
        reader.ensure_stopped()
    assert lake_sql(dsn, data, "SELECT max(format) FROM lake.team_format") == [[FORMAT]]
    names = lake_sql(dsn, data, "SELECT name, ns, host, pid, heartbeat_at FROM lake.team_names ORDER BY name")
    assert [n[0] for n in names] == ["alice", "bob"] and names[1][1:] == [7, "elsewhere", 1, 2.0], names
    for read in FORMAT_1_READS:
        done = subprocess.run(
            [str(TEAM_PYTHON), "-c", LAKE_READ, f"ducklake:postgres:{dsn}", str(data), read],
            cwd=REPO, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert done.returncode == 1 and TOO_OLD in done.stderr, (read, done.stdout, done.stderr[-2000:])
    assert lake_points(dsn, data) == [[s, 1] for s in range(1, 21)]


LAKE_READ = (
    "import sys, duckdb\n"
    "from collector.store.lake import LakeSpec, attach, load_extensions\n"
    "con = duckdb.connect()\n"
    "load_extensions(con)\n"
    "attach(con, LakeSpec.parse(sys.argv[1], sys.argv[2]))\n"
    "try:\n"
    "    print(con.execute(sys.argv[3]).fetchall())\n"
    "except duckdb.Error as e:\n"
    "    sys.exit(str(e))\n"
)


def test_a_lake_of_a_newer_format_is_refused_by_a_collector_a_reader_and_forget(pg, tmp_path):
    """A lake a newer runwatch upgraded (its `team_format` past FORMAT): a collector, a team API and `collector
    forget` each exit 1 at start with one line naming the lake and its format and saying to upgrade; nothing is
    published. A collector running as it was upgraded says the same at its next heartbeat."""
    dsn, data = pg.new_database("newer"), tmp_path / "lake"
    root, db = tmp_path / "alice", tmp_path / "alice.duckdb"
    metrics = root / "exp" / "sft" / "metrics.jsonl"
    write_steps(metrics, 1, 10)
    first = serve_once(REPO, db, [root], *lake_args(dsn, data, "alice"))
    assert first.returncode == 0, first.stderr[-3000:]
    write_steps(tmp_path / "bob" / "exp" / "b" / "metrics.jsonl", 1, 10)
    bob = TeamDaemon(tmp_path / "bob.duckdb", [tmp_path / "bob"], *lake_args(dsn, data, "bob"))
    newer = f"the team lake ducklake:postgres:{dsn} is runwatch lake format {FORMAT + 1}, newer than this runwatch"
    try:
        bob.start()
        wait_for(lambda: "publishing into" in bob.log.read_text(), "bob publishing")
        lake_sql(dsn, data, "INSERT INTO lake.team_format VALUES (?, 0)", [FORMAT + 1])
        wait_for(lambda: newer in bob.log.read_text(), "bob refusing the lake upgraded")
    finally:
        bob.ensure_stopped()
    write_steps(metrics, 11, 20)
    collector = serve_once(REPO, db, [root], *lake_args(dsn, data, "alice"))
    reader = serve_once(REPO, tmp_path / "desk.duckdb", [], *lake_args(dsn, data))
    forget = subprocess.run(
        [str(TEAM_PYTHON), "-m", "collector", "forget", *lake_args(dsn, data), "--collector", "alice"],
        cwd=REPO, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    for what, done in (("collector", collector), ("reader", reader), ("forget", forget)):
        said = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
        assert done.returncode == 1 and newer in said and "upgrade runwatch" in said, (
            what,
            done.stderr[-3000:],
        )
        assert "Traceback" not in done.stderr, what
    assert lake_points(dsn, data) == [[s, 1] for s in range(1, 11)]
