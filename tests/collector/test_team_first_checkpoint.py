"""Team mode: a live HF run's early files, read as runs of their own before its first checkpoint
(`test_live_hf_first_checkpoint`), leave the team's lake too when the checkpoint shows whose they are. The
collector removes the early runs from its file; its publisher deletes their rows (runs, series, summaries,
sources, alerts, ...) and points from the lake, so a reader stops listing them and the output folder's run holds
each point once. A throwaway PostgreSQL, a real collector `serve --store` publishing, a real reader `serve
--store` without roots."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from collector.api.client import ApiError
from tests.collector.test_daemon_support import cli_json, wait_for
from tests.collector.test_live_hf_first_checkpoint import LIFE, console, first_checkpoint, stored, tensorboard
from tests.collector.test_team import TEAM_PYTHON, TeamDaemon, lake_args, lake_sql
from tests.pg_support import PgServer, team_cluster


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    yield from team_cluster(TEAM_PYTHON)


def lake_points(dsn: str, data, run: str) -> list[list]:
    """The run's points in the lake per metric: (metric, points, distinct steps)."""
    return lake_sql(
        dsn,
        data,
        """SELECT metric, count(*), count(DISTINCT step) FROM lake.points WHERE run_id = ?
           GROUP BY ALL ORDER BY ALL""",
        [run],
    )


def lake_rows_of(dsn: str, data, runs: list[str]) -> dict[str, int]:
    """How many rows of `runs` every lake table with a run column holds (each table the lake has, so a table a
    later schema adds is looked at too), and the points whose series is gone (`orphan points`)."""
    tables = lake_sql(
        dsn,
        data,
        """SELECT DISTINCT table_name, column_name FROM information_schema.columns
           WHERE table_catalog = 'lake' AND table_schema = 'main'
             AND (column_name = 'run_id' OR (table_name = 'runs' AND column_name = 'id'))
             AND table_name IN (SELECT table_name FROM information_schema.tables
                                WHERE table_catalog = 'lake' AND table_type = 'BASE TABLE')""",
    )
    assert {t for t, _ in tables} >= {"runs", "series", "metric_stats", "sources", "alerts"}, tables
    parts = [
        f'SELECT \'{t}\', count(*) FROM lake."{t}" WHERE "{c}" IN (SELECT unnest(?::VARCHAR[]))'
        for t, c in tables
    ]
    parts.append(
        "SELECT 'orphan points', count(*) FROM lake.point_rows p WHERE p.series NOT IN (SELECT id FROM lake.series)"
    )
    rows = lake_sql(dsn, data, " UNION ALL ".join(parts), [runs] * len(tables))
    return {t: n for t, n in rows if n}


def test_early_runs_removed_at_the_first_checkpoint_leave_the_lake_and_the_reader(pg, tmp_path):
    dsn, data = pg.new_database("first_checkpoint"), tmp_path / "lake"
    root = tmp_path / "root"
    out = root / "outputs"
    root.mkdir()
    ann = TeamDaemon(tmp_path / "ann.duckdb", [root], *lake_args(dsn, data, "ann"))
    reader = TeamDaemon(tmp_path / "reader.duckdb", [], *lake_args(dsn, data))
    early = [f"ann/outputs/runs/{LIFE}", "ann/outputs/logs"]
    try:
        ann.start()
        reader.start()
        client = reader.client()
        tensorboard(out)  # the Trainer's files before its first checkpoint: each a run of its own, published
        console(out)
        wait_for(
            lambda: sorted(r["id"] for r in client.get("/api/runs")) == sorted(early),
            "the two early runs listed by the reader",
            log=ann.log,
        )
        wait_for(lambda: lake_points(dsn, data, early[0]), "the TensorBoard file's points in the lake")
        first_checkpoint(out)
        wait_for(
            lambda: [r["id"] for r in client.get("/api/runs")] == ["ann/outputs"],
            "the early runs gone from the reader's overview",
            log=ann.log,
        )
        for run in early:  # nor found by name
            with pytest.raises(ApiError) as asked:
                client.get(f"/api/runs/{run}")
            assert asked.value.status == 404, run
        # The output folder's run holds what a fresh reading of the folder finds, each point once.
        fresh = tmp_path / "fresh.duckdb"
        cli_json(fresh, "ingest", str(root))
        want = [[m, n, n] for run, m, n in stored(fresh)["points"] if run == "outputs"]
        assert want and {run for run, *_ in stored(fresh)["points"]} == {"outputs"}
        wait_for(
            lambda: lake_points(dsn, data, "ann/outputs") == want, "outputs' points in the lake", log=ann.log
        )
        # Nothing of the early runs is left in any lake table, and no point outlived its series.
        assert lake_rows_of(dsn, data, early) == {}
    finally:
        assert reader.stop() == 0
        assert ann.stop() == 0
    told = ann.log.read_text()
    assert (
        f"its points left run outputs/runs/{LIFE}, read again; run outputs/runs/{LIFE} had no other" in told
    )


def test_a_ghost_run_an_earlier_collector_published_leaves_the_lake_at_its_next_start(pg, tmp_path):
    """Earlier collectors moved the TensorBoard file into `outputs` but left its points in the early run, which
    they had published. Written into the collector's file here as they left it (with the team venv's DuckDB,
    whose file it is); at its next start the collector takes the ghost out of its file, and out of the lake."""
    dsn, data = pg.new_database("ghost_restart"), tmp_path / "lake"
    root = tmp_path / "root"
    out = root / "outputs"
    root.mkdir()
    ann = TeamDaemon(tmp_path / "ann.duckdb", [root], *lake_args(dsn, data, "ann"))
    reader = TeamDaemon(tmp_path / "reader.duckdb", [], *lake_args(dsn, data))
    ghost = f"ann/outputs/runs/{LIFE}"
    try:
        ann.start()
        reader.start()
        client = reader.client()
        events = tensorboard(out)
        wait_for(lambda: [r["id"] for r in client.get("/api/runs")] == [ghost], "the early run", log=ann.log)
        wait_for(lambda: lake_points(dsn, data, ghost), "its points in the lake")
        assert ann.stop() == 0
        first_checkpoint(out)
        left = subprocess.run(
            [str(TEAM_PYTHON), "-c", LEFT_BEHIND, str(ann.db), str(events)], capture_output=True, text=True, timeout=120
        )  # fmt: skip
        assert left.returncode == 0, left.stderr[-2000:]
        ann.start()
        wait_for(
            lambda: [r["id"] for r in client.get("/api/runs")] == ["ann/outputs"],
            "the ghost gone from the reader's overview",
            log=ann.log,
        )
        fresh = tmp_path / "fresh.duckdb"
        cli_json(fresh, "ingest", str(root))
        want = [[m, n, n] for run, m, n in stored(fresh)["points"] if run == "outputs"]
        wait_for(
            lambda: lake_points(dsn, data, "ann/outputs") == want, "outputs' points in the lake", log=ann.log
        )
        assert lake_rows_of(dsn, data, [ghost]) == {}
    finally:
        assert reader.stop() == 0
        assert ann.stop() == 0
    assert (
        f"{events}: is read into run outputs: its points left run outputs/runs/{LIFE}" in ann.log.read_text()
    )


# What `place_source` wrote before the ghost's points were taken out with it (test_live_hf_first_checkpoint).
LEFT_BEHIND = """
import sys, duckdb
con = duckdb.connect(sys.argv[1])
con.execute(
    '''UPDATE sources SET run_id = 'outputs', format = 'hf_tensorboard', segment = segment + 1,
       byte_offset = 0, size = 0, inode = 0 WHERE path = ?''',
    [sys.argv[2]],
)
con.close()
"""
