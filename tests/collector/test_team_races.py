"""Team mode's races on a collector's name, with real parts: real `serve` and `collector forget` processes on a
real Postgres-backed lake, each window between a check and its write held open on purpose (a forget paused
right after its check; every lake commit held by a Postgres table lock), so the race happens every time."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.store import lake_names
from collector.store.lake import namespace
from tests.collector.test_daemon_support import REPO, marker_path, wait_for
from tests.collector.test_team import LAKE_SQL, TEAM_PYTHON, TeamDaemon, lake_args, lake_sql, write_steps
from tests.pg_support import BIN, PgServer, _quote, team_cluster


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    yield from team_cluster(TEAM_PYTHON)


# `collector forget` that stops right after it found the name not live, until the test's file says go on.
PAUSED_FORGET = """
import os, sys, time
from collector.cli import main
from collector.store import lake_forget
checked = lake_forget._refuse_live
def paused(con, name):
    checked(con, name)
    open(os.environ["FORGET_CHECKED"], "w").close()
    while not os.path.exists(os.environ["FORGET_GO"]):
        time.sleep(0.05)
lake_forget._refuse_live = paused
sys.exit(main(["forget", *sys.argv[1:]]))
"""

CAROLS_POINTS = """SELECT run_id, metric, count(*), count(DISTINCT step), min(step), max(step) FROM lake.points
                   WHERE starts_with(run_id, 'carol/') GROUP BY ALL ORDER BY ALL"""


def pg_value(pg: PgServer, db: str, sql: str) -> str:
    cmd = [str(BIN / "psql"), "-h", "127.0.0.1", "-p", str(pg.port), "-U", pg.user, "-d", db, "-Atc", sql]
    done = pg._run(cmd, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def waiting_on_locks(pg: PgServer, db: str) -> int:
    """How many of the lake's Postgres sessions wait for a lock (a table's or an advisory one)."""
    sql = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
    return int(pg_value(pg, db, sql))


@contextlib.contextmanager
def holding(pg: PgServer, db: str, statement: str) -> Iterator[None]:
    """A psql session of the lake's database that has run `statement` in an open transaction (and so holds
    the locks it took) while the block runs."""
    cmd = [
        str(BIN / "psql"),
        "-h",
        "127.0.0.1",
        "-p",
        str(pg.port),
        "-U",
        pg.user,
        "-d",
        db,
        "-v",
        "ON_ERROR_STOP=1",
    ]
    if pg.as_root:
        cmd = ["su", "postgres", "-s", "/bin/sh", "-c", " ".join(_quote(c) for c in cmd)]
    held = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/")
    assert held.stdin is not None and held.stdout is not None
    held.stdin.write(f"BEGIN;\n{statement}\n\\echo held\n")
    held.stdin.flush()
    lines = iter(held.stdout.readline, "")
    assert any(line.strip() == "held" for line in lines), f"psql did not run {statement}"
    try:
        yield
    finally:
        held.stdin.write("COMMIT;\n")
        held.stdin.close()
        held.wait(timeout=60)


def commits_held(pg: PgServer, db: str) -> contextlib.AbstractContextManager[None]:
    """Every lake commit waits while the block runs: DuckLake's snapshot table locked against writes (reads
    go on)."""
    return holding(pg, db, "LOCK TABLE ducklake_snapshot IN EXCLUSIVE MODE;")


def carols_points(dsn: str, data: Path) -> list:
    return lake_sql(dsn, data, CAROLS_POINTS, check=False) or []


def every_step(last: int) -> list:
    """carol's two runs' two series, each steps 1..last once."""
    return [
        [f"carol/test/{r}", m, last, last, 1, last] for r in ("a", "b") for m in ("train/loss", "train/lr")
    ]


def serving(daemon: TeamDaemon) -> bool:
    try:
        return json.loads(marker_path(daemon.db).read_text()).get("pid") == daemon.proc.pid
    except (OSError, ValueError):
        return False


def test_forget_meeting_a_collector_of_that_name_as_it_starts(pg, tmp_path):
    """`collector forget --collector carol` has found carol not live, and carol starts again before forget
    deletes: carol's start waits until forget is done, then registers and publishes every row again. Before,
    carol registered and published in that window and forget deleted it all under it: carol ran on with its
    name gone and its rows missing from the lake, sure they were there."""
    dsn, data = pg.new_database("forgetrace"), tmp_path / "lake"
    files = [tmp_path / "carol" / "test" / r / "metrics.jsonl" for r in ("a", "b")]
    for metrics in files:
        write_steps(metrics, 1, 50)
    carol = TeamDaemon(tmp_path / "carol.duckdb", [tmp_path / "carol"], *lake_args(dsn, data, "carol"))
    checked, go = tmp_path / "forget-checked", tmp_path / "forget-go"
    forget = None
    try:
        carol.start()
        wait_for(lambda: carols_points(dsn, data) == every_step(50), "carol's 50 steps in the lake")
        assert carol.stop() == 0  # its name stays in the lake, but its pid is gone: not live on this host
        forget = subprocess.Popen(
            [str(TEAM_PYTHON), "-c", PAUSED_FORGET, *lake_args(dsn, data), "--collector", "carol"],
            cwd=REPO, env=os.environ | {"FORGET_CHECKED": str(checked), "FORGET_GO": str(go)},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        wait_for(checked.exists, "forget to find carol not live", proc=forget)
        for metrics in files:
            write_steps(metrics, 51, 80)
        carol.start(wait=False)
        # carol either waits for forget (its name's lock) or, as before, registered and published meanwhile
        wait_for(
            lambda: waiting_on_locks(pg, "forgetrace") or carols_points(dsn, data) == every_step(80),
            "carol's start to wait for forget or to publish its new lines",
            proc=carol.proc,
            log=carol.log,
        )
        go.touch()
        out, err = forget.communicate(timeout=180)
        assert forget.returncode == 0 and "forgot collector 'carol': deleted" in out, err[-2000:]
        wait_for(lambda: serving(carol), "carol to serve", proc=carol.proc, log=carol.log)
        wait_for(
            lambda: carols_points(dsn, data) == every_step(80),
            "every carol point in the lake once, published again after forget",
            timeout=60,
        )
        registered = lake_sql(dsn, data, "SELECT pid FROM lake.team_names WHERE name = 'carol'")
        assert registered == [[carol.proc.pid]], registered
        said = carol.log.read_text()  # why it waited at start
        assert "collector 'carol': another process holds its name in the lake" in said, said[-2000:]
        runs = lake_sql(dsn, data, "SELECT id FROM lake.runs WHERE starts_with(id, 'carol/') ORDER BY id")
        assert runs == [["carol/test/a"], ["carol/test/b"]], runs
    finally:
        go.touch()
        if forget is not None and forget.poll() is None:
            forget.kill()
        carol.ensure_stopped()


def test_two_collectors_of_one_name_starting_at_once(pg, tmp_path):
    """Two `serve --collector carol` start together, each before the other registered (every lake commit
    held until both wait): one registers and runs, the other stops at start saying that carol is live. Before,
    both passed the check and both ran under one name."""
    dsn, data = pg.new_database("twins"), tmp_path / "lake"
    for root, run in (("one", "a"), ("two", "b")):
        write_steps(tmp_path / root / "test" / run / "metrics.jsonl", 1, 20)
    # The lake and a carol that has gone since: both starts find its name free (its pid is dead).
    first = TeamDaemon(tmp_path / "first.duckdb", [tmp_path / "one"], *lake_args(dsn, data, "carol")).start()
    wait_for(lambda: lake_sql(dsn, data, "SELECT count(*) FROM lake.runs") == [[1]], "the first carol's run")
    assert first.stop() == 0
    twins = [
        TeamDaemon(tmp_path / f"{root}.duckdb", [tmp_path / root], *lake_args(dsn, data, "carol"))
        for root in ("one", "two")
    ]
    try:
        with commits_held(pg, "twins"):
            for twin in twins:
                twin.start(wait=False)
            wait_for(lambda: waiting_on_locks(pg, "twins") >= 2, "both starts to wait on a lock")
        wait_for(
            lambda: all(t.proc.poll() is not None or serving(t) for t in twins),
            "each carol to serve or to stop",
        )
        stopped = [t for t in twins if t.proc.poll() is not None]
        assert len(stopped) == 1, "both carols run under one name"
        said = stopped[0].log.read_text()
        assert stopped[0].proc.returncode != 0 and "a collector named 'carol' is live" in said, said[-2000:]
        (running,) = [t for t in twins if t is not stopped[0]]
        registered = lake_sql(dsn, data, "SELECT pid FROM lake.team_names WHERE name = 'carol'")
        assert registered == [[running.proc.pid]], registered
    finally:
        for twin in twins:
            twin.ensure_stopped()


# `collector forget` waiting 2 s, not a minute, for a name's lock another process holds.
IMPATIENT_FORGET = """
import sys
from collector.cli import main
from collector.store import lake_names
lake_names.NAME_LOCK_WAIT_S = 2
sys.exit(main(["forget", *sys.argv[1:]]))
"""


def test_forget_while_another_process_holds_the_name_says_so_and_deletes_nothing(pg, tmp_path):
    """Another process (here psql) holds carol's name lock in the catalog for longer than forget waits:
    forget says so naming carol and what was done (nothing), and every carol row is still there."""
    dsn, data = pg.new_database("heldname"), tmp_path / "lake"
    for run in ("a", "b"):
        write_steps(tmp_path / "carol" / "test" / run / "metrics.jsonl", 1, 10)
    carol = TeamDaemon(tmp_path / "carol.duckdb", [tmp_path / "carol"], *lake_args(dsn, data, "carol"))
    try:
        carol.start()
        wait_for(lambda: carols_points(dsn, data) == every_step(10), "carol's 10 steps in the lake")
    finally:
        assert carol.stop() == 0
    with holding(pg, "heldname", f"SELECT pg_advisory_lock({lake_names.NAME_LOCKS}, {namespace('carol')});"):
        waited = subprocess.run(
            [str(TEAM_PYTHON), "-c", IMPATIENT_FORGET, *lake_args(dsn, data), "--collector", "carol"],
            cwd=REPO, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
    assert waited.returncode == 1, waited.stderr[-2000:]
    assert "another process holds its name in the lake" in waited.stderr, waited.stderr  # said as it waits
    assert "collector 'carol': another process held its name in the lake for 2 s" in waited.stderr, (
        waited.stderr
    )
    assert "nothing was done" in waited.stderr and "Traceback" not in waited.stderr, waited.stderr[-2000:]
    assert carols_points(dsn, data) == every_step(10)
    assert lake_sql(dsn, data, "SELECT count(*) FROM lake.team_names WHERE name = 'carol'") == [[1]]


# `collector forget` that takes every heartbeat for an old one: it sees a running collector as one not seen for
# LIVE_S (a laptop asleep, a process stopped, a host cut off from Postgres).
UNSEEN_FORGET = """
import sys
from collector.cli import main
from collector.store import lake_names
lake_names.LIVE_S = 0.0
sys.exit(main(["forget", *sys.argv[1:]]))
"""


def test_a_collector_forgotten_while_not_seen_registers_and_publishes_again(pg, tmp_path):
    """carol runs on after forget took it for gone: its next heartbeat finds its registration gone, it says so,
    registers again and publishes every row again, and its later lines follow. Before, it ran on with its name
    gone (another carol could start beside it) and its rows missing from the lake."""
    dsn, data = pg.new_database("unseen"), tmp_path / "lake"
    files = [tmp_path / "carol" / "test" / r / "metrics.jsonl" for r in ("a", "b")]
    for metrics in files:
        write_steps(metrics, 1, 30)
    carol = TeamDaemon(tmp_path / "carol.duckdb", [tmp_path / "carol"], *lake_args(dsn, data, "carol"))
    try:
        carol.start()
        wait_for(lambda: carols_points(dsn, data) == every_step(30), "carol's 30 steps in the lake")
        forgot = subprocess.run(
            [str(TEAM_PYTHON), "-c", UNSEEN_FORGET, *lake_args(dsn, data), "--collector", "carol"],
            cwd=REPO, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert forgot.returncode == 0 and "forgot collector 'carol': deleted" in forgot.stdout, forgot.stderr
        sql = "SELECT pid FROM lake.team_names WHERE name = 'carol'"
        wait_for(
            lambda: (
                lake_sql(dsn, data, sql) == [[carol.proc.pid]] and carols_points(dsn, data) == every_step(30)
            ),
            "carol registered again, every point in the lake again",
            timeout=90,
            proc=carol.proc,
            log=carol.log,
        )
        said = carol.log.read_text()
        assert "collector 'carol' is no longer registered in the lake" in said, said[-2000:]
        for metrics in files:
            write_steps(metrics, 31, 40)
        wait_for(lambda: carols_points(dsn, data) == every_step(40), "carol's later lines in the lake")
    finally:
        carol.ensure_stopped()


def test_a_collector_whose_name_was_taken_while_it_was_stopped_says_each_reason_it_cannot_publish(
    pg, tmp_path
):
    """carol, stopped (SIGSTOP: a laptop asleep), is forgotten and another carol starts in her name. Woken, the
    first finds its registration gone, then is refused while the other is live, and its log says both. Before,
    it said only the first ('registering it again') and then nothing while every batch was refused."""
    dsn, data = pg.new_database("taken"), tmp_path / "lake"
    write_steps(tmp_path / "carol" / "test" / "a" / "metrics.jsonl", 1, 10)
    write_steps(tmp_path / "other" / "test" / "z" / "metrics.jsonl", 1, 5)
    first = TeamDaemon(tmp_path / "first.duckdb", [tmp_path / "carol"], *lake_args(dsn, data, "carol"))
    second = TeamDaemon(tmp_path / "second.duckdb", [tmp_path / "other"], *lake_args(dsn, data, "carol"))
    holder = "SELECT pid FROM lake.team_names WHERE name = 'carol'"
    try:
        first.start()
        wait_for(
            lambda: lake_sql(dsn, data, "SELECT count(*) FROM lake.runs") == [[1]], "the first carol's run"
        )
        os.kill(first.proc.pid, signal.SIGSTOP)
        forgot = subprocess.run(
            [str(TEAM_PYTHON), "-c", UNSEEN_FORGET, *lake_args(dsn, data), "--collector", "carol"],
            cwd=REPO, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert forgot.returncode == 0, forgot.stderr
        second.start()
        wait_for(lambda: lake_sql(dsn, data, holder) == [[second.proc.pid]], "the second carol registered")
        os.kill(first.proc.pid, signal.SIGCONT)
        wait_for(
            lambda: "publishing still fails, now: a collector named 'carol' is live" in first.log.read_text(),
            "the first carol saying it is refused",
            proc=first.proc,
            log=first.log,
        )
        said = first.log.read_text()
        assert "collector 'carol' is no longer registered in the lake" in said, said[-2000:]
        assert f"pid {second.proc.pid}" in said.split("publishing still fails, now:")[1], said[-2000:]
        assert lake_sql(dsn, data, holder) == [[second.proc.pid]]  # the name stays the live one's
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(first.proc.pid, signal.SIGCONT)
        first.ensure_stopped()
        second.ensure_stopped()


def test_a_duckdb_file_catalog_is_one_processs_and_the_second_says_so(tmp_path):
    """A lake whose catalog is a DuckDB file (`ducklake:/path/cat.ducklake`) is opened by one process at a time
    (DuckDB locks the file): with one collector serving it, a second collector (another name, so no name lock
    could be what refuses it) and a team API each exit 1 at start, saying so and what to use instead; the first
    one's points are in the lake once."""
    store = ["--store", f"ducklake:{tmp_path / 'cat.ducklake'}", "--data-path", str(tmp_path / "lake")]
    write_steps(tmp_path / "alice" / "exp" / "a" / "metrics.jsonl", 1, 20)
    write_steps(tmp_path / "bob" / "exp" / "b" / "metrics.jsonl", 1, 20)
    alice = TeamDaemon(tmp_path / "alice.duckdb", [tmp_path / "alice"], *store, "--collector", "alice")
    try:
        alice.start()
        wait_for(lambda: "publishing into" in alice.log.read_text(), "alice publishing into the file catalog")
        for name, roots, extra in (("bob", [tmp_path / "bob"], ["--collector", "bob"]), ("desk", [], [])):
            done = subprocess.run(
                [str(TEAM_PYTHON), "-m", "collector", "serve", "--db", str(tmp_path / f"{name}.duckdb"),
                 *map(str, roots), "--once", "--port", "0", *store, *extra],
                cwd=REPO, capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            said = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
            assert done.returncode == 1, (name, done.stderr[-3000:])
            assert (
                f"its catalog is a DuckDB file, which one process at a time may open, and process {alice.proc.pid}"
                in said
            ), said
            assert "use a Postgres catalog" in said and "Traceback" not in done.stderr, said
    finally:
        alice.ensure_stopped()
    rows = subprocess.run(
        [str(TEAM_PYTHON), "-c", LAKE_SQL, store[1], store[3],
         "SELECT run_id, count(*), count(DISTINCT step) FROM lake.points GROUP BY ALL ORDER BY ALL", "[]"],
        cwd=REPO, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert json.loads(rows.stdout) == [["alice/exp/a", 40, 20]], rows.stderr[-2000:]
