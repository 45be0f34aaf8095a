"""The DuckDB store: the connection, transactions, runs and sources (with its siblings in `collector/store/`,
the only place that holds SQL; point writes are the functions of `collector.store.points`).

One file, one connection, a cursor per thread (DuckDB allows one writer process; inside it, cursors share the
database). Writes go through `Store.transaction()`, which serialises writers with a lock so the ingest loop
and an API call (ack, resolve) never conflict. Every query takes parameters, never formatted values.

Points are long and narrow: one row per (run, metric, step) in `points`, always the latest value; a value
replaced by a later write of the same step (a resumed run rewriting steps, a rotated or truncated file) moves
to `points_replaced` with the segment it came from, so both lives stay inspectable and no query pays for the
replacement rule.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import duckdb

from collector.core.model import BadLine
from collector.core.runtime import MEMORY_MB, command_of
from collector.store.damage import check_whole, damage_of, damaged
from collector.store.disk import DiskState
from collector.store.lake_reader import LakeReader
from collector.store.schema import StoreError, migrate


def arrow() -> ModuleType:
    """pyarrow, imported on first use (a tenth of a second of start-up; a bulk backfill never needs it)."""
    import pyarrow

    return pyarrow


@dataclass(slots=True)
class SourceState:
    """What the store remembers about one file it reads: identity, how far it got, and which life it is in."""

    id: int
    run_id: str
    path: str
    format: str
    inode: int = 0
    device: int = 0
    size: int = 0
    mtime: float = 0.0
    offset: int = 0
    lines: int = 0
    segment: int = 0
    state: str = "active"
    tail_sig: bytes = b""
    parser_state: str | None = None  # JSON the parser needs back next time (a CSV header)
    points: int = 0  # points the file gave so far (all its lives): 0 from many lines is a warning


class Store:
    """One DuckDB file. Thread-safe: each thread gets its own cursor; writers take turns."""

    def __init__(self, path: str | Path, memory_mb: int = MEMORY_MB) -> None:
        """Open (or create) the file; DuckDB uses at most `memory_mb` of memory (its default would be 80% of
        RAM), spilling to disk past it."""
        self.path = Path(path)
        try:  # a new database's folder (DuckDB creates the file only)
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"cannot create the folder of the database {self.path}: {e}") from None
        try:
            self._con = duckdb.connect(str(self.path), config={"memory_limit": f"{memory_mb}MB"})
        except duckdb.Error as e:
            what = damage_of(self.path, str(e))
            if what:
                raise damaged(self.path, what) from None
            if not isinstance(e, duckdb.IOException):
                raise
            raise StoreError(f"cannot open the database {self.path}: {e}. {_lock_advice(str(e))}") from None
        try:  # before anything is written: a damaged file is left as it is
            check_whole(self._con, self.path)
            migrate(self._con)
        except duckdb.Error as e:
            self._con.close()
            what = damage_of(self.path, str(e))
            if what:
                raise damaged(self.path, what) from None
            raise
        except StoreError:
            self._con.close()
            raise
        self._open_done()

    def _open_done(self) -> None:
        """What every store holds once its connection is open (a file's, or team mode's reader's)."""
        self._local = threading.local()
        self._write_lock = threading.RLock()
        self.disk = DiskState(self.path)  # writes failing for a full disk (what /api/health tells)
        # per run, a number drawn anew each time its alerts change (`alert_version`)
        self._alert_versions: dict[str, int] = {}
        self._alert_changes = itertools.count(1)  # next() on it is atomic: no two changes draw one number

    @classmethod
    def on_lake(cls, lake: LakeReader, path: str | Path) -> Store:
        """A store over team mode's reader connection, not migrated, whose cursors read the shared lake
        (`collector.store.lake_reader`); `path` names it in messages and beside-files."""
        self = cls.__new__(cls)
        self.path, self._con, self.lake = Path(path), lake.con, lake
        self._open_done()
        self.lake_reader = True
        return self

    lake_reader = False  # True: reading a team's lake (stops go through it, not to a run folder)
    lake: LakeReader | None = None  # the reader's connection and lake, when reading one

    def alert_version(self, run: str) -> int:
        """A number that changes whenever a change of the run's alerts made through this store is committed
        (0: none since it opened; the collector is the one process writing the file): what a cache of the run's
        alerts is checked against. Read it before the alerts: a change committed in between is read next time."""
        return self._alert_versions.get(run, 0)

    def alerts_changed(self, run: str) -> None:
        """A change of the run's alerts is committed (`collector.store.alerts` calls this after each)."""
        self._alert_versions[run] = next(self._alert_changes)

    def cursor_for_lake(self) -> duckdb.DuckDBPyConnection:
        """A cursor of its own for team mode's publisher thread (it attaches the lake beside the file)."""
        return self._con.cursor()

    def close(self) -> None:
        """Checkpoint and close; the store is unusable afterwards."""
        with self._write_lock:
            self._con.close()

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """This thread's cursor (DuckDB connections are not shared between threads)."""
        cur = getattr(self._local, "cur", None)
        if cur is None:
            # (a reader's cursor is a connection of its own: `lake_reader.ReaderCursor` makes the lake its default)
            cur = self.lake.cursor() if self.lake is not None else self._con.cursor()
            self._local.cur = cur
        return cur

    def rows(self, sql: str, params: list | tuple = ()) -> list[tuple]:
        """All rows of a read query."""
        return self.cursor().execute(sql, params).fetchall()

    def dicts(self, sql: str, params: list | tuple = ()) -> list[dict]:
        """All rows of a read query as dicts keyed by column name."""
        cur = self.cursor().execute(sql, params)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    @contextlib.contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """One atomic write: everything done with the yielded cursor commits together or not at all."""
        if (
            self.lake_reader
        ):  # the rows belong to the collectors publishing them: a change here would be undone
            raise ValueError(
                "this API reads a team's lake: make the change on the collector that owns the run (the part of "
                "the run id before the first '/'); only stops, acks and resolves go through the lake"
            )
        with self._write_lock:
            cur = self.cursor()
            if getattr(self._local, "in_tx", False):
                yield cur  # nested: the outer transaction commits
                return
            cur.execute("BEGIN TRANSACTION")
            self._local.in_tx = True
            try:
                yield cur
                cur.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(duckdb.Error):
                    cur.execute("ROLLBACK")
                with contextlib.suppress(duckdb.Error):
                    # A bulk insert that failed could not put its global setting back inside the aborted
                    # transaction (store_points._unordered); later reads and stages rely on row order.
                    cur.execute("RESET preserve_insertion_order")
                raise
            finally:
                self._local.in_tx = False

    # ---- runs and sources -------------------------------------------------------------------------

    def upsert_run(self, run_id: str, root: str, path: str, fmt: str) -> None:
        """Record a run the first time it is seen; later calls keep its state and refresh path and format."""
        now = time.time()
        with self.transaction() as cur:
            # An UPDATE, then an INSERT when there was nothing to update, not `INSERT ... ON CONFLICT`: DuckDB
            # 1.4.4 (team mode's engine) holds ~0.25 MB per upsert statement until the transaction commits, and
            # `discover` registers every run in one transaction (8,100 runs ran out of 3 GB); 3x faster too.
            if not cur.execute(
                "UPDATE runs SET root = ?, path = ?, format = ? WHERE id = ? RETURNING 1",
                [root, path, fmt, run_id],
            ).fetchall():
                cur.execute(
                    """INSERT INTO runs (id, root, path, format, status, created_at, updated_at)
                       VALUES (?, ?, ?, ?, 'unknown', ?, ?)""",
                    [run_id, root, path, fmt, now, now],
                )

    def set_skipped_files(self, run_id: str | None, files: list[tuple[str, str, int]]) -> None:
        """Replace the run's list of files it does not read: (path, reason, bytes) each (run None: the
        folders under the roots that could not be listed, so no run of theirs is known)."""
        with self.transaction() as cur:
            cur.execute("DELETE FROM skipped_files WHERE run_id IS NOT DISTINCT FROM ?", [run_id])
            if files:
                cur.executemany(
                    "INSERT INTO skipped_files VALUES (?, ?, ?, ?)", [[run_id, *f] for f in files]
                )

    def merge_run_config(self, cur: duckdb.DuckDBPyConnection, run_id: str, part: str) -> None:
        """Merge a JSON object into the run's stored configuration (keys of `part` win)."""
        cur.execute(
            "UPDATE runs SET config = json_merge_patch(coalesce(config, '{}'), ?) WHERE id = ?",
            [part, run_id],
        )

    def update_run_info(
        self,
        cur: duckdb.DuckDBPyConnection,
        run_id: str,
        *,
        status: str | None = None,
        total_steps: int | None = None,
        config: str | None = None,
        status_info: str | None = None,
        last_step: int | None = None,
        last_point_at: float | None = None,
        ended: str | None = None,
    ) -> None:
        """Set the given run fields (None leaves a field as it is), inside the caller's transaction; `ended`
        (the end a log shows) is the status only while the run's is unknown."""
        cur.execute(
            """UPDATE runs SET status = coalesce(?, CASE WHEN coalesce(status, 'unknown') = 'unknown' THEN ? END,
               status), total_steps = coalesce(?, total_steps),
               config = coalesce(?, config), status_info = coalesce(?, status_info),
               last_step = coalesce(?, last_step), last_point_at = coalesce(?, last_point_at), updated_at = ?
               WHERE id = ?""",
            [status, ended, total_steps, config, status_info, last_step, last_point_at, time.time(), run_id],
        )

    def mark_detection_behind(self, cur: duckdb.DuckDBPyConnection, run_id: str, judged_to: int) -> None:
        """Record, with the bulk rows, that detection has judged the run only up to `judged_to` (kept if
        already behind): a restart resumes detection there instead of skipping the backlog."""
        cur.execute(
            "UPDATE runs SET detected_to = coalesce(detected_to, ?) WHERE id = ?", [judged_to, run_id]
        )

    def set_latest_marker(self, run_id: str, step: int | None) -> None:
        """The step the run's checkpoint marker names (None: no marker)."""
        with self.transaction() as cur:
            cur.execute("UPDATE runs SET latest_marker = ? WHERE id = ?", [step, run_id])

    def set_detected_to(self, run_id: str, step: int | None) -> None:
        """Detection has judged the run up to `step` (None: all of it)."""
        with self.transaction() as cur:
            cur.execute("UPDATE runs SET detected_to = ? WHERE id = ?", [step, run_id])

    def detection_backlogs(self) -> dict[str, int]:
        """Runs whose stored points detection has not all judged: run -> step judged up to."""
        return dict(self.rows("SELECT id, detected_to FROM runs WHERE detected_to IS NOT NULL"))

    def sources(self) -> dict[str, SourceState]:
        """Every source the store knows, by path."""
        rows = self.rows(
            """SELECT id, run_id, path, format, inode, device, size, mtime, byte_offset, lines, segment,
                      state, tail_sig, parser_state, points FROM sources"""
        )
        return {
            r[2]: SourceState(*r[:12], tail_sig=bytes(r[12] or b""), parser_state=r[13], points=r[14] or 0)
            for r in rows
        }

    def add_source(self, run_id: str, path: str, fmt: str) -> SourceState:
        """Register a file of a run (offset 0, segment 0); returns its state."""
        with self.transaction() as cur:  # (no upsert: see `upsert_run`)
            known = cur.execute(
                "UPDATE sources SET run_id = ?, format = ? WHERE path = ? RETURNING id", [run_id, fmt, path]
            ).fetchall()
            source_id = (
                known[0][0]
                if known
                else cur.execute(
                    """INSERT INTO sources (run_id, path, format, inode, device, size, mtime, byte_offset, lines,
                   segment, state, updated_at, tail_sig) VALUES (?, ?, ?, 0, 0, 0, 0, 0, 0, 0, 'active', ?, ''::BLOB)
                   RETURNING id""",
                    [run_id, path, fmt, time.time()],
                ).fetchall()[0][0]
            )
        return SourceState(id=source_id, run_id=run_id, path=path, format=fmt)

    def save_source(self, cur: duckdb.DuckDBPyConnection, s: SourceState) -> None:
        """Write a source's identity and offset, inside the transaction that wrote the rows it covers."""
        cur.execute(
            """UPDATE sources SET inode = ?, device = ?, size = ?, mtime = ?, byte_offset = ?, lines = ?,
               segment = ?, state = ?, tail_sig = ?, parser_state = ?, points = ?, updated_at = ? WHERE id = ?""",
            [
                s.inode,
                s.device,
                s.size,
                s.mtime,
                s.offset,
                s.lines,
                s.segment,
                s.state,
                s.tail_sig,
                s.parser_state,
                s.points,
                time.time(),
                s.id,
            ],
        )

    def save_sources(self, cur: duckdb.DuckDBPyConnection, states: list[SourceState]) -> None:
        """`save_source` for many sources in one statement (a live cycle touches a hundred)."""
        if not states:
            return
        fields = (
            "id",
            "inode",
            "device",
            "size",
            "mtime",
            "offset",
            "lines",
            "segment",
            "state",
            "parser_state",
            "points",
        )
        pa = arrow()
        columns = {f: [getattr(x, f) for x in states] for f in fields}
        columns["tail_sig"] = pa.array([x.tail_sig for x in states], pa.binary())
        cur.register("rw_sources", pa.table(columns))
        try:
            cur.execute(
                """UPDATE sources SET inode = t.inode, device = t.device, size = t.size, mtime = t.mtime,
                   byte_offset = t."offset", lines = t.lines, segment = t.segment, state = t.state,
                   tail_sig = t.tail_sig, parser_state = t.parser_state, points = t.points, updated_at = ?
                   FROM rw_sources t WHERE sources.id = t.id""",
                [time.time()],
            )
        finally:
            with contextlib.suppress(duckdb.TransactionException):  # (aborted: the first error goes up)
                cur.unregister("rw_sources")

    def set_runs_progress(
        self,
        cur: duckdb.DuckDBPyConnection,
        last_steps: dict[str, int],
        written_at: dict[str, float] | None = None,
    ) -> None:
        """Each run's newest step and the time its points were written (`written_at`, else now), in one
        statement."""
        if not last_steps:
            return
        now = time.time()
        written = [(written_at or {}).get(run, now) for run in last_steps]
        cur.register(
            "rw_runs",
            arrow().table(
                {"id": list(last_steps), "last_step": list(last_steps.values()), "written": written}
            ),
        )
        try:
            cur.execute(
                """UPDATE runs SET last_step = t.last_step, last_point_at = t.written, updated_at = ?
                   FROM rw_runs t WHERE runs.id = t.id""",
                [now],
            )
        finally:
            with contextlib.suppress(duckdb.TransactionException):  # (aborted: the first error goes up)
                cur.unregister("rw_runs")

    def clear_quarantine(self, cur: duckdb.DuckDBPyConnection, s: SourceState) -> None:
        """Forget the bad lines kept for `s` (a whole document read again whole: its old lines are gone)."""
        cur.execute("DELETE FROM quarantine WHERE source_id = ?", [s.id])

    def quarantine(self, cur: duckdb.DuckDBPyConnection, s: SourceState, bad: list[BadLine]) -> None:
        """Keep bad lines with their file line number and reason, inside the caller's transaction."""
        if not bad:
            return
        now = time.time()
        cur.executemany(
            "INSERT INTO quarantine VALUES (?, ?, ?, ?, ?, ?)",
            [[s.id, s.segment, b.line, b.reason, b.text, now] for b in bad],
        )

    def max_steps(self) -> dict[str, int]:
        """The highest stored step of every run (what a new batch must exceed to be a plain append), from
        the per-metric summaries kept in the same transactions as the points (no pass over the points)."""
        return dict(self.rows("SELECT run_id, max(last_step) FROM metric_stats GROUP BY run_id"))

    # ---- points ---------------------------------------------------------------------------------


def _lock_advice(error: str) -> str:
    """What to do about a database another process holds, naming that process when DuckDB says which."""
    found = re.search(r"\(PID (\d+)\)", error)
    command = command_of(int(found.group(1))) if found else None
    holder = f"process {found.group(1)} (`{command[:200]}`)" if found and command else "another process"
    if command and "collector serve" in command:
        return (
            f"It is held by {holder}, a collector still starting or not answering: once it serves, the CLI "
            "goes through its API by itself (try again in a moment), or stop it to use the file directly."
        )
    return (
        f"Only one process may hold it, and {holder} does: wait for it to finish or stop it; a running "
        "`collector serve` is used through its API (the CLI does this by itself)."
    )
