"""Team mode's compaction of the lake, and the lock that keeps it apart from every collector's writes.

DuckLake 0.3 (DuckDB 1.4.4) merging a table's files (`ducklake_merge_adjacent_files`) while another transaction
deletes rows of it can commit both, and the merged file then holds rows the other deleted (measured in a scratch
lake, 4 writers deleting their own rows beside a merge every 0.5 s for 40 s: 4,400 of 167,400 deleted rows back
when whole files were deleted, 9 of 21,240 when some rows of a file were; at 4 x 250 live runs, 409 of the 1,000
rows of `runs` twice after one compaction). A collector deletes by the rows it knows it wrote, so a row brought
back stayed, twice, until it restarted. So every write of a collector's (`lake_lock(shared)`: a batch, a stop
or an ack carried out, its name claimed at start; `collector forget` too) and a compaction
(`lake_lock(exclusive)`) hold one lock of the lake's Postgres catalog: a compaction waits for the writes in
flight, and the writes wait for it (Postgres queues a shared request behind a waiting exclusive one, so the
batches never starve it).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import duckdb

from collector.store import lake_access

log = logging.getLogger("collector")

LAKE_LOCK = (
    "1920401410, 1"  # pg_advisory_xact_lock(runwatch's key 0x72770002, 1): the lake's writes and merges
)
LOCK_WAIT_S = 60  # a write or a compaction waiting longer fails (tried again next time; nothing is lost)
# A table of fewer live files is not merged: those every batch rewrites (`metric_stats`, `runs`, `sources`) keep
# 4-8 (a file whose rows were all deleted goes), and merging them put several collectors' rows in one file,
# whose next deletes by two collectors conflict (DuckLake refuses the later: at 4 x 250 a batch failed 5 tries).
MERGE_FROM_FILES = 16
# Files of this size or more are left out of a merge (DuckLake's `max_file_size`): by default every merge rewrote
# the table's largest file with the new small ones, so its cost grew with the lake (`point_rows`: ~7 M rows an
# hour at 4 x 250 live runs; beside 10 M rows a merge wrote 84 MB, bench/lake_merge.py) while every write waited.
MERGE_UP_TO_BYTES = 16 * 1024 * 1024


@dataclass
class Compaction:
    """What a compaction did: the tables merged (with their live files before), those whose merge conflicted
    with a commit (merged next time), and its seconds: merging, under the exclusive lock (the collectors' writes
    wait meanwhile), and dropping old snapshots and files after it."""

    merged: dict[str, int] = field(default_factory=dict)
    left: list[str] = field(default_factory=list)
    merge_s: float = 0.0
    cleanup_s: float = 0.0


@contextlib.contextmanager
def lake_lock(con: duckdb.DuckDBPyConnection, lake: str, exclusive: bool) -> Iterator[None]:
    """Hold the lake's write lock, shared (a collector's write) or exclusive (a compaction), while the block
    runs; its lake transaction must begin inside it. A catalog that is not Postgres has none (one process)."""
    # (held to the block's end: after its lake transaction committed)
    with lake_access.lock_holder(con, lake, LOCK_WAIT_S) as held:
        if held is not None:
            holder, metadata = held
            how = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
            holder.execute(f"CALL postgres_execute('{metadata}', 'SELECT {how}({LAKE_LOCK})')")
        yield


def compact(con: duckdb.DuckDBPyConnection, lake: str, keep_s: int) -> Compaction:
    """Merge each table's small Parquet files (a batch writes a file per table it touches; a reader opens every
    one) where it has `MERGE_FROM_FILES` or more, then drop snapshots and files older than `keep_s` (a reader's
    query in flight still finds its files), under the exclusive `lake_lock`. Each table is merged in a
    transaction of its own: one merge of the whole lake failed whenever any table conflicted."""
    done = Compaction()
    with lake_lock(con, lake, exclusive=True):
        started = time.monotonic()
        info = con.execute(f"SELECT table_name, file_count FROM ducklake_table_info('{lake}')").fetchall()
        for table, files in info:
            if files < MERGE_FROM_FILES:
                continue
            try:
                con.execute(
                    f"CALL ducklake_merge_adjacent_files('{lake}', '{table}', max_file_size => {MERGE_UP_TO_BYTES})"
                )
                done.merged[table] = files
            except duckdb.TransactionException:  # (a reader's stop or ack inserted meanwhile)
                done.left.append(table)
        done.merge_s = time.monotonic() - started
    started = time.monotonic()
    # In FROM, not CALL: their timestamp results would need pytz in Python.
    for fn in ("ducklake_expire_snapshots", "ducklake_cleanup_old_files"):
        con.execute(
            f"SELECT count(*) FROM {fn}('{lake}', older_than => now() - INTERVAL {int(keep_s)} SECOND)"
        ).fetchall()
    done.cleanup_s = time.monotonic() - started
    return done


def compacted_within(con: duckdb.DuckDBPyConnection, lake: str, seconds: float) -> bool:
    """Whether the lake holds a compaction's snapshot younger than `seconds` (DuckLake records a merge as
    `compacted_table:ID` in the catalog's ducklake_snapshot_changes; expired with its snapshot). Only a
    Postgres catalog is asked; another says no."""
    if not lake_access.catalog_is_postgres(con, lake):
        return False
    metadata = lake_access.METADATA.format(lake=lake)
    (recent,) = con.execute(
        f"""SELECT * FROM postgres_query('{metadata}', 'SELECT count(*) FROM ducklake_snapshot s
            JOIN ducklake_snapshot_changes c USING (snapshot_id)
            WHERE c.changes_made LIKE ''compacted_table:%''
              AND s.snapshot_time > now() - make_interval(secs => {float(seconds)})')"""
    ).fetchone()
    return bool(recent)
