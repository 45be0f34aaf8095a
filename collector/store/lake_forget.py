"""Retiring a collector from a team's lake: `collector forget --store ... --data-path ... --collector NAME`.

Deletes every row the collector published (its runs `NAME/RUN`, the rows of its id block, the stops
and acks asked of it, its name) in one lake transaction, so a reader shows all of it or none of it. Refused for
a role that may only read the lake and while a collector of that name is live (`team_names`: it would
publish everything again from its file), checked in that transaction under the name's lock
(`lake_names.name_lock`): a collector of that name starting meanwhile waits, then publishes everything again.
Under the lake's write lock too (`lake_compaction.lake_lock`), as a collector's writes: a compaction waits for it. The
Parquet files the rows were in go when a collector next compacts the lake (`LakePublisher.compact`:
snapshots older than a minute expired, their files removed).
"""

from __future__ import annotations

import contextlib
import time

import duckdb

from collector.store import lake_access, lake_compaction, lake_format, lake_names
from collector.store.lake import (
    LAKE,
    NAME_RE,
    LakeSpec,
    attach,
    load_extensions,
    masked,
    namespace,
    owned_rows,
)
from collector.store.lake_names import LIVE_S
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
    if not lake_format.refuse_newer(con, LAKE, spec.shown):
        raise StoreError(f"no collector has published into this lake: nothing to forget of {name!r}")
    lake_format.ensure(
        con, LAKE, spec.shown
    )  # a lake of older collectors: its names where this code reads them
    # Under the name's lock: a collector of that name starting now waits until this is done (then publishes
    # everything again from its file); one that started first is live by then, and this is refused. And under
    # the lake's write lock, as a collector's writes: a compaction merging beside these deletes brings rows back.
    with (
        lake_names.name_lock(con, LAKE, namespace(name), name),
        lake_compaction.lake_lock(con, LAKE, exclusive=False),
    ):
        for attempt in range(TRIES - 1):
            try:
                return _delete(con, name)
            except duckdb.TransactionException:
                # A live collector's commit deleted from a data file this one deletes from too (their rows
                # share files once compaction merged them: DuckLake then refuses the later commit); again.
                time.sleep(0.1 * (attempt + 1))
        return _delete(con, name)


def _refuse_live(con: duckdb.DuckDBPyConnection, name: str) -> None:
    """StoreError while a collector of `name` is live, as a collector's start judges a name taken."""
    holder = lake_names.live_holder(con, LAKE, name)
    if holder:
        raise StoreError(
            f"the collector {name!r} is live ({holder}): nothing was deleted; stop it first, or it publishes "
            "everything again from "
            f"its own file (stopped on another host, its name is taken until {LIVE_S:.0f} s after its last "
            "heartbeat)"
        )


def _delete(con: duckdb.DuckDBPyConnection, name: str) -> dict[str, int]:
    """In one lake transaction: refused while `name` is live, else every row of it deleted."""
    ns = namespace(name)
    special = {"team_names": f"name = '{name}'"}
    deleted: dict[str, int] = {}
    con.execute("BEGIN TRANSACTION")
    try:
        _refuse_live(con, name)
        tables: dict[str, list[tuple[str, str]]] = {}
        for table, column, kind in con.execute(
            """SELECT c.table_name, c.column_name, c.data_type FROM information_schema.columns c
               JOIN information_schema.tables t ON t.table_catalog = c.table_catalog
                 AND t.table_schema = c.table_schema AND t.table_name = c.table_name
               WHERE c.table_catalog = ? AND t.table_type = 'BASE TABLE'
               ORDER BY c.table_name, c.ordinal_position""",
            [LAKE],
        ).fetchall():
            tables.setdefault(table, []).append((column, kind))
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
