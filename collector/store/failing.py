"""Files whose read failed as a whole (the `failing_files` table): kept in the store, so the API, the CLI and a
collector started later all see them until a read of the file succeeds."""

from __future__ import annotations

import time

import duckdb

from collector.store.db import Store


def note_failing(
    cur: duckdb.DuckDBPyConnection,
    path: str,
    run_id: str | None,
    reason: str,
    attempts: int,
    next_try_at: float,
) -> None:
    """Record one more failed read of `path` (in the caller's transaction); `since` stays the first one's."""
    now = time.time()
    cur.execute(
        """INSERT INTO failing_files VALUES (?, ?, ?, ?, ?, ?, ?)
           ON CONFLICT (path) DO UPDATE SET run_id = excluded.run_id, reason = excluded.reason,
               attempts = excluded.attempts, last_failed_at = excluded.last_failed_at,
               next_try_at = excluded.next_try_at""",
        [path, run_id, reason, attempts, now, now, next_try_at],
    )


def clear_failing(cur: duckdb.DuckDBPyConnection, paths: list[str]) -> None:
    """`paths` were read: they are failing no more."""
    if paths:
        cur.execute("DELETE FROM failing_files WHERE list_contains(?, path)", [paths])


def failing_files(store: Store, run: str | None = None) -> list[dict]:
    """The files failing now: `run`, `path`, `reason` (the last failure's), `attempts` (in a row), `since` (the
    first failure, epoch seconds), `last_failed_at`, `next_try_at`."""
    where, params = ("WHERE run_id = ?", [run]) if run is not None else ("", [])
    return store.dicts(
        f"""SELECT run_id AS run, path, reason, attempts, since, last_failed_at, next_try_at
            FROM failing_files {where} ORDER BY run_id, path""",
        params,
    )
