"""Team mode: many collectors, one shared store on DuckLake (a Postgres catalog, Parquet data files).

Each collector keeps working on its own DuckDB file (its journal: everything the local path promises, a
kill -9 included) and publishes it into the lake every few seconds, one lake transaction per batch
(`LakePublisher.publish`). Readers (`lake_reader.LakeReader`) attach the lake and run the store's own read queries
on it: the lake holds the same tables (`runs`, `series`, `point_rows`, the `points` view, `metric_stats`,
`alerts`, ...) as the file, with every collector's rows in them.

Ownership: a collector has a unique name (`--collector`, registered in `team_names`; a second live one
of that name is refused). In the lake its runs are `NAME/RUN` and its numeric ids (sources, series, alerts)
are moved into its own 2^32 block (`namespace(name) << 32 | id`), so two collectors never write the same
run or row. Exactly once: what was published is read back from the lake at start (per series of points, how
many the lake holds, up to which step, and its values replaced; the rows of every other table by their hash), so
a collector killed mid-commit publishes again exactly what the lake lacks. Postgres gone: the publish fails, the
collector's file keeps everything, the next cycle attaches again and catches up.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path

import duckdb

from collector.store import lake_access, lake_compaction, lake_format, lake_names
from collector.store.lake_format import TEAM_TABLES
from collector.store.lake_names import LIVE_S
from collector.store.schema import StoreError

log = logging.getLogger("collector")

LAKE = "lake"  # the attached lake's name in the collector's DuckDB
PREFIX = "ducklake:"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}\Z")  # (\Z: `$` lets a trailing newline in)
KEEP_SNAPSHOTS_S = 60  # compaction keeps older snapshots (and their files) this long
ASK_EVERY_S = 0.9  # a batch reads the stops and acks asked through the lake at most this often
SKIP_TABLES = {"schema_version"}
POINTS_TABLE = "point_rows"


@dataclass(frozen=True)
class LakeSpec:
    """`ducklake:postgres:dbname=... host=... port=... user=...` and the folder (or bucket) of its data."""

    catalog: str
    data_path: str

    @classmethod
    def parse(cls, store: str, data_path: str | None) -> LakeSpec:
        if not store.startswith(PREFIX) or len(store) <= len(PREFIX):
            raise StoreError(f"--store {store!r}: expected ducklake:postgres:dbname=... host=... (team mode)")
        if not data_path:
            raise StoreError(
                "--store needs --data-path: the shared folder (or bucket) of the lake's Parquet files"
            )
        if "'" in store or "'" in data_path:
            raise StoreError("--store and --data-path may not contain a single quote")
        return cls(store, data_path.rstrip("/") + "/")

    @property
    def shown(self) -> str:
        """The catalog as logs, messages, the marker and the dashboard show it: a password masked."""
        return masked(self.catalog)


# A password in a libpq string, `password=...` (DuckDB's errors quote the string in double quotes) or a URI's
# `postgresql://user:...@host`.
_PASSWORD = re.compile(r"(password\s*=\s*)('[^']*'|[^\s\"]+)|(://[^:/@\s]*:)[^@\s]*(@)", re.IGNORECASE)
PASSWORD_HOW = (
    "give the role's password in ~/.pgpass (mode 0600), a file named by PGPASSFILE, or PGPASSWORD, "
    "which Postgres' client library reads (README, team mode: passwords)"
)


def masked(text: str) -> str:
    """`text` (a catalog, or an error quoting one) with any password in it shown as ***."""
    return _PASSWORD.sub(lambda m: f"{m[1]}***" if m[1] else f"{m[3]}***{m[4]}", text)


def has_password(catalog: str) -> bool:
    """Whether the catalog string itself carries a password (then the process list shows it)."""
    return masked(catalog) != catalog


def namespace(name: str) -> int:
    """The collector's id block: 20 bits from its name, the same in every process. So every id in the lake
    stays below 2^52, exact as a JSON number in JavaScript or jq (doubles; 31 bits gave ids near 2^63)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=4).digest(), "big") & 0xFFFFF


def load_extensions(con: duckdb.DuckDBPyConnection) -> None:
    """Load DuckLake and the Postgres scanner from the PyPI packages (`requirements-team.txt`)."""
    try:
        import duckdb_ext  # the namespace package of duckdb-ext-ducklake / duckdb-ext-postgres

        directory = Path(next(iter(duckdb_ext.__path__))) / "extensions"
        con.execute(f"SET extension_directory = '{directory}'")
        con.execute("LOAD ducklake")
        con.execute("LOAD postgres_scanner")
    except (ImportError, StopIteration, duckdb.Error) as e:
        raise StoreError(
            f"team mode needs DuckDB {_engine()} with the DuckLake and Postgres extensions, which PyPI ships "
            f"for DuckDB 1.4.4 only: run it from the team venv (`make team-venv`, requirements-team.txt). "
            f"Loading them failed: {str(e).splitlines()[0]}"
        ) from None


def _engine() -> str:
    return f"1.4.4 (this is {duckdb.__version__})"


def attach(con: duckdb.DuckDBPyConnection, spec: LakeSpec, read_only: bool = False) -> None:
    """Attach the lake as `lake` (creating its catalog the first time); a clear error when Postgres is out of
    reach."""
    mode = ", READ_ONLY" if read_only else ""
    lake_access.prepare_data_path(con, spec.data_path)
    try:
        con.execute(f"ATTACH '{spec.catalog}' AS {LAKE} (DATA_PATH '{spec.data_path}'{mode})")
    except duckdb.Error as e:
        raise StoreError(f"cannot attach the lake {spec.shown}: {_attach_failure(str(e))}") from None


def _attach_failure(error: str) -> str:
    """Why the lake could not be attached, in one line, no password in it; for a refused login, how to give
    the password."""
    first = masked(error.splitlines()[0] if error else "")
    reason = first.rsplit("failed: ", 1)[-1].replace("FATAL:", "").strip()
    if "password authentication failed" in first:
        return f"Postgres refused the password ({reason}): {PASSWORD_HOW}"
    if "no password supplied" in first:
        return f"Postgres asks for a password and none was given ({reason}): {PASSWORD_HOW}"
    held = re.search(r"Conflicting lock is held in (.*?) \(PID (\d+)\)", first)
    if held:  # a DuckDB-file catalog, open in another process (measured: a second serve, or a team API)
        return (
            f"its catalog is a DuckDB file, which one process at a time may open, and process {held[2]} "
            f"({held[1]}) has it open: a DuckDB-file catalog serves one collector (or one team API) alone; for "
            "several collectors, or a team API beside a collector, use a Postgres catalog (README, team mode)"
        )
    return first


def local_tables(cur: duckdb.DuckDBPyConnection) -> dict[str, list[tuple[str, str]]]:
    """The collector file's tables, each with its (column, type) in order."""
    rows = cur.execute(
        """SELECT c.table_name, c.column_name, c.data_type FROM information_schema.columns c
           JOIN information_schema.tables t ON t.table_catalog = c.table_catalog
             AND t.table_schema = c.table_schema AND t.table_name = c.table_name
           WHERE c.table_catalog = current_database() AND c.table_schema = 'main'
             AND t.table_type = 'BASE TABLE' ORDER BY c.table_name, c.ordinal_position"""
    ).fetchall()
    out: dict[str, list[tuple[str, str]]] = {}
    for table, column, kind in rows:
        if table not in SKIP_TABLES:
            out.setdefault(table, []).append((column, kind))
    return out


def _is_id(table: str, column: str, kind: str) -> bool:
    """A collector-local number naming a row (a sequence's value): moved into the collector's block."""
    if kind not in ("INTEGER", "BIGINT") or column == "run_id":
        return False
    return column in ("id", "series") or column.endswith("_id")


def _is_run(table: str, column: str) -> bool:
    return column == "run_id" or (table == "runs" and column == "id")


def owned_rows(table: str, columns: list[tuple[str, str]], name: str, ns: int) -> str:
    """The predicate picking collector `name`'s rows (id block `ns`) of a lake table; StoreError for a table
    whose rows cannot be told apart by owner."""
    for c, _ in columns:
        if _is_run(table, c):
            return f"starts_with(\"{c}\", '{name}/')"
    for c, k in columns:
        if _is_id(table, c, k):
            return f'("{c}" >> 32) = {ns}'
    raise StoreError(
        f"table {table} has neither a run nor an id column: team mode cannot tell whose rows are whose"
    )


def lake_type(kind: str) -> str:
    return "BIGINT" if kind == "INTEGER" else kind  # ids grow past 32 bits in the lake


def ensure_schema(cur: duckdb.DuckDBPyConnection, tables: dict[str, list[tuple[str, str]]]) -> None:
    """The lake's copies of the collector's tables (no keys: DuckLake has none), the `points` view, and team
    mode's own tables; columns a newer collector added are added. Idempotent."""
    for statement in TEAM_TABLES:
        cur.execute(statement.format(lake=LAKE))
    have = {
        (t, c)
        for t, c in cur.execute(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_catalog = ?", [LAKE]
        ).fetchall()
    }
    names = {t for t, _ in have}
    for table, columns in tables.items():
        if table not in names:
            cols = ", ".join(f'"{c}" {lake_type(k)}' for c, k in columns)
            cur.execute(f'CREATE TABLE IF NOT EXISTS {LAKE}."{table}" ({cols})')
            continue
        for c, k in columns:
            if (table, c) not in have:
                cur.execute(f'ALTER TABLE {LAKE}."{table}" ADD COLUMN "{c}" {lake_type(k)}')
    if "points" not in names:
        cur.execute(
            f"""CREATE VIEW IF NOT EXISTS {LAKE}.points AS
                SELECT s.run_id, s.metric, p.step, p.value, p.wall_time, p.source_id, p.segment, p.series
                FROM {LAKE}.point_rows p JOIN {LAKE}.series s ON p.series = s.id"""
        )


class LakePublisher:
    """Publishes one collector's file into the lake; `publish()` is one batch (one lake transaction)."""

    def __init__(self, store, spec: LakeSpec, name: str) -> None:
        if not NAME_RE.match(name):
            raise StoreError(
                f"--collector {name!r}: use letters, digits, '.', '_' or '-' (at most 63), starting with a letter or digit"
            )
        self.store, self.spec, self.name = store, spec, name
        self.ns = namespace(name)
        self.cur = store.cursor_for_lake()
        load_extensions(self.cur)
        self.attached = False
        self.published: dict[str, set[int]] | None = None  # table -> hashes of this collector's rows there
        self.marks: dict[
            int, tuple[int, int, int]
        ] = {}  # local series -> (points, last step, replaced) in the lake
        self.commits = 0
        # The stops and alert changes asked for this collector, as the last batch read them in its transaction:
        # two lake reads a batch fewer, each of which would ask Postgres for the latest snapshot. Read in a batch
        # at most every `ask_every_s` (each is two catalog round trips, and batches follow ingest commits).
        self.asked: tuple[list, list] = ([], [])
        self.ask_every_s = ASK_EVERY_S
        self.asked_at = -float("inf")  # (monotonic) when a batch last read them
        self.unpublished: set[str] = set()  # tables left out (no run or id column to tell whose rows)
        # The file's tables, read once: its schema is migrated when the store opens, before publishing starts,
        # and reading information_schema took 90-190 ms of every batch (at load ~15).
        self.tables = local_tables(self.cur)
        self.beat_at = time.time()  # the heartbeat last written (registering writes one)
        self.last_error: str | None = None
        self.name_lost = False  # a batch found this process's registration gone: the next one registers again
        try:
            self._connect()
            self._register()
        except duckdb.Error as e:  # the data folder or bucket refusing the first write, the catalog's table
            raise StoreError(
                f"cannot publish into the lake {spec.shown} with its data in {spec.data_path}: "
                f"{masked(str(e).splitlines()[0])}"
            ) from None

    # ---- connection ---------------------------------------------------------------------------------

    def _connect(self) -> None:
        if self.attached:
            return
        attach(self.cur, self.spec)
        self.attached = True
        if not lake_access.role_may_write(self.cur, LAKE):
            role = lake_access.role_name(self.cur, LAKE)
            self._drop_connection()
            raise StoreError(
                f"the lake's Postgres role {role!r} may only read it: a collector needs a role that may write "
                "the lake's catalog (README, team mode: roles)"
            )
        self._retry(lambda: lake_format.ensure(self.cur, LAKE, self.spec.shown))
        self._retry(lambda: ensure_schema(self.cur, self.tables))

    def _drop_connection(self) -> None:
        """After a failure (Postgres restarted): detach, forget what is known of the lake, attach next time."""
        with contextlib.suppress(duckdb.Error):
            self.cur.execute("ROLLBACK")
        with contextlib.suppress(duckdb.Error):
            self.cur.execute(f"DETACH {LAKE}")
        self.attached = False
        self.published = None

    def _retry(self, fn, tries: int = 5):
        """Run a lake write, again after a commit race with another collector (DuckLake reports a conflict)."""
        for attempt in range(tries):
            try:
                return fn()
            except duckdb.TransactionException:
                if attempt == tries - 1:
                    raise
                time.sleep(0.05 * (attempt + 1))
        return None

    def _register(self) -> None:
        """Claim the name: refused while another live collector (another host or pid) holds it. Checked and
        claimed under the name's lock in the catalog, so a second start of it, or a forget, waits and sees it."""
        # (and the lake's write lock, as every write: claiming deletes the name's old row, which a compaction
        # merging beside it would bring back)
        with (
            lake_names.name_lock(self.cur, LAKE, self.ns, self.name),
            lake_compaction.lake_lock(self.cur, LAKE, exclusive=False),
        ):
            self._retry(lambda: lake_names.claim(self.cur, LAKE, self.name, self.ns))
        self.beat_at = time.time()

    # ---- one batch ----------------------------------------------------------------------------------

    def publish(self) -> dict:
        """Publish what changed since the last batch in one lake transaction; returns what was written.
        Raises on failure (nothing of the batch is in the lake then; the next call tries again)."""
        try:
            self._connect()
            if self.name_lost:
                self._register()
                self.name_lost = False
            with lake_compaction.lake_lock(self.cur, LAKE, exclusive=False):  # (not beside a compaction)
                return self._retry(self._publish_once)
        except BaseException as e:
            self.name_lost = self.name_lost or isinstance(e, lake_names.NameLost)
            self.last_error = masked(str(e).splitlines()[0]) if str(e) else type(e).__name__
            self._drop_connection()
            raise

    def _publishable(self, tables: dict[str, list[tuple[str, str]]]) -> dict[str, list[tuple[str, str]]]:
        """The tables whose rows can be told apart by owner; any other is left out, said once in the log."""
        out = {}
        for table, columns in tables.items():
            try:
                self._owned(table, columns)
            except StoreError as e:
                if table not in self.unpublished:
                    self.unpublished.add(table)
                    log.error("team lake: %s; it is not published", e)
                continue
            out[table] = columns
        return out

    def _publish_once(self) -> dict:
        cur = self.cur
        tables = self._publishable(self.tables)
        cur.execute("BEGIN TRANSACTION")
        try:
            if self.published is None:
                self._load_state(tables)
            assert self.published is not None
            written = {"rows": 0, "deleted": 0, "points": 0}
            published = dict(self.published)
            for table, columns in tables.items():
                if table != POINTS_TABLE:
                    published[table] = self._publish_table(table, columns, written)
            marks = self._publish_points(tables[POINTS_TABLE], written)
            beat = time.time()
            if beat - self.beat_at >= LIVE_S / 3:  # an UPDATE writes two files in the lake: not every batch
                lake_format.refuse_newer(cur, LAKE, self.spec.shown)  # (upgraded by a newer collector since)
                lake_names.beat(cur, LAKE, self.name, beat)
            ask = time.monotonic() - self.asked_at >= self.ask_every_s
            # Read here: no lake transaction of their own.
            asked = (self._stops(), self._alert_changes()) if ask else ([], [])
            cur.execute("COMMIT")
        except BaseException:
            self.published = None  # read back from the lake next time: the batch may or may not be in
            raise
        self.published, self.marks, self.asked = published, marks, asked
        self.asked_at = time.monotonic() if ask else self.asked_at
        self.beat_at = beat if beat - self.beat_at >= LIVE_S / 3 else self.beat_at
        self.commits += 1
        self.last_error = None
        return written

    def _mapped(self, table: str, columns: list[tuple[str, str]], source: str = "main") -> str:
        """A SELECT of the collector's rows of `table` as the lake holds them (runs named NAME/RUN, ids in
        the collector's block, INTEGER as BIGINT)."""
        parts = []
        for c, k in columns:
            col = f'"{c}"'
            if source == "main" and _is_run(table, c):
                col = f"('{self.name}/' || coalesce({col}, ''))"  # NULL (no run): still this collector's
            elif source == "main" and _is_id(table, c, k):
                col = f"(({self.ns}::BIGINT << 32) | {col}::BIGINT)"
            elif source == "main" and k == "INTEGER":
                col = f"{col}::BIGINT"
            parts.append(f'{col} AS "{c}"')
        where = "" if source == "main" else f" WHERE {self._owned(table, columns)}"
        db = "main" if source == "main" else LAKE
        return f'SELECT {", ".join(parts)} FROM {db}."{table}"{where}'

    def _owned(self, table: str, columns: list[tuple[str, str]]) -> str:
        """The predicate picking this collector's rows of a lake table."""
        return owned_rows(table, columns, self.name, self.ns)

    @staticmethod
    def _hash(columns: list[tuple[str, str]]) -> str:
        return "hash(" + ", ".join(f'"{c}"' for c, _ in columns) + ")"

    def _load_state(self, tables: dict[str, list[tuple[str, str]]]) -> None:
        """What the lake holds of this collector: row hashes per table, the points' marks."""
        self.published = {}
        for table, columns in tables.items():
            if table == POINTS_TABLE:
                continue
            q = f"SELECT {self._hash(columns)} FROM ({self._mapped(table, columns, LAKE)})"
            self.published[table] = {h for (h,) in self.cur.execute(q).fetchall()}
        # The marks are counted from the lake's own points and replaced values, so they cannot disagree with
        # them (a mark that does not match the file's counts only replaces that series whole). They were rows of
        # `team_marks`, rewritten every batch: ~16 % of a batch's CPU (lake_format: a collector reading them
        # would publish every point again, so format 2 refuses it).
        rows = self.cur.execute(
            f"""SELECT p.series & 4294967295, count(*), max(p.step), any_value(coalesce(r.n, 0))
                FROM {LAKE}.point_rows p JOIN {LAKE}.series s ON s.id = p.series
                LEFT JOIN (SELECT run_id, metric, count(*) AS n FROM {LAKE}.points_replaced
                           WHERE starts_with(run_id, ?) GROUP BY ALL) r
                  ON r.run_id = s.run_id AND r.metric = s.metric
                WHERE (p.series >> 32) = ? AND (s.id >> 32) = ? GROUP BY p.series""",
            [f"{self.name}/", self.ns, self.ns],
        ).fetchall()
        self.marks = {s: (n, last, replaced) for s, n, last, replaced in rows}

    def _publish_table(self, table: str, columns: list[tuple[str, str]], written: dict) -> set[int]:
        """Rows whose hash is new are inserted, rows gone or changed deleted (a changed row is both);
        returns the hashes of the collector's rows as the lake now holds them."""
        assert self.published is not None
        cur, h = self.cur, self._hash(columns)
        mapped = self._mapped(table, columns)
        local = {x for (x,) in cur.execute(f"SELECT {h} FROM ({mapped})").fetchall()}
        old = self.published.get(table, set())
        new, gone = local - old, old - local
        if gone:
            cur.execute(
                f'DELETE FROM {LAKE}."{table}" WHERE {self._owned(table, columns)} AND {h} IN (SELECT unnest(?))',
                [list(gone)],
            )
            written["deleted"] += len(gone)
        if new:
            cur.execute(
                f'INSERT INTO {LAKE}."{table}" SELECT * FROM ({mapped}) WHERE {h} IN (SELECT unnest(?))',
                [list(new)],
            )
            written["rows"] += len(new)
        return local

    def _publish_points(
        self, columns: list[tuple[str, str]], written: dict
    ) -> dict[int, tuple[int, int, int]]:
        """Per series: the points past its mark appended; a series whose earlier points changed (a resumed
        run rewriting steps: a value replaced moves to `points_replaced`, so its count there grows) replaced
        whole. Returns the marks (points, last step, values replaced) as the lake holds them after it."""
        cur = self.cur
        now = {
            sid: (n, last, replaced)
            for sid, n, last, replaced in cur.execute(
                """SELECT s.id, m.points, m.last_step, coalesce(r.n, 0) FROM series s
                   JOIN metric_stats m ON m.run_id = s.run_id AND m.metric = s.metric
                   LEFT JOIN (SELECT run_id, metric, count(*) AS n FROM points_replaced GROUP BY ALL) r
                     ON r.run_id = s.run_id AND r.metric = s.metric"""
            ).fetchall()
        }
        changed = {sid: v for sid, v in now.items() if self.marks.get(sid) != v}
        gone = [sid for sid in self.marks if sid not in now]
        after: dict[int, int] = {}
        if changed:
            appended = [sid for sid in changed if sid in self.marks]
            counts = {}
            if appended:
                counts = dict(
                    cur.execute(
                        """SELECT p.series, count(*) FROM point_rows p
                           JOIN (SELECT unnest(?) AS series, unnest(?) AS after) m
                             ON p.series = m.series AND p.step > m.after GROUP BY p.series""",
                        [appended, [self.marks[s][1] for s in appended]],
                    ).fetchall()
                )
            for sid, (n, _, replaced) in changed.items():
                mark = self.marks.get(sid)
                if mark is not None and mark[2] == replaced and counts.get(sid, 0) == n - mark[0]:
                    after[sid] = mark[1]  # a plain append
                else:
                    after[sid] = -(2**62)  # replaced whole
        whole = [sid for sid, a in after.items() if a == -(2**62) and sid in self.marks] + gone
        if whole:
            cur.execute(
                f"DELETE FROM {LAKE}.point_rows WHERE series IN (SELECT (({self.ns}::BIGINT << 32) | unnest(?)))",
                [whole],
            )
        if after:
            mapped = self._mapped(POINTS_TABLE, columns)
            res = cur.execute(
                f"""INSERT INTO {LAKE}.point_rows SELECT p.* FROM ({mapped}) p
                    JOIN (SELECT (({self.ns}::BIGINT << 32) | unnest(?)) AS series, unnest(?) AS after) m
                      ON p.series = m.series AND p.step > m.after""",
                [list(after), list(after.values())],
            ).fetchall()
            written["points"] += res[0][0] if res else 0
        return {sid: v for sid, v in (self.marks | changed).items() if sid not in gone}

    # ---- compaction ---------------------------------------------------------------------------------

    def compact(self, every_s: float, keep_s: int = KEEP_SNAPSHOTS_S) -> bool:
        """`lake_compaction.compact`; False, and nothing done, when any collector compacted the lake within
        `every_s` (compaction is the whole lake's: N collectors each compacting every `every_s` did it N times
        over, and a collector publishes nothing while it compacts)."""
        self._connect()
        if lake_compaction.compacted_within(self.cur, LAKE, every_s):
            return False
        done = lake_compaction.compact(self.cur, LAKE, keep_s)
        if done.left:
            log.debug("team lake: merging %s conflicted with a commit: next time", ", ".join(done.left))
        if done.merged:  # (the team's writes waited that long: said, one line a compaction at most)
            merged = ", ".join(f"{t} ({n} files)" for t, n in done.merged.items())
            log.info(
                "team lake: compacted %s in %.2f s, old files removed in %.2f s",
                merged,
                done.merge_s,
                done.cleanup_s,
            )
        return True

    # ---- stops asked anywhere -----------------------------------------------------------------------

    def _stops(self) -> list[tuple[str, str, float]]:
        """Stop requests for this collector's runs not yet carried out: (local run id, reason, asked_at)."""
        rows = self.cur.execute(
            f"""SELECT run_id, reason, asked_at FROM {LAKE}.team_stops
                WHERE starts_with(run_id, ?) AND done_at IS NULL ORDER BY asked_at""",
            [f"{self.name}/"],
        ).fetchall()
        return [(r[len(self.name) + 1 :], reason, at) for r, reason, at in rows]

    def _alert_changes(self) -> list[tuple[int, str, str | None, float]]:
        """Acks and resolves asked on a reader for this collector's alerts: (local id, state, note, asked_at)."""
        rows = self.cur.execute(
            f"""SELECT alert_id, state, note, asked_at FROM {LAKE}.team_alert_changes
                WHERE (alert_id >> 32) = ? AND done_at IS NULL ORDER BY asked_at""",
            [self.ns],
        ).fetchall()
        return [(a & 0xFFFFFFFF, state, note, at) for a, state, note, at in rows]

    def alert_change_done(self, local_id: int, asked_at: float, outcome: str) -> None:
        with lake_compaction.lake_lock(self.cur, LAKE, exclusive=False):
            self._retry(
                lambda: self.cur.execute(
                    f"""UPDATE {LAKE}.team_alert_changes SET done_at = ?, outcome = ?
                        WHERE alert_id = ? AND asked_at = ?""",
                    [time.time(), outcome, (self.ns << 32) | local_id, asked_at],
                )
            )

    def stop_done(self, run: str, asked_at: float, outcome: str) -> None:
        with lake_compaction.lake_lock(self.cur, LAKE, exclusive=False):
            self._retry(
                lambda: self.cur.execute(
                    f"UPDATE {LAKE}.team_stops SET done_at = ?, outcome = ? WHERE run_id = ? AND asked_at = ?",
                    [time.time(), outcome, f"{self.name}/{run}", asked_at],
                )
            )
