"""A file found to belong to another run than the one it was read into (an HF output folder reused by several
runs, split once the evidence shows): its points leave the run they were stored in, so that run is what its
remaining files say, and the file is read again from its start into its own run."""

from __future__ import annotations

import duckdb


def forget_source_points(cur: duckdb.DuckDBPyConnection, run_id: str, source_id: int) -> int | None:
    """Remove from `run_id` every point the source `source_id` wrote, its replaced values and quarantined
    lines; a step whose value it had replaced gets that value back (the newest one another file wrote);
    the run's per-metric summaries and last step are recomputed. Returns the run's highest step left (None
    when no point is left). Inside the caller's transaction."""
    cur.execute(
        """CREATE OR REPLACE TEMP TABLE rw_gone AS
           SELECT p.series, s.metric, p.step FROM point_rows p JOIN series s ON s.id = p.series
           WHERE s.run_id = ? AND p.source_id = ?""",
        [run_id, source_id],
    )
    cur.execute(
        "DELETE FROM point_rows WHERE source_id = ? AND series IN (SELECT id FROM series WHERE run_id = ?)",
        [source_id, run_id],
    )
    cur.execute("DELETE FROM points_replaced WHERE run_id = ? AND source_id = ?", [run_id, source_id])
    cur.execute("DELETE FROM quarantine WHERE source_id = ?", [source_id])
    cur.execute(
        """CREATE OR REPLACE TEMP TABLE rw_back AS
           SELECT g.series, r.metric, r.step, r.value, r.wall_time, r.source_id, r.segment, r.replaced_at
           FROM points_replaced r JOIN rw_gone g ON r.metric = g.metric AND r.step = g.step
           WHERE r.run_id = ?
           QUALIFY row_number() OVER (PARTITION BY g.series, r.step ORDER BY r.replaced_at DESC) = 1""",
        [run_id],
    )
    cur.execute(
        """INSERT INTO point_rows (series, step, value, wall_time, source_id, segment)
           SELECT series, step, value, wall_time, source_id, segment FROM rw_back"""
    )
    cur.execute(
        """DELETE FROM points_replaced r USING rw_back b WHERE r.run_id = ? AND r.metric = b.metric
           AND r.step = b.step AND r.source_id = b.source_id AND r.replaced_at = b.replaced_at""",
        [run_id],
    )
    cur.execute("DELETE FROM metric_stats WHERE run_id = ?", [run_id])
    cur.execute(
        """INSERT INTO metric_stats (run_id, metric, points, last_step, last_value, first_step)
           SELECT run_id, metric, count(*), max(step), arg_max(value, step), min(step)
           FROM points WHERE run_id = ? GROUP BY ALL""",
        [run_id],
    )
    last = cur.execute("SELECT max(last_step) FROM metric_stats WHERE run_id = ?", [run_id]).fetchall()[0][0]
    cur.execute("UPDATE runs SET last_step = ? WHERE id = ?", [last, run_id])
    return last


def forget_source(cur: duckdb.DuckDBPyConnection, run_id: str, source_id: int) -> int | None:
    """The source `source_id` is no longer read by any run (a copy of another run's metrics, found so once
    that run's better file came): its points leave `run_id` as in `forget_source_points`, and its row goes.
    Returns the run's highest step left. Inside the caller's transaction."""
    last = forget_source_points(cur, run_id, source_id)
    cur.execute("DELETE FROM sources WHERE id = ?", [source_id])
    return last


def remove_if_empty(cur: duckdb.DuckDBPyConnection, run_id: str) -> int | None:
    """Remove the run `run_id` when no file is read into it and no point of it is left (a run seen before
    its real run's first checkpoint, its files since found to be that run's): its row, series and summaries,
    the alerts judged from the points it held (their points are judged again in the run they moved to), its
    checkpoints and lists of files. Returns how many alerts went with it, None when the run stays. Inside the
    caller's transaction."""
    if cur.execute(
        """SELECT (SELECT count(*) FROM sources WHERE run_id = ?)
                  + (SELECT count(*) FROM point_rows p JOIN series s ON s.id = p.series WHERE s.run_id = ?)""",
        [run_id, run_id],
    ).fetchall()[0][0]:
        return None
    alerts = cur.execute("SELECT count(*) FROM alerts WHERE run_id = ?", [run_id]).fetchall()[0][0]
    cur.execute(
        "DELETE FROM alert_history WHERE alert_id IN (SELECT id FROM alerts WHERE run_id = ?)", [run_id]
    )
    owned = (
        "alerts",
        "series",
        "metric_stats",
        "points_replaced",
        "checkpoints",
        "skipped_files",
        "failing_files",
    )
    for table in owned:
        cur.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])  # (table names from this list only)
    cur.execute("DELETE FROM runs WHERE id = ?", [run_id])
    return alerts


def left_behind(cur: duckdb.DuckDBPyConnection) -> list[tuple[str, int, str, str]]:
    """Points a file left in a run it no longer belongs to, in runs that no file is read into: (that run,
    the file's source id and path, the run the file is read into now), one row per pair. Earlier collectors moved a live
    HF run's TensorBoard file into its output folder's run without taking its points from the run it was first
    read into (see `ingest.attribution`); the run of a renamed id keeps its points this way on purpose, so the
    caller tells those apart."""
    # in steps: one query joining every point to its series and source would read the whole points table at
    # every start; runs without a source are few (none, mostly), and only their series' points are read
    series = dict(
        cur.execute(
            """SELECT id, run_id FROM series WHERE run_id IN
               (SELECT id FROM runs WHERE id NOT IN (SELECT run_id FROM sources WHERE run_id IS NOT NULL))"""
        ).fetchall()
    )
    if not series:
        return []
    pairs = cur.execute(
        "SELECT DISTINCT series, source_id FROM point_rows WHERE series IN (SELECT unnest(?))", [list(series)]
    ).fetchall()
    sources = {
        sid: (path, run)
        for sid, path, run in cur.execute(
            "SELECT id, path, run_id FROM sources WHERE id IN (SELECT unnest(?))", [[x for _, x in pairs]]
        ).fetchall()
    }
    found = {(series[s], x, *sources[x]) for s, x in pairs if x in sources and sources[x][1] != series[s]}
    return sorted(found)
