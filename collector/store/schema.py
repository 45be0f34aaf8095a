"""The store's schema and its migrations (SQL lives only in `store.py` and its `store_*.py` siblings).

Each entry of `MIGRATIONS` brings a database from version i to i + 1 in one transaction; `migrate` is
idempotent, so opening an older database brings it up to date and opening a current one changes nothing.
"""

from __future__ import annotations

import functools

import duckdb

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
    # v5: points name their (run, metric) by a small integer: writing two strings per point was most of a
    # bulk insert's cost. `point_rows` holds the rows, `points` is a view with the names joined back (every
    # query reads it as before); the `batch` column is gone (bulk reads are checked before inserting).
    [
        "CREATE SEQUENCE series_ids START 1",
        """CREATE TABLE series (
            id INTEGER PRIMARY KEY DEFAULT nextval('series_ids'), run_id VARCHAR NOT NULL,
            metric VARCHAR NOT NULL, UNIQUE (run_id, metric))""",
        """INSERT INTO series (run_id, metric)
            SELECT DISTINCT run_id, metric FROM points ORDER BY run_id, metric""",
        """CREATE TABLE point_rows (
            series INTEGER, step BIGINT, value DOUBLE, wall_time DOUBLE, source_id INTEGER, segment INTEGER)""",
        """INSERT INTO point_rows
            SELECT s.id, p.step, p.value, p.wall_time, p.source_id, p.segment
            FROM points p JOIN series s ON s.run_id = p.run_id AND s.metric = p.metric
            ORDER BY s.id, p.step""",
        "DROP TABLE points",
        """CREATE VIEW points AS
            SELECT s.run_id, s.metric, p.step, p.value, p.wall_time, p.source_id, p.segment, p.series
            FROM point_rows p JOIN series s ON p.series = s.id""",
    ],
    # v6: nothing dropped in silence: how many points each source gave (a file of lines that gave none is a
    # warning), and the files under a run's folder that are not read, with the reason.
    [
        "ALTER TABLE sources ADD COLUMN points BIGINT DEFAULT 0",
        "UPDATE sources SET points = (SELECT count(*) FROM point_rows p WHERE p.source_id = sources.id)",
        "CREATE TABLE skipped_files (run_id VARCHAR, path VARCHAR, reason VARCHAR, bytes BIGINT)",
    ],
    # v7: files whose read fails as a whole (permission, an I/O error, a read that raised), with the reason
    # and the backoff, until a read succeeds: shown per run and overall, never only in the log.
    [
        """CREATE TABLE failing_files (
            path VARCHAR PRIMARY KEY, run_id VARCHAR, reason VARCHAR, attempts INTEGER, since DOUBLE,
            last_failed_at DOUBLE, next_try_at DOUBLE)""",
    ],
]
SCHEMA_VERSION = len(MIGRATIONS)


class StoreError(RuntimeError):
    """The database cannot be used; the message names the file and what to do."""


def schema_version(con: duckdb.DuckDBPyConnection) -> int:
    """The database's schema version (0 for an empty file)."""
    con.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER)")
    rows = con.execute("SELECT max(version) FROM schema_version").fetchall()
    return rows[0][0] or 0


def migrate(con: duckdb.DuckDBPyConnection, target: int = SCHEMA_VERSION) -> int:
    """Bring the database up to `target`, one version per transaction; idempotent. Returns the version."""
    version = started = schema_version(con)
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
    if version > started:
        # Fold the migrations into the file at once: DuckDB 1.4.4 cannot replay a WAL holding them (a
        # collector killed before its first checkpoint left a file it refused to open: "GetDefaultDatabase
        # with no default database set", duckdb/duckdb#19712); 2.0 can, and the checkpoint costs ~20 ms once.
        con.execute("CHECKPOINT")
    if started:  # a file this call built from nothing has exactly the migrations' tables
        _check_columns(con, version)
    return version


def _columns(con: duckdb.DuckDBPyConnection) -> set[tuple[str, str]]:
    rows = con.execute(
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'main'"
    ).fetchall()
    return {(t, c) for t, c in rows}


@functools.cache
def _reference_columns(version: int) -> frozenset[tuple[str, str]]:
    """The columns the migrations up to `version` create, built once per process in memory (every opening of
    a database compares with them: `check` opens one for each query)."""
    reference = duckdb.connect(":memory:")
    try:
        for statements in MIGRATIONS[:version]:
            for statement in statements:
                reference.execute(statement)
        return frozenset(_columns(reference))
    finally:
        reference.close()


def _check_columns(con: duckdb.DuckDBPyConnection, version: int) -> None:
    """Refuse a file whose tables do not match its stated version (written by a development build), with a
    clear message instead of a query failing later in the daemon."""
    missing = sorted(_reference_columns(version) - _columns(con))
    if missing:
        names = ", ".join(f"{t}.{c}" for t, c in missing[:6])
        raise StoreError(
            f"the database says schema version {version} but lacks {names}: it was written by a development "
            f"build of runwatch. Nothing was changed; move the file aside and let the collector build a new one "
            f"(the trainers' files are the source of truth, so a new database holds the same points)."
        )
