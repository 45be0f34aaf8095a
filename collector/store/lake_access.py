"""Team mode's access to the lake: what its Postgres role may do, and its data on object storage.

Roles: the catalog's Postgres role decides whether a process may change the lake at all. A collector needs one
that may write (it is refused at start otherwise, instead of failing every batch); a reader whose role may only
read attaches the lake read-only, so the API's stops, acks and resolves are refused (`LakeReadOnly`, a 403)
before anything is written. Postgres cannot restrict a writing role to one collector's rows: DuckLake keeps
every table's rows in Parquet files named by shared catalog tables (README, "Team mode").

Object storage: a `--data-path` of `s3://bucket/folder/` loads DuckDB's httpfs (duckdb-ext-httpfs, the team
venv) and makes an S3 secret from the usual AWS variables, `AWS_ENDPOINT_URL` naming an S3-compatible server.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from urllib.parse import urlsplit

import duckdb

from collector.store.schema import StoreError

METADATA = "__ducklake_metadata_{lake}"  # DuckLake's own name for the attached catalog database


class LakeReadOnly(Exception):
    """A change asked of a reader whose Postgres role may only read the lake (the API answers 403)."""


class LakeUnreadable(Exception):
    """A reader's query met a data file this process may not read (the API answers 500 with this message)."""

    def __init__(self, error: str) -> None:
        super().__init__(
            f"this team API cannot read the lake's data ({error}): the data folder must let this user read "
            "what every collector writes (README, team mode: the shared folder's group and default ACL)"
        )


def catalog_is_postgres(con: duckdb.DuckDBPyConnection, lake: str) -> bool:
    """Whether the lake's catalog is a Postgres database (`postgres_query` may ask it directly)."""
    kind = con.execute(
        "SELECT type FROM duckdb_databases() WHERE database_name = ?", [METADATA.format(lake=lake)]
    ).fetchall()
    return bool(kind) and kind[0][0] == "postgres"


@contextlib.contextmanager
def lock_holder(
    con: duckdb.DuckDBPyConnection, lake: str, wait_s: int
) -> Iterator[tuple[duckdb.DuckDBPyConnection, str] | None]:
    """For holding a Postgres advisory transaction lock of the lake's catalog while the block runs: a transaction
    of its own, on a cursor of its own (the holder), whose lock waits give up after `wait_s` (`lock timeout`).
    Yields (holder, the catalog's name for postgres_query/postgres_execute), or None when the catalog is not
    Postgres (no locks there: one process). The transaction ends (and Postgres frees its locks) after the
    block, whose own lake transaction must begin inside it (a DuckLake transaction reads the snapshot it began
    with), or when this process dies."""
    if not catalog_is_postgres(con, lake):
        yield None
        return
    holder, metadata = con.cursor(), METADATA.format(lake=lake)
    try:
        holder.execute("BEGIN TRANSACTION")
        holder.execute(f"CALL postgres_execute('{metadata}', 'SET LOCAL lock_timeout = ''{int(wait_s)}s''')")
        yield holder, metadata
    finally:
        with contextlib.suppress(duckdb.Error):
            holder.execute("ROLLBACK")
        holder.close()


def role_may_write(con: duckdb.DuckDBPyConnection, lake: str) -> bool:
    """Whether the catalog's Postgres role may commit to the lake (insert a snapshot); True for a catalog
    that is not Postgres (its file's permissions decide)."""
    if not catalog_is_postgres(con, lake):
        return True
    (may,) = con.execute(
        f"""SELECT * FROM postgres_query('{METADATA.format(lake=lake)}',
            'SELECT has_table_privilege(''ducklake_snapshot'', ''INSERT'')')"""
    ).fetchone()
    return bool(may)


def role_name(con: duckdb.DuckDBPyConnection, lake: str) -> str:
    """The Postgres role the catalog connection acts as (for messages)."""
    try:
        (name,) = con.execute(
            f"SELECT * FROM postgres_query('{METADATA.format(lake=lake)}', 'SELECT current_user')"
        ).fetchone()
        return str(name)
    except duckdb.Error:
        return "?"


def attached_read_only(cur, lake: str) -> bool:
    """Whether the lake is attached read-only here (a reader whose role may only read)."""
    rows = cur.execute("SELECT readonly FROM duckdb_databases() WHERE database_name = ?", [lake]).fetchall()
    return bool(rows and rows[0][0])


def refuse_if_read_only(cur, lake: str) -> None:
    """LakeReadOnly when the lake is attached read-only (the reader's role may only read)."""
    if attached_read_only(cur, lake):
        raise LakeReadOnly(
            "this team API reads the lake with a Postgres role that may only read it: a stop, ack or resolve "
            "needs a team API whose role may write the lake, or the collector that owns the run"
        )


# What a reader's query says when the lake's Postgres catalog is down or out of reach (after the reader's own
# retries on a fresh connection: `lake_reader.ReaderCursor`).
CATALOG_GONE = (
    "Unable to connect to Postgres",
    "server closed the connection",
    "no connection to the server",
    "terminating connection",
)


def catalog_unreachable(error: str) -> str | None:
    """The API's one line for a reader's query that could not reach the lake's Postgres catalog (down,
    restarting, out of reach), without the catalog string (it may hold a password); None for another error."""
    marker = next((m for m in CATALOG_GONE if m in error), None)
    if marker is None:
        return None
    first = error.splitlines()[0]
    why = first.rsplit("failed: ", 1)[-1].strip() if "failed: " in first else marker
    return (
        f"this team API cannot reach the lake's Postgres catalog ({why}); nothing is lost: each collector keeps "
        "its own file and publishes it once Postgres is back, and this API asks again at each request"
    )


def prepare_data_path(con: duckdb.DuckDBPyConnection, data_path: str) -> None:
    """For an `s3://` data path: httpfs loaded and an S3 secret from the environment (AWS_ACCESS_KEY_ID,
    AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION or AWS_DEFAULT_REGION, AWS_ENDPOINT_URL_S3 or
    AWS_ENDPOINT_URL); other paths need nothing."""
    if not data_path.startswith("s3://"):
        return
    try:
        con.execute("LOAD httpfs")
    except duckdb.Error as e:
        raise StoreError(
            f"--data-path {data_path}: object storage needs DuckDB's httpfs extension (duckdb-ext-httpfs in "
            f"the team venv, `make team-venv`): {str(e).splitlines()[0]}"
        ) from None
    env = os.environ
    options = {
        "KEY_ID": env.get("AWS_ACCESS_KEY_ID"),
        "SECRET": env.get("AWS_SECRET_ACCESS_KEY"),
        "SESSION_TOKEN": env.get("AWS_SESSION_TOKEN"),
        "REGION": env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION"),
    }
    named = "AWS_ENDPOINT_URL_S3" if env.get("AWS_ENDPOINT_URL_S3") else "AWS_ENDPOINT_URL"
    endpoint = env.get(named)
    if endpoint:  # an S3-compatible server (MinIO, a test server): its host:port, path-style addresses
        url = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        if url.scheme not in ("http", "https") or not url.netloc:
            raise StoreError(f"{named}={endpoint}: expected http(s)://host[:port]")
        options |= {"ENDPOINT": url.netloc, "URL_STYLE": "path", "USE_SSL": url.scheme == "https"}
    given = ", ".join(f"{k} {_literal(v)}" for k, v in options.items() if v is not None)
    con.execute(f"CREATE OR REPLACE SECRET runwatch_lake_s3 (TYPE s3{', ' + given if given else ''})")


def _literal(value: str | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "'" + value.replace("'", "''") + "'"  # (CREATE SECRET takes no parameters)
