"""Telling a damaged database file from a busy one, and saying what to do about it.

DuckDB reports a file that is not a database (garbage, empty), corrupt blocks (a checksum that does not
match) and a file cut short (reads past its end) in words of its own, some of them only when the damaged
part is read. `damage_of` names the damage in the user's words; `check_whole` finds a file shorter than
the blocks its header counts before anything reads them (a truncated copy otherwise reads in part, silently).
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb

from collector.store.schema import StoreError

HEADER_BYTES = 3 * 4096  # DuckDB's main header and its two database headers come before the first block


class DamagedDatabase(StoreError):
    """The database file is damaged: the message names it, what is wrong and what to do; nothing was changed."""


def damage_of(path: Path, error: str) -> str | None:
    """What is wrong with the file at `path`, told from DuckDB's `error`; None when the error is not damage."""
    if "not a valid DuckDB database file" in error:
        size = _size(path)
        if size == 0:
            return "it is empty (0 bytes), not a DuckDB database"
        return f"it is not a DuckDB database file ({size:,} bytes that do not start with DuckDB's header)"
    if "Corrupt database file" in error or "checksum" in error:
        return f"its contents are corrupt (DuckDB: {error.splitlines()[0][:200]})"
    if "Could not read enough bytes" in error:
        return f"it is cut short: DuckDB read past its end ({_size(path):,} bytes)"
    return None


def damaged(path: Path, what: str, done: str = "Nothing was changed") -> DamagedDatabase:
    """The error for a damaged database: one message saying what is wrong, what was `done` and what to do."""
    return DamagedDatabase(
        f"the database {path} is damaged: {what}. {done}. Restore it from a backup, or move it"
        f" aside and start a new database (a new --db path, or the same path once it is moved) and ingest the"
        f" runs again: the run files are the source of truth (acks and notes on alerts live only in the old"
        f" database)"
    )


def damage_met(path: Path, error: BaseException, done: str) -> DamagedDatabase | None:
    """The DamagedDatabase for `error` met while the database was in use (a part not read at start-up:
    `done` says what was done about it), or None when `error` says nothing of damage."""
    if isinstance(error, DamagedDatabase):
        return error
    what = damage_of(path, str(error)) if isinstance(error, duckdb.Error) else None
    return damaged(path, what, done) if what else None


def check_whole(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Raise DamagedDatabase when the file is shorter than the blocks DuckDB's header says it holds."""
    try:
        rows = con.execute("SELECT block_size, total_blocks FROM pragma_database_size()").fetchall()
    except duckdb.Error as e:
        what = damage_of(path, str(e))
        if what:
            raise damaged(path, what) from None
        return  # (an engine that does not say: nothing to check against)
    if not rows or not rows[0][0] or rows[0][1] is None:
        return
    block_size, blocks = rows[0]
    size = _size(path)
    if not 0 < size < HEADER_BYTES + block_size * blocks:
        return
    # The header's count takes in free blocks a checkpoint left at the end (a collector killed while closing
    # leaves such a file, and it is whole): only a block that holds table data past the end is damage.
    used = _last_used_block(con, path)
    if used is not None and HEADER_BYTES + block_size * (used + 1) > size:
        raise damaged(
            path,
            f"it is cut short: {size:,} bytes, where its data reaches block {used:,}"
            f" ({HEADER_BYTES + block_size * (used + 1):,} bytes)",
        )


def _last_used_block(con: duckdb.DuckDBPyConnection, path: Path) -> int | None:
    """The highest block id that holds a column segment of any table (DuckDB's storage info, metadata
    only), or None when no table holds a block."""
    last: int | None = None
    try:
        tables = con.execute(
            "SELECT schema_name, table_name FROM duckdb_tables() WHERE NOT temporary"
        ).fetchall()
        for schema, table in tables:
            found = con.execute(
                "SELECT max(greatest(block_id, coalesce(list_max(additional_block_ids), -1)))"
                " FROM pragma_storage_info(?) WHERE persistent AND block_id >= 0",
                [f'"{schema}"."{table}"'],
            ).fetchall()
            if found and found[0][0] is not None:
                last = max(last or 0, int(found[0][0]))
    except duckdb.Error as e:
        what = damage_of(path, str(e))
        if what:
            raise damaged(path, what) from None
        raise
    return last


def _size(path: Path) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return -1
