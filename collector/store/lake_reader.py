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

import logging
import threading
import time

import duckdb

from collector.store import lake_access
from collector.store.lake import LAKE, TEAM_TABLES, LakeSpec, attach, load_extensions, masked
from collector.store.schema import StoreError, migrate

log = logging.getLogger("collector")

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
        (collectors,) = cur.execute("SELECT count(DISTINCT name) FROM team_collectors").fetchone()
        out = {"collectors": collectors, "read_only": self.read_only}
        failing = self.failing
        if failing is not None:  # (then whether a collector published is not known here)
            out["error"] = f"{failing.rstrip('.')}; this team API tries again every second"
        elif not collectors:
            out["message"] = NO_COLLECTOR_YET
        return out


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


def ask_stop(cur: duckdb.DuckDBPyConnection, run_id: str, reason: str, by: str) -> None:
    """A reader's stop request: a row the owning collector picks up (it writes the run's stop file)."""
    lake_access.refuse_if_read_only(cur, LAKE)
    cur.execute(
        f"INSERT INTO {LAKE}.team_stops VALUES (?, ?, ?, ?, NULL, NULL)", [run_id, reason, time.time(), by]
    )
