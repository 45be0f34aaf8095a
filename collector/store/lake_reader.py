"""Team mode's reader side: a connection whose default database is the lake, its cursors, and the changes a
reader asks of the collectors that own the runs (stops, acks and resolves: rows in the lake that the owning
collector carries out, `collector.daemon.team`).

A brand-new lake (no collector has published yet) is read as an empty store: until a collector has created
the lake's catalog, and for any table it has not created yet, queries read `STAND_IN`, empty tables of the
store's own schema, so every answer is the empty one (`GET /api/runs` is []) and the collectors' runs show
once the first one publishes, without a restart. A reader never creates anything in the lake, whatever its
role may do: the first collector makes its catalog (where DuckLake records the data path) and its tables (as
copies of its own file's, `lake.LakePublisher`)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import duckdb

from collector.store import lake_access, lake_format
from collector.store.lake import LAKE, LIVE_S, TEAM_TABLES, LakeSpec, attach, load_extensions, masked
from collector.store.schema import StoreError, migrate

log = logging.getLogger("collector")
T = TypeVar("T")

STAND_IN = "no_lake_yet"  # an in-memory database: the store's tables, empty, behind the lake's own
# What DuckLake says when a read-only attach finds no catalog (no collector has published into the lake yet).
_NOT_CREATED = "creating a new DuckLake is explicitly disabled"


class LakeReader:
    """The reader's connection (`con`), the lake attached to it once a collector has created it, and its
    cursors (`cursor`)."""

    def __init__(self, spec: LakeSpec, memory_mb: int) -> None:
        """Connect and attach the lake, or wait for it (`attach_if_created`); StoreError when the lake's
        Postgres cannot be reached or refuses this role."""
        self.spec = spec
        self.con = duckdb.connect(":memory:", config={"memory_limit": f"{memory_mb}MB"})
        load_extensions(self.con)
        self.con.execute(f"ATTACH ':memory:' AS {STAND_IN}")
        self.con.execute(f"USE {STAND_IN}")
        migrate(self.con)
        for statement in TEAM_TABLES:
            self.con.execute(statement.format(lake=STAND_IN))
        self.attached = False  # whether the lake is attached (cursors then read it: ReaderCursor)
        self.read_only: bool | None = None  # whether its role may only read the lake (None: no lake yet)
        self._lock = threading.Lock()
        self.failing: str | None = (
            None  # why the lake awaited could not be attached last time (`wait_for_lake`)
        )
        self.attach_if_created()

    def attach_if_created(self) -> bool:
        """Attach the lake if its catalog exists (read-only when this role may only read the lake); whether it
        is attached. StoreError for any other failure (Postgres out of reach, a login refused)."""
        with self._lock:
            if self.attached:
                return True
            try:  # read-only first: DuckLake would create a missing catalog otherwise
                attach(self.con, self.spec, read_only=True)
            except StoreError as e:
                if _NOT_CREATED in str(e):
                    return False
                raise
            try:
                lake_format.refuse_newer(self.con, LAKE, self.spec.shown)
            except StoreError:
                self.con.execute(f"DETACH {LAKE}")
                raise
            if lake_access.role_may_write(self.con, LAKE):  # it may take stops, acks and resolves
                self.con.execute(f"DETACH {LAKE}")
                attach(self.con, self.spec)
                self.read_only = False
            else:  # then nothing is written, not even a file a commit drops
                self.read_only = True
                log.info(
                    "team lake: the Postgres role %r may only read the lake: serving it read-only (stops, acks "
                    "and resolves are refused here)",
                    lake_access.role_name(self.con, LAKE),
                )
            self.attached = True
            return True

    def wait_for_lake(self) -> bool:
        """`attach_if_created`, a failure logged once (Postgres down while the lake is still awaited) instead
        of raised; whether the lake is attached."""
        try:
            attached = self.attach_if_created()
        except StoreError as e:
            if self.failing is None:
                log.warning("team lake: %s; trying again", e)
            self.failing = str(e)
            return False
        self.failing = None
        if attached:
            log.info("team lake: a collector created the lake %s: reading it", self.spec.shown)
        return attached

    def cursor(self) -> ReaderCursor:
        """A cursor of its own (one per thread: DuckDB connections are not shared between threads)."""
        return ReaderCursor(self.con.cursor(), self)

    def state(self, cur: ReaderCursor) -> dict:
        """What `/api/health` says of the lake: `collectors` that have published into it, `read_only`, and a
        `message` while there is none, and `error`: why the lake awaited cannot be attached (a `--data-path`
        other than the one its first collector gave, Postgres gone), while it cannot."""
        (collectors,) = cur.execute("SELECT count(DISTINCT name) FROM team_names").fetchone()
        out = {"collectors": collectors, "read_only": self.read_only}
        failing = self.failing
        if failing is not None:  # (then whether a collector published is not known here)
            out["error"] = f"{failing.rstrip('.')}; this team API tries again every second"
        elif not collectors and self.attached and lake_format.found(cur, LAKE) == 1:
            out["message"] = OLDER_COLLECTORS
        elif not collectors:
            out["message"] = NO_COLLECTOR_YET
        return out


OLDER_COLLECTORS = (
    "this team lake was written by collectors of an older runwatch (lake format 1): their runs show, but not "
    "which collectors are live; upgrade them all (the first collector of this runwatch to start upgrades the "
    "lake, and older ones then refuse it)"
)
NO_COLLECTOR_YET = (
    "no collector has published into this team lake yet: its runs show here once one does (each collector: "
    "serve --store ... --data-path ... --collector NAME ROOT)"
)


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
    ~500 instead of ~200 ms for `GET /api/runs` over 100 runs. Its default database is the lake once the
    reader has attached it, with `STAND_IN` behind it for the tables the lake has not got yet; `STAND_IN`
    before."""

    def __init__(self, cur: duckdb.DuckDBPyConnection, reader: LakeReader) -> None:
        self._cur = cur
        self._reader = reader
        self._reads_lake = False
        self._point()

    def _point(self) -> None:
        """The lake as the default database, with `STAND_IN` behind it, once the reader has attached it."""
        reads_lake = self._reader.attached
        if reads_lake:
            self._cur.execute(f"USE {LAKE}")
            self._cur.execute(f"SET search_path = '{LAKE}.main,{STAND_IN}.main'")
        else:
            self._cur.execute(f"USE {STAND_IN}")
        self._reads_lake = reads_lake

    def execute(self, *args, **kwargs):
        if self._reads_lake is not self._reader.attached:  # the lake was attached since
            self._point()
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


def in_one_snapshot(cur: ReaderCursor, read: Callable[[], T], again_on_any_error: bool = False) -> T:
    """`read()`, whose queries run on `cur`, in one read transaction of the lake: DuckLake then asks Postgres for
    the snapshot and each table's files once, not once per query (a live poll, `/metrics?after=`, measured
    243 -> 146 ms p50 in-process at 4 x 250 live runs), and every query sees the same snapshot (`snapshot_now`
    is it; `snapshots()` ends there). A transaction that a dead catalog connection broke (Postgres restarted) is
    rolled back and `read()` run again without one, where `ReaderCursor` retries each query; with
    `again_on_any_error`, so is one that any DuckDB error broke (a failed read aborts the transaction: a `read`
    that goes on after one, as the overview does after `runs_changed`'s, needs a fresh one)."""
    cur.execute("BEGIN TRANSACTION")
    try:
        out = read()
    except BaseException as e:
        with contextlib.suppress(duckdb.Error):
            cur.execute("ROLLBACK")
        if isinstance(e, duckdb.Error) and (again_on_any_error or any(s in str(e) for s in _DEAD_CONNECTION)):
            return read()
        raise
    cur.execute("COMMIT")
    return out


@dataclass(frozen=True)
class LakeMark:
    """Where a reader's copy of some of the lake's tables stands: the snapshot read before it was built, each
    table's id in the lake, and the row id each table's rows inserted since start from (DuckLake numbers a
    table's rows in commit order and keeps the numbers through compaction)."""

    snapshot: int
    table_ids: dict[str, int]
    next_rows: dict[str, int]


# What a snapshot's `changes` may say of a commit that `runs_changed` follows: tables with rows inserted (found
# by their row ids) and with rows deleted (read back by `ducklake_table_deletions`); a compaction's says
# nothing. Rows inlined in the catalog (DuckLake's inlining, off here) are not followed: built anew.
_INSERTED = "tables_inserted_into"
_DELETED = "tables_deleted_from"


def snapshot_now(cur: duckdb.DuckDBPyConnection) -> int:
    """The lake's snapshot id now (in a read transaction, `in_one_snapshot`: the one its reads see)."""
    return cur.execute("SELECT id FROM current_snapshot()").fetchone()[0]


def lake_mark(cur: duckdb.DuckDBPyConnection, tables: dict[str, str]) -> LakeMark | None:
    """The lake now for `tables` (name -> its run column), read before what is built from them: a commit in
    between is found again by the next `runs_changed`, never missed. None while the lake lacks one of them
    (read from `STAND_IN`: nothing to follow yet)."""
    snapshot = snapshot_now(cur)
    ids = dict(cur.execute(f"SELECT table_name, table_id FROM ducklake_table_info('{LAKE}')").fetchall())
    if any(t not in ids for t in tables):
        return None
    nexts = cur.execute(
        "SELECT " + ", ".join(f'(SELECT coalesce(max(rowid) + 1, 0) FROM {LAKE}."{t}")' for t in tables)
    ).fetchone()
    return LakeMark(snapshot, {t: ids[t] for t in tables}, dict(zip(tables, nexts, strict=True)))


def runs_changed(
    cur: duckdb.DuckDBPyConnection, since: LakeMark, tables: dict[str, str]
) -> tuple[LakeMark, set[str]] | None:
    """The runs of which a row of `tables` (name -> its run column) was inserted or deleted after `since`, and
    the mark of now; None when the lake cannot say (the snapshot of `since` expired, a commit did more than
    insert and delete rows of tables: a table created, altered or dropped, rows inlined in the catalog; or a
    read failed, said in the log): build anew. One query, and one more when a commit wrote one of `tables`
    (only those are read); rows of a run inserted after the mark of now was read are found next time.

    Not `ducklake_table_changes`: a compaction (`ducklake_merge_adjacent_files`) files the rows it merges under
    the oldest snapshot of their files, so a change feed across it loses the inserts it merged (measured on
    DuckLake 0.3); row ids and deletions survive it."""
    try:
        return _runs_changed(cur, since, tables)
    except duckdb.Error as e:  # (a dead catalog connection is retried by `ReaderCursor` first)
        log.info("team lake: the changes since snapshot %d could not be read (%s)", since.snapshot, e)
        return None


def _runs_changed(
    cur: duckdb.DuckDBPyConnection, since: LakeMark, tables: dict[str, str]
) -> tuple[LakeMark, set[str]] | None:
    snaps = cur.execute(
        f"SELECT snapshot_id, changes FROM {LAKE}.snapshots() WHERE snapshot_id >= ? ORDER BY 1",
        [since.snapshot],
    ).fetchall()
    if not snaps or snaps[0][0] != since.snapshot:
        return None
    now = snaps[-1][0]
    touched: dict[str, set[str]] = {_INSERTED: set(), _DELETED: set()}
    for _, changes in snaps[1:]:
        for kind, ids in (changes or {}).items():
            if kind not in touched or not all(i.isdigit() for i in ids):  # (tables named by id)
                return None
            touched[kind].update(ids)
    inserted = [t for t in tables if str(since.table_ids[t]) in touched[_INSERTED]]
    deleted = [t for t in tables if str(since.table_ids[t]) in touched[_DELETED]]
    next_rows = dict(since.next_rows)
    if not inserted and not deleted:
        return LakeMark(now, since.table_ids, next_rows), set()
    parts = [
        f'SELECT {i}, max(rowid), list(DISTINCT "{tables[t]}") FROM {LAKE}."{t}" WHERE rowid >= ?'
        for i, t in enumerate(inserted)
    ] + [
        f"SELECT -1, NULL, list(DISTINCT \"{tables[t]}\") FROM ducklake_table_deletions('{LAKE}', 'main', '{t}', ?, ?)"
        for t in deleted
    ]
    params = [since.next_rows[t] for t in inserted] + [since.snapshot + 1, now] * len(deleted)
    changed: set[str] = set()
    for i, last, runs in cur.execute(" UNION ALL ".join(parts), params).fetchall():
        if i >= 0 and last is not None:
            next_rows[inserted[i]] = max(next_rows[inserted[i]], last + 1)
        changed.update(runs or ())
    changed.discard(None)
    return LakeMark(now, since.table_ids, next_rows), changed


def ask_stop(cur: duckdb.DuckDBPyConnection, run_id: str, reason: str, by: str) -> None:
    """A reader's stop request: a row the owning collector picks up (it writes the run's stop file)."""
    lake_access.refuse_if_read_only(cur, LAKE)
    cur.execute(
        f"INSERT INTO {LAKE}.team_stops VALUES (?, ?, ?, ?, NULL, NULL)", [run_id, reason, time.time(), by]
    )


def last_stop(cur: duckdb.DuckDBPyConnection, run_id: str) -> dict | None:
    """The last stop of `run_id` asked through the lake (`ask_stop`) and what became of it, or None when none
    was: `reason`, `asked_at`, `asked_by`, `done_at` and `outcome` (the owning collector's: `written`, `a
    request was already there`, or why it refused; None until it carried the request out), and the run's
    `owner`: `collector`, `collector_live`."""
    row = cur.execute(
        """SELECT reason, asked_at, asked_by, done_at, outcome FROM team_stops WHERE run_id = ?
           ORDER BY asked_at DESC LIMIT 1""",
        [run_id],
    ).fetchone()
    if row is None:
        return None
    keys = ("reason", "asked_at", "asked_by", "done_at", "outcome")
    return dict(zip(keys, row, strict=True)) | owner(cur, run_id)


def owner(cur: duckdb.DuckDBPyConnection, run_id: str) -> dict:
    """The collector that owns `run_id` (`collector`: the run id's first part) and whether it is publishing
    (`collector_live`: a heartbeat within `LIVE_S`; False when it never registered)."""
    collector = run_id.split("/", 1)[0]
    (seen,) = cur.execute("SELECT max(heartbeat_at) FROM team_names WHERE name = ?", [collector]).fetchone()
    return {"collector": collector, "collector_live": seen is not None and time.time() - seen < LIVE_S}


def alert_changes(cur: duckdb.DuckDBPyConnection, alert_ids: list[int]) -> dict[int, dict]:
    """The last ack or resolve asked through the lake (`ask_alert_states`) of each of `alert_ids` that had one,
    and what became of it: alert id -> `state` (asked), `asked_at`, `done_at` and `outcome` (the owning
    collector's: the state it set, or why it could not; None until it carried the change out)."""
    if not alert_ids:
        return {}
    rows = cur.execute(
        """SELECT alert_id, state, asked_at, done_at, outcome FROM team_alert_changes
           WHERE alert_id IN (SELECT unnest(?)) QUALIFY row_number() OVER (PARTITION BY alert_id ORDER BY asked_at DESC) = 1""",
        [alert_ids],
    ).fetchall()
    keys = ("state", "asked_at", "done_at", "outcome")
    return {row[0]: dict(zip(keys, row[1:], strict=True)) for row in rows}
