"""Team mode's lake format: which runwatch may write a team lake, and the upgrade of an older lake.

`FORMAT` is the team lake's layout as this code writes and reads it, recorded in `team_format` (a row per
upgrade; the highest counts). A collector refuses a lake of a newer format at start and at each heartbeat
(`refuse_newer`: a newer runwatch may keep what this code relies on elsewhere), so does a reader and `collector
forget`; a collector upgrades an older lake in one lake transaction (`ensure`), under the lake's exclusive
write lock. A change of the lake's layout that older code would misread raises `FORMAT`: older code then
refuses the lake itself.

Format 1 had no `team_format`: its collectors registered in `team_collectors`, and those older than 38b4216 (26
Nov 2026) counted what they had published from `team_marks`, which format-1 collectors since then no longer
write: such a collector on a lake they wrote finds no marks and publishes every point again. Format 2 moves the
names to `team_names` and leaves `team_collectors` and `team_marks` as views whose every read raises `TOO_OLD`:
a collector of format 1 reads `team_collectors` when it starts (claiming its name, after creating only tables the
lake lacks) and stops there, publishing nothing; one live while the lake is upgraded fails every batch (one before
38b4216 at once: it writes `team_marks`; one since at its next heartbeat, an UPDATE of `team_collectors`: measured,
and what it published meanwhile was counted from the lake's points, so nothing twice).
"""

from __future__ import annotations

import contextlib
import time

import duckdb

from collector.store import lake_compaction
from collector.store.schema import StoreError

FORMAT = 2
# Lake tables of team mode itself (not copies of the collector's tables).
TEAM_TABLES = [
    """CREATE TABLE IF NOT EXISTS {lake}.team_names (name VARCHAR, ns BIGINT, host VARCHAR, pid BIGINT,
       started_at DOUBLE, heartbeat_at DOUBLE)""",
    """CREATE TABLE IF NOT EXISTS {lake}.team_stops (run_id VARCHAR, reason VARCHAR, asked_at DOUBLE,
       asked_by VARCHAR, done_at DOUBLE, outcome VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS {lake}.team_alert_changes (alert_id BIGINT, state VARCHAR, note VARCHAR,
       asked_at DOUBLE, done_at DOUBLE, outcome VARCHAR)""",
    "CREATE TABLE IF NOT EXISTS {lake}.team_format (format BIGINT, upgraded_at DOUBLE)",
]
TOO_OLD = (
    "this team lake is runwatch lake format 2 or newer, which this runwatch predates: it would publish every "
    "point again. Nothing was published; upgrade runwatch on this machine (git pull, or reinstall it) and "
    "start it again"
)
# Format 1's tables, each a view with its columns (so format 1's queries bind) that raises TOO_OLD when read.
FORMAT_1_TABLES = {
    "team_collectors": [("name", "VARCHAR"), ("ns", "BIGINT"), ("host", "VARCHAR"), ("pid", "BIGINT"),
                        ("started_at", "DOUBLE"), ("heartbeat_at", "DOUBLE")],
    "team_marks": [("ns", "BIGINT"), ("series", "BIGINT"), ("points", "BIGINT"), ("last_step", "BIGINT"),
                   ("replaced", "BIGINT")],
}  # fmt: skip


def found(cur: duckdb.DuckDBPyConnection, lake: str) -> int:
    """The lake's format: `team_format`'s highest, 1 for a lake of format-1 collectors (a `team_collectors`
    table, no `team_format`), 0 for one no collector has published into."""
    kinds = dict(
        cur.execute(
            """SELECT table_name, table_type FROM information_schema.tables WHERE table_catalog = ?
               AND table_name IN ('team_format', 'team_collectors')""",
            [lake],
        ).fetchall()
    )
    if "team_format" in kinds:
        (highest,) = cur.execute(f"SELECT max(format) FROM {lake}.team_format").fetchone()
        return int(highest or 0)
    return 1 if kinds.get("team_collectors") == "BASE TABLE" else 0


def refuse_newer(cur: duckdb.DuckDBPyConnection, lake: str, shown: str) -> int:
    """The lake's format (`found`); StoreError when it is newer than this code's."""
    have = found(cur, lake)
    if have > FORMAT:
        raise StoreError(
            f"the team lake {shown} is runwatch lake format {have}, newer than this runwatch knows "
            f"({FORMAT}): a newer runwatch wrote it, and this one would misread it. Nothing was written; "
            "upgrade runwatch on this machine (git pull, or reinstall it) and start it again"
        )
    return have


def ensure(cur: duckdb.DuckDBPyConnection, lake: str, shown: str) -> None:
    """A collector's start: StoreError for a newer lake; an older one (or a new one) brought to `FORMAT` in one
    lake transaction under the lake's exclusive write lock (no collector's batch between its steps), where
    format 1's names move to `team_names` and its tables become views raising `TOO_OLD`. Idempotent; a commit
    race (another collector upgrading it at once, a DuckDB-file catalog with no lock) raises DuckDB's
    TransactionException, to be run again."""
    if refuse_newer(cur, lake, shown) == FORMAT:
        return
    with lake_compaction.lake_lock(cur, lake, exclusive=True):
        cur.execute("BEGIN TRANSACTION")
        try:
            have = refuse_newer(cur, lake, shown)  # (again, in the transaction: another may have done it)
            if have < FORMAT:
                _upgrade(cur, lake, have)
            cur.execute("COMMIT")
        except BaseException:
            # (a failed COMMIT has ended the transaction already: its ROLLBACK would fail and hide why)
            with contextlib.suppress(duckdb.Error):
                cur.execute("ROLLBACK")
            raise


def _upgrade(cur: duckdb.DuckDBPyConnection, lake: str, have: int) -> None:
    for statement in TEAM_TABLES:
        cur.execute(statement.format(lake=lake))
    if have == 1:  # (the same columns in every format-1 lake)
        columns = ", ".join(name for name, _ in FORMAT_1_TABLES["team_collectors"])
        cur.execute(f"INSERT INTO {lake}.team_names SELECT {columns} FROM {lake}.team_collectors")
    tables = {
        t
        for (t,) in cur.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_catalog = ? AND table_type = 'BASE TABLE'",
            [lake],
        ).fetchall()
    }
    message = TOO_OLD.replace("'", "''")
    for table, columns in FORMAT_1_TABLES.items():
        if table in tables:
            cur.execute(f"DROP TABLE {lake}.{table}")
        raising = ", ".join(f"error('{message}')::{kind} AS {name}" for name, kind in columns)
        cur.execute(
            f"CREATE VIEW IF NOT EXISTS {lake}.{table} AS SELECT {raising} WHERE error('{message}') IS NULL"
        )
    cur.execute(f"INSERT INTO {lake}.team_format VALUES (?, ?)", [FORMAT, time.time()])
