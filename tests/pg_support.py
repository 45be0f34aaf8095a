"""A real PostgreSQL server on 127.0.0.1 for the team-mode tests and bench/team.py (no tests here).

`PgServer().start()` makes a throwaway cluster with Debian's `initdb` (run as the `postgres` user when the
tests run as root: PostgreSQL refuses to run as root) in a folder of its own under /tmp that this user owns
(pytest's temporary folders are private to root), starts it with `pg_ctl` on a free port, listening on
127.0.0.1 only, with its socket in that folder, and creates the database `lake`. `stop()` then `start()`
again keeps the port and the data (a server restart under a writer); `remove()` stops it and deletes it all.
`dsn` is what `ducklake:postgres:` takes. `PgServer(passwords=True)` asks every connection over 127.0.0.1 for
its role's password (scram-sha-256); the tests' own set-up goes through the folder's socket (trusted) then.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

BIN = Path("/usr/lib/postgresql/15/bin")


def postgres_missing() -> str | None:
    """Why the server cannot run here, or None (`make test` installs Debian's postgresql)."""
    if not (BIN / "initdb").exists():
        return f"{BIN}/initdb is missing: `apt-get install postgresql` (make test does)"
    return None


def team_cluster(team_python: Path, passwords: bool = False) -> Iterator[PgServer]:
    """A module's cluster for the team-mode tests, removed afterwards: fails (never skips) when Postgres or the
    team venv is missing (`make test` installs both). `passwords`: see `PgServer`."""
    missing = postgres_missing()
    if missing is None and not Path(team_python).exists():
        missing = (
            f"{team_python} is missing: `make team-venv` builds it (DuckDB 1.4.4 + DuckLake, make test does)"
        )
    if missing:
        import pytest

        pytest.fail(missing)
    server = PgServer(passwords=passwords).start()
    yield server
    server.remove()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    """A cluster under `base/pg` served by `postgres -p PORT -k base/pg -c listen_addresses=127.0.0.1`."""

    def __init__(self, database: str = "lake", passwords: bool = False, keep_in: Path | None = None) -> None:
        """A new cluster in a temporary folder; with `keep_in`, the cluster in that folder (made there when it
        has none yet), which `stop` leaves for a later `PgServer(keep_in=...)` (a bench's seeded lake)."""
        if keep_in is not None:
            keep_in.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.dir = keep_in if keep_in is not None else Path(tempfile.mkdtemp(prefix="runwatch-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.database = database
        self.as_root = os.geteuid() == 0
        self.user = "postgres" if self.as_root else getpass.getuser()
        if self.as_root:
            shutil.chown(self.dir, "postgres", "postgres")
        auth = ["--auth-local", "trust", "--auth-host", "scram-sha-256"] if passwords else ["-A", "trust"]
        if (self.data / "PG_VERSION").exists():
            return
        self._run([str(BIN / "initdb"), "-D", str(self.data), "-U", self.user, *auth, "-E", "UTF8"])

    @property
    def dsn(self) -> str:
        return f"dbname={self.database} host=127.0.0.1 port={self.port} user={self.user}"

    def new_database(self, name: str) -> str:
        """Create another database in the cluster (a lake of its own); its dsn."""
        self._run([str(BIN / "createdb"), "-h", str(self.dir), "-p", str(self.port), "-U", self.user, name])
        return self.dsn.replace(f"dbname={self.database}", f"dbname={name}")

    def _run(self, cmd: list[str], check: bool = True) -> subprocess.CompletedProcess:
        if self.as_root:
            cmd = ["su", "postgres", "-s", "/bin/sh", "-c", " ".join(_quote(c) for c in cmd)]
        return subprocess.run(cmd, check=check, capture_output=True, text=True, cwd="/")

    def start(self) -> PgServer:
        opts = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        res = self._run(
            [
                str(BIN / "pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.dir / "log"),
                "-o",
                opts,
                "-w",
                "start",
            ],
            check=False,
        )
        if res.returncode != 0:
            raise RuntimeError(f"pg_ctl start failed: {res.stdout}{res.stderr}{self.log()[-2000:]}")
        if not self._has_database():
            self._run(
                [
                    str(BIN / "createdb"),
                    "-h",
                    str(self.dir),
                    "-p",
                    str(self.port),
                    "-U",
                    self.user,
                    self.database,
                ]
            )
        return self

    def _has_database(self) -> bool:
        res = self._run(
            ["/usr/bin/psql", "-h", str(self.dir), "-p", str(self.port), "-U", self.user, "-d", "postgres", "-tAc",
             f"SELECT 1 FROM pg_database WHERE datname = '{self.database}'"],
        )  # fmt: skip
        return res.stdout.strip() == "1"

    def sql(self, database: str, sql: str) -> subprocess.CompletedProcess:
        """Run `sql` in `database` as the superuser, through the socket (stops at the first error)."""
        return self._run(
            ["/usr/bin/psql", "-h", str(self.dir), "-p", str(self.port), "-U", self.user, "-d", database,
             "-v", "ON_ERROR_STOP=1", "-c", sql],
            check=False,
        )  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        self._run([str(BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"], check=False)

    def running(self) -> bool:
        return self._run([str(BIN / "pg_ctl"), "-D", str(self.data), "status"], check=False).returncode == 0

    def remove(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)

    def log(self) -> str:
        path = self.dir / "log"
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        raise TimeoutError(f"postgres on port {self.port} not up within {timeout_s} s")


def _quote(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"
