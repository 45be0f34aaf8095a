"""Team mode's collector names: who holds a name in the lake (`team_names`), and claiming one.

A name is held by the collector that registered it last, while its heartbeat is younger than LIVE_S (on the
same host, only while its pid lives). Claiming a name (a collector's start) and `collector forget` each check
and write under the name's lock in the Postgres catalog (`name_lock`), in one lake transaction begun inside
it, so neither can come between the other's check and write, and two starts of one name go one at a time:
the second sees the first live. A collector's heartbeat (`beat`) names its host and pid: one forgotten, or
whose name was taken, while it was not seen for LIVE_S finds no row, and registers again (`NameLost`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections.abc import Iterator

import duckdb

from collector.core.runtime import pid_alive
from collector.store import lake_access
from collector.store.schema import StoreError

log = logging.getLogger("collector")

# This process's host as its registration names it, read once (a laptop's host name can change as it runs).
HOST = socket.gethostname()
LIVE_S = 30.0  # a collector whose heartbeat is older than this is gone (its name may be taken again)
NAME_LOCKS = 0x72770001  # the first key of runwatch's name locks: pg_advisory_xact_lock(NAME_LOCKS, id block)
NAME_LOCK_WAIT_S = 60  # how long a start or a forget waits while another holds the same name's lock


@contextlib.contextmanager
def name_lock(con: duckdb.DuckDBPyConnection, lake: str, ns: int, name: str) -> Iterator[None]:
    """Hold collector `name`'s lock (by its id block `ns`) in the lake's Postgres catalog while the block
    runs; the block's lake transaction must begin inside it (a DuckLake transaction reads the snapshot it
    began with: measured, a lock taken after its first read leaves it reading the older snapshot). StoreError
    when another process held the lock for NAME_LOCK_WAIT_S. A catalog that is not Postgres has none and needs
    none: a DuckDB-file catalog is open in one process at a time (DuckDB locks the file; measured: a second
    collector or a team API is refused at attach, `lake._attach_failure` says so)."""
    # (held to the block's end: after its lake transaction committed)
    with lake_access.lock_holder(con, lake, NAME_LOCK_WAIT_S) as held:
        if held is None:
            yield
            return
        holder, metadata = held
        key = f"{NAME_LOCKS}, {int(ns)}"
        (free,) = holder.execute(
            f"SELECT * FROM postgres_query('{metadata}', 'SELECT pg_try_advisory_xact_lock({key})')"
        ).fetchone()
        try:
            if not free:
                log.warning(
                    "collector %r: another process holds its name in the lake (a collector of that name "
                    "starting, or `collector forget --collector %s`): waiting for it, at most %d s",
                    name, name, NAME_LOCK_WAIT_S,
                )  # fmt: skip
                holder.execute(f"CALL postgres_execute('{metadata}', 'SELECT pg_advisory_xact_lock({key})')")
        except duckdb.Error as e:
            if "lock timeout" not in str(e):
                raise
            raise StoreError(
                f"collector {name!r}: another process held its name in the lake for {NAME_LOCK_WAIT_S} s (a "
                f"collector of that name starting, or `collector forget --collector {name}`): nothing was done; "
                "try again"
            ) from None
        yield


def live_holder(cur: duckdb.DuckDBPyConnection, lake: str, name: str) -> str | None:
    """Which live collector other than this process holds `name` ("host H, pid P, seen N s ago"), or None."""
    now, host, pid = time.time(), HOST, os.getpid()
    rows = cur.execute(f"SELECT host, pid, heartbeat_at FROM {lake}.team_names WHERE name = ?", [name])
    for other_host, other_pid, beat in rows.fetchall():
        if (other_host, other_pid) == (host, pid) or beat is None or now - beat >= LIVE_S:
            continue
        if other_host != host or pid_alive(other_pid):  # on this host a dead pid frees the name at once
            return f"host {other_host}, pid {other_pid}, seen {now - beat:.0f} s ago"
    return None


def claim(cur: duckdb.DuckDBPyConnection, lake: str, name: str, ns: int) -> None:
    """Register this process as collector `name` (id block `ns`) in one lake transaction; StoreError, and
    nothing written, while another live collector holds the name or another name has the same id block.
    Run it under `name_lock`."""
    cur.execute("BEGIN TRANSACTION")
    try:
        holder = live_holder(cur, lake, name)
        if holder:
            raise StoreError(
                f"a collector named {name!r} is live ({holder}): give this one another --collector name"
            )
        clash = cur.execute(
            f"SELECT name FROM {lake}.team_names WHERE ns = ? AND name <> ?", [ns, name]
        ).fetchall()
        if clash:
            raise StoreError(
                f"--collector {name!r} shares its id block with {clash[0][0]!r}: pick another name"
            )
        now = time.time()
        cur.execute(f"DELETE FROM {lake}.team_names WHERE name = ?", [name])
        cur.execute(
            f"INSERT INTO {lake}.team_names VALUES (?, ?, ?, ?, ?, ?)",
            [name, ns, HOST, os.getpid(), now, now],
        )
        cur.execute("COMMIT")
    except BaseException:
        # (a failed COMMIT has ended the transaction already: its ROLLBACK would fail and hide why)
        with contextlib.suppress(duckdb.Error):
            cur.execute("ROLLBACK")
        raise


class NameLost(StoreError):
    """The lake no longer holds this process's registration: its collector was forgotten (`collector
    forget`), or its name taken by another start, while it was not seen for LIVE_S (asleep, stopped, cut off)."""


def beat(cur: duckdb.DuckDBPyConnection, lake: str, name: str, at: float) -> None:
    """Write this process's heartbeat as collector `name` (in the caller's lake transaction); NameLost when the
    lake no longer registers this process under that name."""
    (written,) = cur.execute(
        f"UPDATE {lake}.team_names SET heartbeat_at = ? WHERE name = ? AND host = ? AND pid = ?",
        [at, name, HOST, os.getpid()],
    ).fetchone()
    if not written:
        raise NameLost(
            f"collector {name!r} is no longer registered in the lake (forgotten with `collector forget`, or its "
            f"name taken by another start, while this one was not seen for {LIVE_S:.0f} s): registering it "
            "again, then publishing everything the lake lacks (refused while another live collector holds it)"
        )
