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
