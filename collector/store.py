"""The DuckDB store: the only module (with its `store_*.py` siblings) that holds SQL.

One file, one connection, a cursor per thread (DuckDB allows one writer process; inside it, cursors share the
database). Writes go through `Store.transaction()`, which serialises writers with a lock so the ingest loop
and an API call (ack, resolve) never conflict. Every query takes parameters, never formatted values.

Points are long and narrow: one row per (run, metric, step) in `points`, always the latest value; a value
replaced by a later write of the same step (a resumed run rewriting steps, a rotated or truncated file) moves
to `points_replaced` with the segment it came from, so both lives stay inspectable and no query pays for the
replacement rule.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa

from collector.model import BadLine, Points

# Each entry brings a database from version i to i + 1. Never edit a released entry: add one.
MIGRATIONS: list[list[str]] = [
    # v1: the first schema.
    [
        """CREATE TABLE runs (
            id VARCHAR PRIMARY KEY, root VARCHAR, path VARCHAR, format VARCHAR, status VARCHAR,
            last_step BIGINT, total_steps BIGINT, created_at DOUBLE, updated_at DOUBLE, last_point_at DOUBLE,
            config VARCHAR, status_info VARCHAR)""",
        "CREATE SEQUENCE source_ids START 1",
        """CREATE TABLE sources (
            id INTEGER PRIMARY KEY DEFAULT nextval('source_ids'), run_id VARCHAR, path VARCHAR UNIQUE,
            format VARCHAR, inode BIGINT, device BIGINT, size BIGINT, mtime DOUBLE, byte_offset BIGINT,
            lines BIGINT, segment INTEGER, state VARCHAR, updated_at DOUBLE)""",
        """CREATE TABLE points (
            run_id VARCHAR, metric VARCHAR, step BIGINT, value DOUBLE, wall_time DOUBLE,
            source_id INTEGER, segment INTEGER)""",
        """CREATE TABLE quarantine (
            source_id INTEGER, segment INTEGER, line BIGINT, reason VARCHAR, text VARCHAR, created_at DOUBLE)""",
        "CREATE SEQUENCE alert_ids START 1",
        """CREATE TABLE alerts (
            id INTEGER PRIMARY KEY DEFAULT nextval('alert_ids'), run_id VARCHAR, rule VARCHAR,
            severity VARCHAR, metric VARCHAR, first_step BIGINT, last_step BIGINT, value DOUBLE,
            message VARCHAR, evidence VARCHAR, state VARCHAR, active BOOLEAN, note VARCHAR,
            created_at DOUBLE, updated_at DOUBLE, UNIQUE (run_id, rule, metric, first_step))""",
        """CREATE TABLE alert_history (
            alert_id INTEGER, created_at DOUBLE, event VARCHAR, state VARCHAR, note VARCHAR)""",
        """CREATE TABLE checkpoints (
            run_id VARCHAR, step BIGINT, path VARCHAR, complete BOOLEAN, bytes BIGINT, info VARCHAR)""",
    ],
    # v2: replaced values keep their own table (both lives of a resumed run), per-metric summaries for
    # listings, and a signature of the bytes before the offset to notice a file rewritten in place.
    [
        """CREATE TABLE points_replaced (
            run_id VARCHAR, metric VARCHAR, step BIGINT, value DOUBLE, wall_time DOUBLE,
            source_id INTEGER, segment INTEGER, replaced_at DOUBLE)""",
        """CREATE TABLE metric_stats (
            run_id VARCHAR, metric VARCHAR, points BIGINT, last_step BIGINT, last_value DOUBLE,
            PRIMARY KEY (run_id, metric))""",
        """INSERT INTO metric_stats
            SELECT run_id, metric, count(*), max(step), arg_max(value, step) FROM points GROUP BY ALL""",
        "ALTER TABLE sources ADD COLUMN tail_sig BLOB",
        "ALTER TABLE sources ADD COLUMN parser_state VARCHAR",
        # Which bulk insert a row came from: a bulk chunk is checked (and, rarely, merged) after inserting.
        "ALTER TABLE points ADD COLUMN batch BIGINT",
        # The step detection has judged a run up to, while a bulk backlog waits for it (NULL: up to date).
        "ALTER TABLE runs ADD COLUMN detected_to BIGINT",
    ],
    # v3: each metric's first step, so a downsampled query needs no extra pass to find its range.
    [
        "ALTER TABLE metric_stats ADD COLUMN first_step BIGINT",
        """UPDATE metric_stats SET first_step = m.lo
           FROM (SELECT run_id, metric, min(step) AS lo FROM points GROUP BY ALL) m
           WHERE metric_stats.run_id = m.run_id AND metric_stats.metric = m.metric""",
    ],
    # v4: the step verl's latest_checkpointed_iteration.txt names (what a resume would load).
    ["ALTER TABLE runs ADD COLUMN latest_marker BIGINT"],
]
SCHEMA_VERSION = len(MIGRATIONS)
# DuckDB's buffer pool would take 80% of RAM; the collector stays small (it spills to disk past this).
MEMORY_LIMIT = "160MB"


class BulkMismatch(ValueError):
    """DuckDB's bulk read did not account for every value in the bytes; the chunk needs another reading."""


class StoreError(RuntimeError):
    """The database cannot be used; the message names the file and what to do."""


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


class Store:
    """One DuckDB file. Thread-safe: each thread gets its own cursor; writers take turns."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self._con = duckdb.connect(str(self.path), config={"memory_limit": MEMORY_LIMIT})
        except duckdb.IOException as e:
            raise StoreError(
                f"cannot open the database {self.path}: {e}. Only one process may hold it; if a collector "
                f"is running, use it through its API (the CLI does this by itself)."
            ) from None
        self._local = threading.local()
        self._write_lock = threading.RLock()
        migrate(self._con)

    def close(self) -> None:
        """Checkpoint and close; the store is unusable afterwards."""
        with self._write_lock:
            self._con.close()

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """This thread's cursor (DuckDB connections are not shared between threads)."""
        cur = getattr(self._local, "cur", None)
        if cur is None:
            cur = self._con.cursor()
            self._local.cur = cur
        return cur

    def rows(self, sql: str, params: list | tuple = ()) -> list[tuple]:
        """All rows of a read query."""
        return self.cursor().execute(sql, params).fetchall()

    def dicts(self, sql: str, params: list | tuple = ()) -> list[dict]:
        """All rows of a read query as dicts keyed by column name."""
        cur = self.cursor().execute(sql, params)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    @contextlib.contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """One atomic write: everything done with the yielded cursor commits together or not at all."""
        with self._write_lock:
            cur = self.cursor()
            if getattr(self._local, "in_tx", False):
                yield cur  # nested: the outer transaction commits
                return
            cur.execute("BEGIN TRANSACTION")
            self._local.in_tx = True
            try:
                yield cur
                cur.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(duckdb.Error):
                    cur.execute("ROLLBACK")
                raise
            finally:
                self._local.in_tx = False

    # ---- runs and sources -------------------------------------------------------------------------

    def upsert_run(self, run_id: str, root: str, path: str, fmt: str) -> None:
        """Record a run the first time it is seen; later calls keep its state and refresh path and format."""
        now = time.time()
        with self.transaction() as cur:
            cur.execute(
                """INSERT INTO runs (id, root, path, format, status, created_at, updated_at)
                   VALUES (?, ?, ?, ?, 'unknown', ?, ?)
                   ON CONFLICT (id) DO UPDATE SET root = excluded.root, path = excluded.path,
                   format = excluded.format""",
                [run_id, root, path, fmt, now, now],
            )

    def update_run_info(
        self,
        cur: duckdb.DuckDBPyConnection,
        run_id: str,
        *,
        status: str | None = None,
        total_steps: int | None = None,
        config: str | None = None,
        status_info: str | None = None,
        last_step: int | None = None,
        last_point_at: float | None = None,
    ) -> None:
        """Set the given run fields (None leaves a field as it is), inside the caller's transaction."""
        cur.execute(
            """UPDATE runs SET status = coalesce(?, status), total_steps = coalesce(?, total_steps),
               config = coalesce(?, config), status_info = coalesce(?, status_info),
               last_step = coalesce(?, last_step), last_point_at = coalesce(?, last_point_at), updated_at = ?
               WHERE id = ?""",
            [status, total_steps, config, status_info, last_step, last_point_at, time.time(), run_id],
        )

    def mark_detection_behind(self, cur: duckdb.DuckDBPyConnection, run_id: str, judged_to: int) -> None:
        """Record, with the bulk rows, that detection has judged the run only up to `judged_to` (kept if
        already behind): a restart resumes detection there instead of skipping the backlog."""
        cur.execute(
            "UPDATE runs SET detected_to = coalesce(detected_to, ?) WHERE id = ?", [judged_to, run_id]
        )

    def set_latest_marker(self, run_id: str, step: int | None) -> None:
        """The step the run's checkpoint marker names (None: no marker)."""
        with self.transaction() as cur:
            cur.execute("UPDATE runs SET latest_marker = ? WHERE id = ?", [step, run_id])

    def set_detected_to(self, run_id: str, step: int | None) -> None:
        """Detection has judged the run up to `step` (None: all of it)."""
        with self.transaction() as cur:
            cur.execute("UPDATE runs SET detected_to = ? WHERE id = ?", [step, run_id])

    def detection_backlogs(self) -> dict[str, int]:
        """Runs whose stored points detection has not all judged: run -> step judged up to."""
        return dict(self.rows("SELECT id, detected_to FROM runs WHERE detected_to IS NOT NULL"))

    def sources(self) -> dict[str, SourceState]:
        """Every source the store knows, by path."""
        rows = self.rows(
            """SELECT id, run_id, path, format, inode, device, size, mtime, byte_offset, lines, segment,
                      state, tail_sig, parser_state FROM sources"""
        )
        return {r[2]: SourceState(*r[:12], tail_sig=bytes(r[12] or b""), parser_state=r[13]) for r in rows}

    def add_source(self, run_id: str, path: str, fmt: str) -> SourceState:
        """Register a file of a run (offset 0, segment 0); returns its state."""
        with self.transaction() as cur:
            cur.execute(
                """INSERT INTO sources (run_id, path, format, inode, device, size, mtime, byte_offset, lines,
                   segment, state, updated_at, tail_sig) VALUES (?, ?, ?, 0, 0, 0, 0, 0, 0, 0, 'active', ?, ''::BLOB)
                   ON CONFLICT (path) DO UPDATE SET run_id = excluded.run_id, format = excluded.format
                   RETURNING id""",
                [run_id, path, fmt, time.time()],
            )
            source_id = cur.fetchall()[0][0]
        return SourceState(id=source_id, run_id=run_id, path=path, format=fmt)

    def save_source(self, cur: duckdb.DuckDBPyConnection, s: SourceState) -> None:
        """Write a source's identity and offset, inside the transaction that wrote the rows it covers."""
        cur.execute(
            """UPDATE sources SET inode = ?, device = ?, size = ?, mtime = ?, byte_offset = ?, lines = ?,
               segment = ?, state = ?, tail_sig = ?, parser_state = ?, updated_at = ? WHERE id = ?""",
            [
                s.inode,
                s.device,
                s.size,
                s.mtime,
                s.offset,
                s.lines,
                s.segment,
                s.state,
                s.tail_sig,
                s.parser_state,
                time.time(),
                s.id,
            ],
        )

    def save_sources(self, cur: duckdb.DuckDBPyConnection, states: list[SourceState]) -> None:
        """`save_source` for many sources in one statement (a live cycle touches a hundred)."""
        if not states:
            return
        fields = (
            "id",
            "inode",
            "device",
            "size",
            "mtime",
            "offset",
            "lines",
            "segment",
            "state",
            "parser_state",
        )
        columns = {f: [getattr(x, f) for x in states] for f in fields}
        columns["tail_sig"] = pa.array([x.tail_sig for x in states], pa.binary())
        cur.register("rw_sources", pa.table(columns))
        try:
            cur.execute(
                """UPDATE sources SET inode = t.inode, device = t.device, size = t.size, mtime = t.mtime,
                   byte_offset = t."offset", lines = t.lines, segment = t.segment, state = t.state,
                   tail_sig = t.tail_sig, parser_state = t.parser_state, updated_at = ?
                   FROM rw_sources t WHERE sources.id = t.id""",
                [time.time()],
            )
        finally:
            cur.unregister("rw_sources")

    def set_runs_progress(self, cur: duckdb.DuckDBPyConnection, last_steps: dict[str, int]) -> None:
        """Each run's newest step and the time points last came, in one statement."""
        if not last_steps:
            return
        now = time.time()
        cur.register("rw_runs", pa.table({"id": list(last_steps), "last_step": list(last_steps.values())}))
        try:
            cur.execute(
                """UPDATE runs SET last_step = t.last_step, last_point_at = ?, updated_at = ?
                   FROM rw_runs t WHERE runs.id = t.id""",
                [now, now],
            )
        finally:
            cur.unregister("rw_runs")

    def quarantine(self, cur: duckdb.DuckDBPyConnection, s: SourceState, bad: list[BadLine]) -> None:
        """Keep bad lines with their file line number and reason, inside the caller's transaction."""
        if not bad:
            return
        now = time.time()
        cur.executemany(
            "INSERT INTO quarantine VALUES (?, ?, ?, ?, ?, ?)",
            [[s.id, s.segment, b.line, b.reason, b.text, now] for b in bad],
        )

    def max_steps(self) -> dict[str, int]:
        """The highest stored step of every run (what a new batch must exceed to be a plain append)."""
        return {r[0]: r[1] for r in self.rows("SELECT run_id, max(step) FROM points GROUP BY run_id")}

    # ---- points ---------------------------------------------------------------------------------

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
        # per-metric summaries together.
        cur.execute(
            """CREATE OR REPLACE TEMP TABLE rw_bulk_stats AS
               SELECT metric, count(*) AS n, count(DISTINCT step) AS distinct_steps, min(step) AS lo,
                      max(step) AS hi, arg_max(value, step) AS last_value
               FROM points WHERE batch = ? GROUP BY metric""",
            [batch],
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


def schema_version(con: duckdb.DuckDBPyConnection) -> int:
    """The database's schema version (0 for an empty file)."""
    con.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER)")
    rows = con.execute("SELECT max(version) FROM schema_version").fetchall()
    return rows[0][0] or 0


def migrate(con: duckdb.DuckDBPyConnection, target: int = SCHEMA_VERSION) -> int:
    """Bring the database up to `target`, one version per transaction; idempotent. Returns the version."""
    version = schema_version(con)
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"the database is schema version {version}, newer than this collector's {SCHEMA_VERSION}; "
            f"upgrade runwatch (nothing was changed)"
        )
    while version < target:
        con.execute("BEGIN TRANSACTION")
        try:
            for statement in MIGRATIONS[version]:
                con.execute(statement)
            con.execute("INSERT INTO schema_version VALUES (?)", [version + 1])
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        version += 1
    return version
