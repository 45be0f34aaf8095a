"""Retiring a collector from a team's lake: `collector forget --store ... --data-path ... --collector NAME`.

Deletes every row the collector published (its runs `NAME/RUN`, the rows of its id block, its marks, the stops
and acks asked of it, its name) in one lake transaction, so a reader shows all of it or none of it. Refused for
a role that may only read the lake and while a collector of that name is live (`team_collectors`: it would
publish everything again from its file). The Parquet files the rows were in go when a collector next compacts
the lake (`LakePublisher.compact`: snapshots older than a minute expired, their files removed).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time

import duckdb

from collector.core.runtime import pid_alive
from collector.store import lake_access
from collector.store.lake import (
    LAKE,
    LIVE_S,
    NAME_RE,
    LakeSpec,
    attach,
    load_extensions,
    masked,
    namespace,
    owned_rows,
)
from collector.store.schema import StoreError

TRIES = 5  # the transaction is run again after a commit conflict with a live collector's batch


def forget_collector(spec: LakeSpec, name: str) -> dict[str, int]:
    """Delete collector `name`'s rows from the lake in one transaction; the rows deleted per table (those
    with any). StoreError when the lake cannot be written, the name is live, it has nothing there, or a
    statement fails (a commit conflict, Postgres gone; said without a password)."""
    if not NAME_RE.match(name):
        raise StoreError(f"--collector {name!r} is no collector's name (letters, digits, '_', '.', '-')")
    con = duckdb.connect()
    try:
        return _forget(con, spec, name)
    except duckdb.Error as e:
        # (a failed commit says why on its second line: "Failed to commit DuckLake transaction." first)
        why = masked(" ".join(line.strip() for line in str(e).splitlines()[:2]) or type(e).__name__)
        raise StoreError(
            f"collector {name!r} not forgotten from the lake {spec.shown}: {why} (its deletes are one "
            "transaction: all of them or none went; forget again to finish)"
        ) from None
    finally:
        con.close()


def _forget(con: duckdb.DuckDBPyConnection, spec: LakeSpec, name: str) -> dict[str, int]:
    load_extensions(con)
    attach(con, spec, read_only=True)  # DuckLake creates a missing catalog only on a writable attach
    if not lake_access.role_may_write(con, LAKE):
        raise StoreError(
            f"the lake's Postgres role {lake_access.role_name(con, LAKE)!r} may only read it: forgetting a "
            "collector needs a role that may write the lake"
        )
    con.execute(f"DETACH {LAKE}")
    attach(con, spec)
    for attempt in range(TRIES - 1):
        try:
            _refuse_live(con, name)
            return _delete(con, name)
        except duckdb.TransactionException:
            # A live collector's commit deleted from a data file this one deletes from too (their rows share
            # files once compaction merged them: DuckLake then refuses the later commit); rolled back, again.
            time.sleep(0.1 * (attempt + 1))
    _refuse_live(con, name)
    return _delete(con, name)


def _refuse_live(con: duckdb.DuckDBPyConnection, name: str) -> None:
    """StoreError while a collector of `name` is live, as `LakePublisher` judges a name taken."""
    (team,) = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_catalog = ? AND table_name = 'team_collectors'",
        [LAKE],
    ).fetchone()
    if not team:  # a DuckLake no runwatch collector has published into
        raise StoreError(f"no collector has published into this lake: nothing to forget of {name!r}")
    now, host = time.time(), socket.gethostname()
    rows = con.execute(
        f"SELECT host, pid, heartbeat_at FROM {LAKE}.team_collectors WHERE name = ?", [name]
    ).fetchall()
    for other_host, pid, beat in rows:
        if beat is None or now - beat >= LIVE_S or (other_host == host and not pid_alive(pid)):
            continue
        if other_host == host and pid == os.getpid():
            continue
        raise StoreError(
            f"the collector {name!r} is live (host {other_host}, pid {pid}, seen {now - beat:.0f} s ago): stop "
            "it first, or it publishes everything again from its own file (stopped on another host, its name is "
            f"taken until {LIVE_S:.0f} s after its last heartbeat)"
        )


def _delete(con: duckdb.DuckDBPyConnection, name: str) -> dict[str, int]:
    ns = namespace(name)
    tables: dict[str, list[tuple[str, str]]] = {}
    for table, column, kind in con.execute(
        """SELECT c.table_name, c.column_name, c.data_type FROM information_schema.columns c
           JOIN information_schema.tables t ON t.table_catalog = c.table_catalog
             AND t.table_schema = c.table_schema AND t.table_name = c.table_name
           WHERE c.table_catalog = ? AND t.table_type = 'BASE TABLE' ORDER BY c.table_name, c.ordinal_position""",
        [LAKE],
    ).fetchall():
        tables.setdefault(table, []).append((column, kind))
    special = {"team_collectors": f"name = '{name}'", "team_marks": f"ns = {ns}"}
    deleted: dict[str, int] = {}
    con.execute("BEGIN TRANSACTION")
    try:
        for table, columns in tables.items():
            try:
                where = special.get(table) or owned_rows(table, columns, name, ns)
            except StoreError:  # a table no collector publishes (it has no owner column): none of its rows
                continue
            (count,) = con.execute(f'DELETE FROM {LAKE}."{table}" WHERE {where}').fetchone()
            if count:
                deleted[table] = count
        if not deleted:
            raise StoreError(f"no collector named {name!r} has published into this lake: nothing to forget")
        con.execute("COMMIT")
    except BaseException:
        # (a failed COMMIT has ended the transaction already: its ROLLBACK would fail and hide why)
        with contextlib.suppress(duckdb.Error):
            con.execute("ROLLBACK")
        raise
    return deleted
