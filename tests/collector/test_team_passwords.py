"""Team mode's Postgres passwords, with real parts: a cluster that asks every connection over 127.0.0.1 for its
role's password (scram-sha-256), roles made with passwords, real collectors and a real reader. The password
reaches them the ways Postgres' client library reads it (PGPASSWORD, a PGPASSFILE / ~/.pgpass file), never on
the command line; a wrong or missing one is refused at start in one line naming the lake, the password unshown."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.collector.test_daemon_support import REPO, wait_for
from tests.collector.test_team import TEAM_PYTHON, TeamDaemon, exactly, lake_args, write_steps
from tests.collector.test_team_access import ROLES
from tests.pg_support import PgServer, team_cluster

ALICE_PW = "alice-pw-5c1e9"
VIEWER_PW = "viewer-pw-9d2b4"
WRONG_PW = "not-her-pw-31f7"
PASSWORDS = f"""
ALTER ROLE alice PASSWORD '{ALICE_PW}';
ALTER ROLE viewer PASSWORD '{VIEWER_PW}';
"""


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    yield from team_cluster(TEAM_PYTHON, passwords=True)


@pytest.fixture(scope="module")
def dsn(pg) -> str:
    """The lake's database with the README's roles (alice writes, viewer reads), each with its password."""
    made = pg.sql("postgres", "CREATE DATABASE pw")
    assert made.returncode == 0, made.stderr
    made = pg.sql("pw", "SET password_encryption = 'scram-sha-256';" + ROLES.format(db="pw") + PASSWORDS)
    assert made.returncode == 0, made.stderr
    return f"dbname=pw host=127.0.0.1 port={pg.port}"


def pgpass(folder: Path, port: int, role: str, password: str, mode: int = 0o600) -> Path:
    path = folder / f"{role}.pgpass"
    path.write_text(f"127.0.0.1:{port}:pw:{role}:{password}\n")
    path.chmod(mode)
    return path


def without_passwords(tmp_path: Path, **env: str) -> dict[str, str]:
    """This process's environment with no password of its own (nor a ~/.pgpass), plus `env`."""
    out = {k: v for k, v in os.environ.items() if k not in ("PGPASSWORD", "PGPASSFILE")}
    return {**out, "PGPASSFILE": str(tmp_path / "no.pgpass"), **env}


def args_shown(pid: int) -> str:
    """The process's command line as `ps` shows it to every user of the machine (unclipped)."""
    return subprocess.run(["ps", "-ww", "-o", "args=", "-p", str(pid)], capture_output=True, text=True).stdout


def test_passwords_from_libpq_reach_collector_and_reader_but_never_the_process_list(
    pg, dsn, tmp_path, monkeypatch
):
    """alice's collector gets its password from PGPASSWORD, the read-only reader from a PGPASSFILE (mode 0600):
    both log in (the cluster refuses a connection without one, next test), the reader reads alice's every
    step, and neither password is in the process list, a log or the marker."""
    for name, value in without_passwords(tmp_path).items():
        monkeypatch.setenv(name, value)
    data = tmp_path / "lake"
    write_steps(tmp_path / "alice" / "exp" / "sft" / "metrics.jsonl", 1, 120)
    monkeypatch.setenv("PGPASSWORD", ALICE_PW)  # (Popen hands each daemon the environment of its start)
    alice = TeamDaemon(
        tmp_path / "alice.duckdb", [tmp_path / "alice"], *lake_args(f"{dsn} user=alice", data, "alice")
    )
    monkeypatch.delenv("PGPASSWORD")
    viewer = TeamDaemon(tmp_path / "viewer.duckdb", [], *lake_args(f"{dsn} user=viewer", data))
    try:
        monkeypatch.setenv("PGPASSWORD", ALICE_PW)
        alice.start()
        monkeypatch.delenv("PGPASSWORD")
        monkeypatch.setenv("PGPASSFILE", str(pgpass(tmp_path, pg.port, "viewer", VIEWER_PW)))
        viewer.start()
        wait_for(lambda: exactly(viewer.client(), "alice/exp/sft", 120), "alice's 120 steps on the reader")
        assert "may only read the lake: serving it read-only" in viewer.log.read_text()
        for daemon, password in ((alice, ALICE_PW), (viewer, VIEWER_PW)):
            shown = args_shown(daemon.proc.pid)
            assert "--store ducklake:postgres:dbname=pw" in shown, shown  # (the daemon's own process)
            assert password not in shown and "password=" not in shown, shown
            texts = daemon.log.read_text() + Path(f"{daemon.db}.collector.json").read_text()
            assert password not in texts and "--store holds the Postgres password" not in texts
    finally:
        alice.ensure_stopped()
        viewer.ensure_stopped()


def refused(tmp_path: Path, name: str, store_dsn: str, env: dict[str, str], roots: bool = True):
    """`serve` started with this catalog and environment: a collector (`--once`) or, without roots, a reader."""
    root = tmp_path / "runs"
    write_steps(root / "exp" / "sft" / "metrics.jsonl", 1, 5)
    lake = lake_args(store_dsn, tmp_path / "lake", name if roots else None)
    cmd = [
        str(TEAM_PYTHON),
        "-m",
        "collector",
        "serve",
        "--db",
        str(tmp_path / f"{name}.duckdb"),
        "--port",
        "0",
    ]
    cmd += [str(root), "--once", *lake] if roots else lake
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    return done.returncode, done.stderr


@pytest.mark.parametrize(
    ("case", "user", "in_store", "env", "roots", "why"),
    [
        ("wrong-env", "alice", "", {"PGPASSWORD": WRONG_PW}, True, "Postgres refused the password"),
        ("wrong-store", "alice", f" password={WRONG_PW}", {}, True, "Postgres refused the password"),
        ("none", "alice", "", {}, True, "Postgres asks for a password and none was given"),
        ("reader-wrong-file", "viewer", "", {"pgpass": WRONG_PW}, False, "Postgres refused the password"),
        ("reader-none", "viewer", "", {}, False, "Postgres asks for a password and none was given"),
    ],
)
def test_a_wrong_or_missing_password_is_refused_at_start_in_one_line(
    pg, dsn, tmp_path, case, user, in_store, env, roots, why
):
    if "pgpass" in env:  # a password file (mode 0600) with the wrong password for the role
        env = {"PGPASSFILE": str(pgpass(tmp_path, pg.port, user, env["pgpass"]))}
    catalog = f"{dsn} user={user}{in_store}"
    rc, stderr = refused(tmp_path, case, catalog, without_passwords(tmp_path, **env), roots)
    assert rc != 0 and "Traceback" not in stderr, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if "cannot attach the lake" in line]
    assert len(lines) == 1, stderr[-3000:]
    shown_catalog = f"ducklake:postgres:{dsn} user={user}" + (" password=***" if in_store else "")
    assert f"cannot attach the lake {shown_catalog}: {why}" in lines[0], lines[0]
    assert "~/.pgpass (mode 0600), a file named by PGPASSFILE, or PGPASSWORD" in lines[0]
    assert WRONG_PW not in stderr and ALICE_PW not in stderr and VIEWER_PW not in stderr
    warned = [line for line in stderr.splitlines() if "--store holds the Postgres password" in line]
    assert len(warned) == (1 if in_store else 0), stderr[-3000:]


def test_a_password_in_store_works_with_a_warning_and_stays_out_of_the_log_when_postgres_goes(
    pg, dsn, tmp_path, monkeypatch
):
    """The right password inside `--store` logs in (one warning at start); with Postgres gone under the reader,
    its failed reconnects (DuckDB's errors quote the whole catalog string) leave no password in its log."""
    made = pg.sql("postgres", "CREATE DATABASE gone OWNER lake_writer")
    assert made.returncode == 0, made.stderr
    catalog, data = dsn.replace("dbname=pw", "dbname=gone") + " user=alice", tmp_path / "lake"
    write_steps(tmp_path / "root" / "exp" / "sft" / "metrics.jsonl", 1, 30)
    env = without_passwords(tmp_path)
    once = subprocess.run(
        [str(TEAM_PYTHON), "-m", "collector", "serve", "--db", str(tmp_path / "alice.duckdb"),
         str(tmp_path / "root"), "--once", *lake_args(catalog, data, "alice")],
        cwd=REPO, env={**env, "PGPASSWORD": ALICE_PW}, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert once.returncode == 0, once.stderr[-3000:]
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    reader = TeamDaemon(tmp_path / "desk.duckdb", [], *lake_args(f"{catalog} password={ALICE_PW}", data))
    try:
        reader.start()
        url, token = reader.client().base_url, Path(f"{reader.db}.token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        runs = lambda: httpx.get(f"{url}/api/runs", headers=headers, timeout=60)  # noqa: E731
        assert [r["id"] for r in runs().json()] == ["alice/exp/sft"]
        pg.stop()
        try:
            # (503: the catalog out of reach, collector/api/app.py)
            assert [runs().status_code for _ in range(3)] == [503] * 3
        finally:
            pg.start()
        wait_for(lambda: runs().status_code == 200, "the reader answering once Postgres is back")
        log = reader.log.read_text()
        assert "Unable to connect to Postgres" in log and "password=***" in log, log[-3000:]
        assert ALICE_PW not in log, log[-3000:]
        assert log.count("--store holds the Postgres password") == 1, log[-3000:]
    finally:
        reader.ensure_stopped()
