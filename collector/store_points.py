"""Writing points: plain appends, the replace-the-same-step merge, and DuckDB's bulk read of verl JSONL.

A mixin of `Store` (same connection and transactions), kept apart because it is the hot path of the
collector and the one place with the replacement rule: the latest write of a (run, metric, step) stays in
`points`, an earlier different value moves to `points_replaced` with the segment it came from.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import duckdb
import pyarrow as pa

from collector.model import Points

# Bits a bulk read may spend on counting repeated steps exactly (steps in its range x metrics): 32 MiB.
BULK_BITMAP_BITS = 1 << 28


class BulkMismatch(ValueError):
    """DuckDB's bulk read did not account for every value in the bytes; the chunk needs another reading."""


@dataclass(slots=True)
class SourceState:
    """What the store remembers about one file it reads: identity, how far it got, and which life it is in."""

    id: int
    run_id: str
    path: str
    format: str
    inode: int = 0
    device: int = 0
    size: int = 0
    mtime: float = 0.0
    offset: int = 0
    lines: int = 0
    segment: int = 0
    state: str = "active"
    tail_sig: bytes = b""
    parser_state: str | None = None  # JSON the parser needs back next time (a CSV header)


class PointWrites:
    """The point-writing half of `Store` (see `collector.store.Store`)."""

    cursor: Callable[[], duckdb.DuckDBPyConnection]

    def add_points(
        self,
        cur: duckdb.DuckDBPyConnection,
        s: SourceState,
        points: Points,
        *,
        may_overlap: bool,
    ) -> int:
        """Store a batch of one source's points inside the caller's transaction; returns rows added.

        With `may_overlap` (the batch reaches steps already stored for the run), a point whose
        (metric, step) is stored with the same value is dropped, and a stored value that differs moves to
        `points_replaced` before the new one goes in: the latest write of a step wins in every query.
        """
        if not points:
            return 0
        table = pa.table(
            {
                "metric": pa.array(points.metric, pa.string()),
                "step": pa.array(points.step, pa.int64()),
                "value": pa.array(points.value, pa.float64()),
                "wall_time": pa.array(points.wall_time, pa.float64()),
            }
        )
        cur.register("rw_batch", table)
        try:
            if not may_overlap:
                cur.execute(
                    """INSERT INTO points (run_id, metric, step, value, wall_time, source_id, segment) SELECT ?, metric, step, value, wall_time, ?, ? FROM rw_batch""",
                    [s.run_id, s.id, s.segment],
                )
                self._bump_stats(cur, s.run_id, "SELECT metric, step, value FROM rw_batch")
                return len(points)
            cur.execute(
                "CREATE OR REPLACE TEMP TABLE rw_stage AS SELECT *, row_number() OVER () AS seq FROM rw_batch"
            )
        finally:
            cur.unregister("rw_batch")
        return self._merge_stage(cur, s)

    def add_points_many(
        self, cur: duckdb.DuckDBPyConnection, batches: list[tuple[SourceState, Points]]
    ) -> int:
        """Store many sources' plain appends (no step already stored) in one insert; returns rows added."""
        batches = [(s, p) for s, p in batches if p]
        if not batches:
            return 0
        run_ids, source_ids, segments = [], [], []
        metric, step, value, wall = [], [], [], []
        for s, p in batches:
            n = len(p)
            run_ids.extend([s.run_id] * n)
            source_ids.extend([s.id] * n)
            segments.extend([s.segment] * n)
            metric.extend(p.metric)
            step.extend(p.step)
            value.extend(p.value)
            wall.extend(p.wall_time)
        table = pa.table(
            {
                "run_id": pa.array(run_ids, pa.string()),
                "metric": pa.array(metric, pa.string()),
                "step": pa.array(step, pa.int64()),
                "value": pa.array(value, pa.float64()),
                "wall_time": pa.array(wall, pa.float64()),
                "source_id": pa.array(source_ids, pa.int32()),
                "segment": pa.array(segments, pa.int32()),
            }
        )
        cur.register("rw_many", table)
        try:
            cur.execute(
                """INSERT INTO points (run_id, metric, step, value, wall_time, source_id, segment)
                   SELECT * FROM rw_many"""
            )
            cur.execute(
                """INSERT INTO metric_stats (run_id, metric, points, last_step, last_value, first_step)
                   SELECT run_id, metric, count(*), max(step), arg_max(value, step), min(step)
                   FROM rw_many GROUP BY ALL
                   ON CONFLICT (run_id, metric) DO UPDATE SET
                     points = metric_stats.points + excluded.points,
                     last_value = CASE WHEN excluded.last_step >= metric_stats.last_step
                                       THEN excluded.last_value ELSE metric_stats.last_value END,
                     last_step = greatest(excluded.last_step, metric_stats.last_step),
                     first_step = least(excluded.first_step, metric_stats.first_step)"""
            )
        finally:
            cur.unregister("rw_many")
        return len(table)

    def bulk_ndjson(
        self,
        cur: duckdb.DuckDBPyConnection,
        s: SourceState,
        path: str,
        after_step: int,
        keys: list[str],
        expected_points: Callable[[], int],
    ) -> tuple[int, int]:
        """Insert a file of complete verl JSON lines with DuckDB's own reader, inside the caller's transaction.

        `keys` are the metric names under "data" (read as typed struct fields: about twice as fast as a
        map); `expected_points()` is how many values the caller counted in the bytes (asked after the read, so
        the counting can run meanwhile). Streams straight into
        `points` (no staging copy), then looks at just the rows it added: when they reach steps at or below
        `after_step` (the run's stored maximum) or repeat a (metric, step), they are taken back out and
        merged by the replace rule of `add_points`. Returns (points, highest step).
        Raises BulkMismatch when the count differs (a key not in `keys`, a null, an extra field) and
        duckdb.Error when a line does not fit the verl shape or has no step: the caller rolls back and
        tries again with the keys learned, or parses the chunk in Python, which quarantines bad lines.
        """
        batch = time.time_ns()
        fields = ", ".join('"' + k.replace('"', '""') + '" DOUBLE' for k in keys)
        columns = {"step": "DOUBLE", "data": f"STRUCT({fields})"}
        # A record that is not plainly verl (no step, a fractional step, no "data" object) stops the read:
        # DuckDB would otherwise round the step or skip the record silently.
        cur.execute(
            """INSERT INTO points (run_id, metric, step, value, wall_time, source_id, segment, batch)
               SELECT ?, metric, step, value, NULL, ?, ?, ? FROM (
                 UNPIVOT (SELECT step::BIGINT AS step, data.* FROM read_ndjson(?, columns = ?, format = 'newline_delimited')
                          WHERE CASE WHEN step IS NULL OR data IS NULL OR step <> floor(step)
                                     THEN error('not a plain verl record') ELSE true END)
                 ON COLUMNS(* EXCLUDE step) INTO NAME metric VALUE value)""",
            [s.run_id, s.id, s.segment, batch, path, columns],
        )
        # One pass over just the added rows (zone maps on `batch` skip the rest) gives the checks and the
        # per-metric summaries together. Repeated steps are counted exactly with one bit per step of the
        # batch's range (about 10x cheaper than count(DISTINCT), which hashes every point); a range too
        # sparse for bits (huge step numbers) takes the hashing count.
        low, high = cur.execute(
            "SELECT min(step), max(step) FROM points WHERE batch = ?", [batch]
        ).fetchall()[0]
        bitmap = low is not None and (high - low + 1) * max(len(keys), 1) <= BULK_BITMAP_BITS
        cur.execute(
            f"""CREATE OR REPLACE TEMP TABLE rw_bulk_stats AS
               SELECT metric, count(*) AS n,
                      {"bit_count(bitstring_agg(step, ?, ?))" if bitmap else "count(DISTINCT step)"} AS distinct_steps,
                      min(step) AS lo, max(step) AS hi, arg_max(value, step) AS last_value
               FROM points WHERE batch = ? GROUP BY metric""",
            [low, high, batch] if bitmap else [batch],
        )
        count, low, high, repeats = cur.execute(
            "SELECT coalesce(sum(n), 0), min(lo), max(hi), coalesce(sum(n - distinct_steps), 0) FROM rw_bulk_stats"
        ).fetchall()[0]
        expected = expected_points()
        if count != expected:
            raise BulkMismatch(f"read {count} values, the bytes hold {expected}")
        if count == 0:
            return 0, after_step
        if low > after_step and not repeats:
            self._bump_stats(
                cur, s.run_id, "SELECT metric, n, hi, last_value, lo FROM rw_bulk_stats", summarised=True
            )
            return count, high
        cur.execute(
            """CREATE OR REPLACE TEMP TABLE rw_stage AS SELECT metric, step, value, wall_time,
               row_number() OVER (ORDER BY rowid) AS seq FROM points WHERE batch = ?""",
            [batch],
        )
        cur.execute("DELETE FROM points WHERE batch = ?", [batch])
        return self._merge_stage(cur, s), high

    def ndjson_keys(self, path: str) -> list[str]:
        """Every key under "data" in a file of verl JSON lines (to read it as typed struct fields)."""
        rows = (
            self.cursor()
            .execute(
                """SELECT DISTINCT unnest(json_keys(data)) FROM read_ndjson(?, columns = {'data': 'JSON'},
               format = 'newline_delimited')""",
                [path],
            )
            .fetchall()
        )
        return sorted(r[0] for r in rows)

    def _merge_stage(self, cur: duckdb.DuckDBPyConnection, s: SourceState) -> int:
        now = time.time()
        run = s.run_id
        cur.execute(
            """CREATE OR REPLACE TEMP TABLE rw_new AS SELECT metric, step, value, wall_time FROM rw_stage
               QUALIFY row_number() OVER (PARTITION BY metric, step ORDER BY seq DESC) = 1"""
        )
        low, high = cur.execute("SELECT min(step), max(step) FROM rw_new").fetchall()[0]
        if low is None:
            return 0
        # The step range lets DuckDB skip row groups of other steps (zone maps) instead of scanning the run.
        cur.execute(
            """CREATE OR REPLACE TEMP TABLE rw_match AS
               SELECT p.run_id, p.metric, p.step, p.value, p.wall_time, p.source_id, p.segment FROM points p JOIN rw_new n ON p.metric = n.metric AND p.step = n.step
               WHERE p.run_id = ? AND p.step BETWEEN ? AND ?""",
            [run, low, high],
        )
        # Same value already stored (a whole-file format read again, a copy of the same history): nothing to do.
        cur.execute(
            """DELETE FROM rw_new WHERE EXISTS (SELECT 1 FROM rw_match p WHERE p.metric = rw_new.metric
               AND p.step = rw_new.step AND (p.value = rw_new.value OR (isnan(p.value) AND isnan(rw_new.value))))"""
        )
        # Within the batch the last write of a (metric, step) wins; earlier ones are an older life too
        # (kept only when the winner is news, so reading a whole-file format again keeps nothing twice).
        cur.execute(
            """INSERT INTO points_replaced
               SELECT ?, metric, step, value, wall_time, ?, ?, ? FROM rw_stage
               WHERE (metric, step) IN (SELECT (metric, step) FROM rw_new)
               QUALIFY row_number() OVER (PARTITION BY metric, step ORDER BY seq DESC) > 1""",
            [run, s.id, s.segment, now],
        )
        cur.execute(
            """DELETE FROM rw_match WHERE NOT EXISTS (SELECT 1 FROM rw_new n WHERE n.metric = rw_match.metric
               AND n.step = rw_match.step)"""
        )
        cur.execute("INSERT INTO points_replaced SELECT *, ? FROM rw_match", [now])
        cur.execute(
            """DELETE FROM points p USING rw_match m WHERE p.run_id = ? AND p.step BETWEEN ? AND ?
               AND p.metric = m.metric AND p.step = m.step""",
            [run, low, high],
        )
        cur.execute(
            """INSERT INTO points (run_id, metric, step, value, wall_time, source_id, segment)
               SELECT ?, metric, step, value, wall_time, ?, ? FROM rw_new""",
            [run, s.id, s.segment],
        )
        self._bump_stats(cur, run, "SELECT metric, step, value FROM rw_new", minus=True)
        return cur.execute("SELECT count(*) FROM rw_new").fetchall()[0][0]

    def _bump_stats(
        self,
        cur: duckdb.DuckDBPyConnection,
        run: str,
        rows_sql: str,
        params: list | None = None,
        minus: bool = False,
        summarised: bool = False,
    ) -> None:
        """Fold added rows into the per-metric summaries. `rows_sql` is one of our own fixed queries giving
        (metric, step, value) rows, or with `summarised` (metric, count, last step, value at the last step, first step)."""
        grouped = (
            rows_sql
            if summarised
            else f"SELECT metric, count(*), max(step), arg_max(value, step), min(step) FROM ({rows_sql}) GROUP BY metric"
        )
        cur.execute(
            f"""INSERT INTO metric_stats (run_id, metric, points, last_step, last_value, first_step)
                SELECT ?, * FROM ({grouped})
                ON CONFLICT (run_id, metric) DO UPDATE SET
                  points = metric_stats.points + excluded.points,
                  last_value = CASE WHEN excluded.last_step >= metric_stats.last_step
                                    THEN excluded.last_value ELSE metric_stats.last_value END,
                  last_step = greatest(excluded.last_step, metric_stats.last_step),
                  first_step = least(excluded.first_step, metric_stats.first_step)""",
            [run, *(params or [])],
        )
        if minus:  # rows the batch replaced no longer count
            cur.execute(
                """UPDATE metric_stats SET points = points - m.n
                   FROM (SELECT metric, count(*) AS n FROM rw_match GROUP BY metric) m
                   WHERE metric_stats.run_id = ? AND metric_stats.metric = m.metric""",
                [run],
            )
