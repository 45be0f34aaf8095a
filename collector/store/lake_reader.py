"""Team mode's reader side: a connection whose default database is the lake, its cursors, and the changes a
reader asks of the collectors that own the runs (stops, acks and resolves: rows in the lake that the owning
collector carries out, `collector.daemon.team`)."""

from __future__ import annotations

import logging
import time

import duckdb

from collector.store import lake_access
from collector.store.lake import LAKE, LakeSpec, attach, load_extensions, masked

log = logging.getLogger("collector")


def open_lake_reader(spec: LakeSpec, memory_mb: int) -> duckdb.DuckDBPyConnection:
    """A connection whose default database is the lake: the store's read queries run on it unchanged."""
    con = duckdb.connect(":memory:", config={"memory_limit": f"{memory_mb}MB"})
    load_extensions(con)
    attach(con, spec)
    if not lake_access.role_may_write(con, LAKE):  # then nothing is written, not even a file a commit drops
        log.info(
            "team lake: the Postgres role %r may only read the lake: serving it read-only (stops, acks and "
            "resolves are refused here)",
            lake_access.role_name(con, LAKE),
        )
        con.execute(f"DETACH {LAKE}")
        attach(con, spec, read_only=True)
    con.execute(f"USE {LAKE}")
    return con


def ask_alert_states(
    cur: duckdb.DuckDBPyConnection, alert_ids: list[int], state: str, note: str | None
) -> None:
    """A reader's ack or resolve of alerts (one, or an incident's): rows, in one commit, that the collector
    which raised them applies (then publishes the alerts' new state)."""
    lake_access.refuse_if_read_only(cur, LAKE)
    if alert_ids:
        cur.execute(
            f"INSERT INTO {LAKE}.team_alert_changes SELECT unnest(?), ?, ?, ?, NULL, NULL",
            [alert_ids, state, note, time.time()],
        )


# What a query on a pooled Postgres connection says once the server restarted under it.
_DEAD_CONNECTION = ("server closed the connection", "no connection to the server", "terminating connection")


class ReaderCursor:
    """A reader's cursor: a query that met a dead pooled catalog connection (Postgres restarted) is run again,
    on a fresh one (the pool drops the dead one). Without the pool each query would connect anew: measured
    ~500 instead of ~200 ms for `GET /api/runs` over 100 runs."""

    def __init__(self, cur: duckdb.DuckDBPyConnection) -> None:
        self._cur = cur

    def execute(self, *args, **kwargs):
        for attempt in range(4):
            try:
                return self._cur.execute(*args, **kwargs)
            except duckdb.Error as e:
                if isinstance(e, duckdb.IOException) and "Permission denied" in str(e):
                    raise lake_access.LakeUnreadable(str(e).splitlines()[0]) from None
                if attempt == 3 or not any(s in str(e) for s in _DEAD_CONNECTION):
                    if masked(str(e)) != str(e):  # (a reconnect's error quotes the catalog string)
                        raise type(e)(masked(str(e))) from None
                    raise
                log.info("team lake: the catalog connection was gone (Postgres restarted?); querying again")
        return None

    def __getattr__(self, name: str):
        return getattr(self._cur, name)


def ask_stop(cur: duckdb.DuckDBPyConnection, run_id: str, reason: str, by: str) -> None:
    """A reader's stop request: a row the owning collector picks up (it writes the run's stop file)."""
    lake_access.refuse_if_read_only(cur, LAKE)
    cur.execute(
        f"INSERT INTO {LAKE}.team_stops VALUES (?, ?, ?, ?, NULL, NULL)", [run_id, reason, time.time(), by]
    )
