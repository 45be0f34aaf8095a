"""Writing points: plain appends, the replace-the-same-step merge, and DuckDB's bulk read of verl JSONL.

Functions over a cursor in the caller's transaction (`Store.transaction()`), kept apart because they are
the hot path of the collector and the one place with the replacement rule: the latest write of a (run,
metric, step) stays in `points`, an earlier different value moves to `points_replaced` with the segment it
came from. The verl record shape comes from `collector.formats.jsonl`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import duckdb

from collector.core.model import FLOAT32_EPS, Points
from collector.formats import jsonl
from collector.store.db import SourceState, arrow
from collector.store.wide_stats import BULK_MAX_METRICS, wide_stats


class BulkMismatch(ValueError):
    """DuckDB's bulk read did not account for every value in the bytes; the chunk needs another reading."""


class NotPlainVerl(BulkMismatch):
    """The chunk holds what only the parser reads right (an infinity from a number too long for a float,
    a string value): it goes to the parser, which quarantines or skips it and says so."""


class TooManyMetrics(NotPlainVerl):
    """The chunk logs more metrics than a bulk read stages side by side (BULK_MAX_METRICS): the parser,
    whose memory its chunk bounds, reads it."""


def add_points(
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
    pa = arrow()
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
        _add_series(cur, "SELECT DISTINCT ? AS run_id, metric FROM rw_batch", [s.run_id])
        if not may_overlap:
            cur.execute(
                """INSERT INTO point_rows (series, step, value, wall_time, source_id, segment)
                   SELECT n.id, b.step, b.value, b.wall_time, ?, ? FROM rw_batch b
                   JOIN series n ON n.run_id = ? AND n.metric = b.metric""",
                [s.id, s.segment, s.run_id],
            )
            _bump_stats(cur, s.run_id, "SELECT metric, step, value FROM rw_batch")
            return len(points)
        cur.execute(
            "CREATE OR REPLACE TEMP TABLE rw_stage AS SELECT *, row_number() OVER () AS seq FROM rw_batch"
        )
    finally:
        with contextlib.suppress(duckdb.TransactionException):  # (aborted: the first error goes up)
            cur.unregister("rw_batch")
    return _merge_stage(cur, s)


def add_points_many(cur: duckdb.DuckDBPyConnection, batches: list[tuple[SourceState, Points]]) -> int:
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
    pa = arrow()
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
        _add_series(cur, "SELECT DISTINCT run_id, metric FROM rw_many")
        cur.execute(
            """INSERT INTO point_rows (series, step, value, wall_time, source_id, segment)
               SELECT n.id, m.step, m.value, m.wall_time, m.source_id, m.segment FROM rw_many m
               JOIN series n ON n.run_id = m.run_id AND n.metric = m.metric"""
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
        # In a transaction the error above aborted, unregistering fails too: the first error is the one told
        # (a damaged database must not read as "transaction is aborted"); a later register replaces the view.
        with contextlib.suppress(duckdb.TransactionException):
            cur.unregister("rw_many")
    return len(table)


def bulk_ndjson(
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
    the counting can run meanwhile). The lines go to a wide temp table (a step and a column per key:
    a quarter of the rows of the long form), which gives the checks in one pass; then each metric's
    values go into `point_rows` as one block (a query of one metric skips the others' row groups).
    When they reach steps at or below `after_step` (the run's stored maximum) or repeat a (metric, step),
    they are merged by the replace rule of `add_points` instead. Returns (points, highest step).
    Raises BulkMismatch when the count differs (a key not in `keys`, a null, an extra field) and
    duckdb.Error when a line does not fit the verl shape or has no step: the caller rolls back and
    tries again with the keys learned, or parses the chunk in Python, which quarantines bad lines.
    """
    if len(keys) > BULK_MAX_METRICS:
        raise TooManyMetrics(f"{len(keys)} metrics: more than a bulk read stages ({BULK_MAX_METRICS})")
    _read_wide(cur, path, keys)  # in file order: a merge needs it (staging unordered gains nothing)
    try:
        return bulk_from_wide(cur, s, after_step, keys, expected_points)
    finally:
        cur.execute("DROP TABLE IF EXISTS rw_wide")


def bulk_from_wide(
    cur: duckdb.DuckDBPyConnection,
    s: SourceState,
    after_step: int,
    keys: list[str],
    expected_points: Callable[[], int],
    wall_time: bool = False,
    infinities_to_parser: bool = True,
) -> tuple[int, int]:
    """Insert the staged temp table `rw_wide` (step BIGINT in file order, c0.. holding `keys[i]`, and with
    `wall_time` a wall_time column) by the rules of `bulk_ndjson`, which every bulk reader shares: the
    per-metric checks against `expected_points()`, one block per metric, or the merge. Returns (points,
    highest step); raises BulkMismatch when the count differs, NotPlainVerl at an infinite value when
    `infinities_to_parser` (JSON: the parser refuses what DuckDB reads as one)."""
    wall = "wall_time" if wall_time else "NULL"
    low, high = cur.execute("SELECT min(step), max(step) FROM rw_wide").fetchall()[0]
    stats, infinite = wide_stats(cur, len(keys), low, high, infinities_to_parser)
    if infinite:
        raise NotPlainVerl(f"{infinite} infinite values: the parser reads them")
    # (column, metric, values, distinct steps, first step, last step, value at the last step)
    found = [(i, keys[i], *stats[5 * i : 5 * i + 5]) for i in range(len(keys)) if stats and stats[5 * i]]
    count = sum(n for _, _, n, *_ in found)
    expected = expected_points()
    if count != expected:
        raise BulkMismatch(f"read {count} values, the bytes hold {expected}")
    if count == 0:
        return 0, after_step
    if low > after_step and all(n == distinct for _, _, n, distinct, *_ in found):
        ids = _series_ids(cur, s.run_id, [k for _, k, *_ in found])
        blocks = " UNION ALL ".join(
            f"SELECT {ids[k]}, step, c{i}, {wall}, ?, ? FROM rw_wide WHERE c{i} IS NOT NULL"
            for i, k, *_ in found
        )
        with _unordered(cur):  # every read sorts by step: ~1.5x faster
            cur.execute(
                f"INSERT INTO point_rows (series, step, value, wall_time, source_id, segment) {blocks}",
                [s.id, s.segment] * len(found),
            )
        rows = ", ".join("(?::VARCHAR, ?::BIGINT, ?::BIGINT, ?::DOUBLE, ?::BIGINT)" for _ in found)
        _bump_stats(
            cur,
            s.run_id,
            f"SELECT * FROM (VALUES {rows})",
            [x for _, k, n, _, lo, hi, last in found for x in (k, n, hi, last, lo)],
            summarised=True,
        )
        return count, high
    # Steps already stored, or a metric's step twice: the merge (file order decides within the chunk).
    blocks = " UNION ALL ".join(
        f"SELECT ? AS metric, step, c{i} AS value, {wall} AS wall_time, rowid AS line FROM rw_wide WHERE c{i} IS NOT NULL"
        for i, *_ in found
    )
    cur.execute(
        f"""CREATE OR REPLACE TEMP TABLE rw_stage AS SELECT metric, step, value, wall_time::DOUBLE AS wall_time,
            row_number() OVER (ORDER BY line) AS seq FROM ({blocks})""",
        [k for _, k, *_ in found],
    )
    return _merge_stage(cur, s), high


def ndjson_keys(cur: duckdb.DuckDBPyConnection, path: str) -> list[str]:
    """Every metric name in a file of verl JSON lines (to read it as typed struct fields)."""
    data = _quote(jsonl.METRICS_KEY)
    rows = cur.execute(
        f"""SELECT DISTINCT unnest(json_keys({data})) FROM read_ndjson(?, columns = ?,
            format = 'newline_delimited')""",
        [path, {jsonl.METRICS_KEY: "JSON"}],
    ).fetchall()
    return sorted(r[0] for r in rows)


def _add_series(cur: duckdb.DuckDBPyConnection, pairs_sql: str, params: list | None = None) -> None:
    """Give every (run_id, metric) of `pairs_sql` (one of our own fixed queries) its series id. Only new
    pairs draw from the sequence (a conflict clause would draw for every pair, every batch)."""
    cur.execute(
        f"""INSERT INTO series (run_id, metric) SELECT run_id, metric FROM ({pairs_sql}) p
            WHERE NOT EXISTS (SELECT 1 FROM series s WHERE s.run_id = p.run_id AND s.metric = p.metric)""",
        params or [],
    )


def _series_ids(cur: duckdb.DuckDBPyConnection, run: str, metrics: list[str]) -> dict[str, int]:
    _add_series(cur, "SELECT ? AS run_id, unnest(?::VARCHAR[]) AS metric", [run, metrics])
    rows = cur.execute(
        "SELECT metric, id FROM series WHERE run_id = ? AND list_contains(?::VARCHAR[], metric)",
        [run, metrics],
    ).fetchall()
    return dict(rows)


def _same_point(a: str, b: str) -> str:
    """SQL: whether the values `a` and `b` are one point, as `core.model.same_point` says."""
    return (
        f"({a} = {b} OR (isnan({a}) AND isnan({b})) OR (isfinite(greatest(abs({a}), abs({b}))) "
        f"AND abs({a} - {b}) <= {FLOAT32_EPS!r} * greatest(abs({a}), abs({b}))))"
    )


def _merge_stage(cur: duckdb.DuckDBPyConnection, s: SourceState) -> int:
    """Merge `rw_stage` (metric, step, value, wall_time, seq) into the run's points by the replace rule."""
    now = time.time()
    run = s.run_id
    _add_series(cur, "SELECT DISTINCT ? AS run_id, metric FROM rw_stage", [run])
    cur.execute(
        """CREATE OR REPLACE TEMP TABLE rw_new AS
           SELECT n.id AS series, r.metric, r.step, r.value, r.wall_time FROM rw_stage r
           JOIN series n ON n.run_id = ? AND n.metric = r.metric
           QUALIFY row_number() OVER (PARTITION BY r.metric, r.step ORDER BY r.seq DESC) = 1""",
        [run],
    )
    low, high = cur.execute("SELECT min(step), max(step) FROM rw_new").fetchall()[0]
    if low is None:
        return 0
    # The step range lets DuckDB skip row groups of other steps (zone maps) instead of scanning the run.
    cur.execute(
        """CREATE OR REPLACE TEMP TABLE rw_match AS
           SELECT p.series, n.metric, p.step, p.value, p.wall_time, p.source_id, p.segment
           FROM point_rows p JOIN rw_new n ON p.series = n.series AND p.step = n.step
           WHERE p.step BETWEEN ? AND ?""",
        [low, high],
    )
    # Same value already stored (a whole-file format read again, a copy of the same history): nothing to do.
    cur.execute(
        """DELETE FROM rw_new WHERE EXISTS (SELECT 1 FROM rw_match p WHERE p.series = rw_new.series
           AND p.step = rw_new.step AND (p.value = rw_new.value OR (isnan(p.value) AND isnan(rw_new.value))))"""
    )
    # Within the batch the last write of a (metric, step) wins; earlier other values are an older life too
    # (kept only when the winner is news, so reading a whole-file format again keeps nothing twice; one value
    # logged twice at a step, e.g. a Trainer's `epoch` in its loss and its eval record, is no older life).
    cur.execute(
        f"""INSERT INTO points_replaced
           SELECT ?, metric, step, value, wall_time, ?, ?, ? FROM (
             SELECT s.metric, s.step, s.value, s.wall_time, n.value AS kept,
               row_number() OVER (PARTITION BY s.metric, s.step ORDER BY s.seq DESC) AS newer
             FROM rw_stage s JOIN rw_new n ON n.metric = s.metric AND n.step = s.step)
           WHERE newer > 1 AND NOT {_same_point("value", "kept")}""",
        [run, s.id, s.segment, now],
    )
    cur.execute(
        """DELETE FROM rw_match WHERE NOT EXISTS (SELECT 1 FROM rw_new n WHERE n.series = rw_match.series
           AND n.step = rw_match.step)"""
    )
    # The later write wins; the value it replaces is kept, unless it is the same point in other digits
    # (`core.model.same_point`: TensorBoard's float32 copy of trainer_state.json's float64 value, which the
    # reader's precedence reads first), which is no earlier value of the step.
    cur.execute(
        f"""INSERT INTO points_replaced (run_id, metric, step, value, wall_time, source_id, segment, replaced_at)
           SELECT ?, m.metric, m.step, m.value, m.wall_time, m.source_id, m.segment, ? FROM rw_match m
           JOIN rw_new n ON n.series = m.series AND n.step = m.step
           WHERE NOT {_same_point("m.value", "n.value")}""",
        [run, now],
    )
    cur.execute(
        """DELETE FROM point_rows p USING rw_match m WHERE p.step BETWEEN ? AND ?
           AND p.series = m.series AND p.step = m.step""",
        [low, high],
    )
    cur.execute(
        """INSERT INTO point_rows (series, step, value, wall_time, source_id, segment)
           SELECT series, step, value, wall_time, ?, ? FROM rw_new""",
        [s.id, s.segment],
    )
    _bump_stats(cur, run, "SELECT metric, step, value FROM rw_new", minus=True)
    return cur.execute("SELECT count(*) FROM rw_new").fetchall()[0][0]


def _bump_stats(
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


def _quote(name: str) -> str:
    """`name` as a DuckDB identifier."""
    return '"' + name.replace('"', '""') + '"'


def _read_wide(cur: duckdb.DuckDBPyConnection, path: str, keys: list[str]) -> None:
    """Stage a file of verl JSON lines as `rw_wide` (step, c0, c1, ...: column i holds `keys[i]`)."""
    fields = ", ".join(_quote(k) + " DOUBLE" for k in keys)
    step, data = _quote(jsonl.STEP_KEY), _quote(jsonl.METRICS_KEY)
    columns = {jsonl.STEP_KEY: "DOUBLE", jsonl.METRICS_KEY: f"STRUCT({fields})"}
    wide = ", ".join(f"{data}.{_quote(k)} AS c{i}" for i, k in enumerate(keys))
    # A record that is not plainly verl (no step, a fractional step, no "data" object) stops the read:
    # DuckDB would otherwise round the step or skip the record silently.
    cur.execute(
        f"""CREATE OR REPLACE TEMP TABLE rw_wide AS
            SELECT {step}::BIGINT AS step, {wide} FROM read_ndjson(?, columns = ?, format = 'newline_delimited')
            WHERE CASE WHEN {step} IS NULL OR {data} IS NULL OR {step} <> floor({step})
                       THEN error('not a plain verl record') ELSE true END""",
        [path, columns],
    )


@contextlib.contextmanager
def _unordered(cur: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Let DuckDB's threads emit rows in any order for one statement (the setting is global, so it is put
    back at once; the write lock keeps other writers out meanwhile, and readers sort what they read)."""
    cur.execute("SET preserve_insertion_order = false")
    try:
        yield
    finally:
        with contextlib.suppress(duckdb.Error):  # (in a failed transaction: reset by its rollback)
            cur.execute("RESET preserve_insertion_order")
