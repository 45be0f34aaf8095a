"""Team mode's access with real parts: Postgres roles created in a real cluster (a collector's role that writes,
a read-only role for a reader), each process's own API token, and the lake's data on a real S3-compatible server
(moto's `moto_server`, from the team venv) instead of a folder."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from collector.api.client import ApiError, Client
from tests.collector.test_daemon_support import REPO, cli, cli_json, wait_for
from tests.collector.test_team import TEAM_PYTHON, TeamDaemon, exactly, lake_args, lake_sql, raw, write_steps
from tests.pg_support import PgServer, free_port, team_cluster


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    yield from team_cluster(TEAM_PYTHON)


NOBODY = 65534  # nobody:nogroup, the other user of the shared-folder test
AS_NOBODY = ("setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--")


# A writing role owns the catalog; each collector (and a team API that takes stops) logs in as its own role and
# acts as it. A read-only role may read every catalog table, now and later. (Roles are the cluster's, made once:
# `lake_with_roles` for a module's second lake.)
ROLES = """
CREATE ROLE lake_writer NOLOGIN;
CREATE ROLE lake_reader NOLOGIN;
ALTER DATABASE {db} OWNER TO lake_writer;
ALTER SCHEMA public OWNER TO lake_writer;
GRANT USAGE ON SCHEMA public TO lake_reader;
ALTER DEFAULT PRIVILEGES FOR ROLE lake_writer IN SCHEMA public GRANT SELECT ON TABLES TO lake_reader;
CREATE ROLE alice LOGIN IN ROLE lake_writer;
ALTER ROLE alice SET role = 'lake_writer';
CREATE ROLE desk LOGIN IN ROLE lake_writer;
ALTER ROLE desk SET role = 'lake_writer';
CREATE ROLE viewer LOGIN IN ROLE lake_reader;
"""


def lake_with_roles(pg: PgServer, db: str) -> str:
    """A new database `db` owned and read by ROLES' roles (made unless the cluster has them); its dsn."""
    dsn = pg.new_database(db)
    have = psql(pg, db, pg.user, "SELECT count(*) FROM pg_roles WHERE rolname = 'lake_writer'").stdout
    sql = ROLES.format(db=db)
    if have.split()[2] == "1":  # only the database's own statements
        sql = "\n".join(line for line in sql.splitlines() if not re.match(r"(CREATE|ALTER) ROLE", line))
    made = psql(pg, db, pg.user, sql)
    assert made.returncode == 0, made.stderr
    return dsn


def psql(pg: PgServer, db: str, user: str, sql: str) -> subprocess.CompletedProcess:
    cmd = [
        "/usr/bin/psql",
        "-h",
        "127.0.0.1",
        "-p",
        str(pg.port),
        "-U",
        user,
        "-d",
        db,
        "-v",
        "ON_ERROR_STOP=1",
    ]
    return pg._run([*cmd, "-c", sql], check=False)


def as_role(dsn: str, role: str) -> str:
    return re.sub(r"user=\S+", f"user={role}", dsn)


def test_roles_a_read_only_reader_and_a_token_for_each_process(pg, tmp_path):
    dsn, data = pg.new_database("roles"), tmp_path / "lake"
    made = psql(pg, "roles", pg.user, ROLES.format(db="roles"))
    assert made.returncode == 0, made.stderr
    metrics = tmp_path / "alice" / "exp" / "sft" / "metrics.jsonl"
    write_steps(metrics, 1, 100)
    with metrics.open("a") as f:
        f.write('{"step": 101, "data": {"train/loss": NaN, "train/lr": 0.0001}}\n')
    (tmp_path / "alice" / "exp" / "sft" / "status.json").write_text('{"state": "running"}')
    alice = TeamDaemon(
        tmp_path / "alice.duckdb", [tmp_path / "alice"], *lake_args(as_role(dsn, "alice"), data, "alice")
    )
    desk = TeamDaemon(tmp_path / "desk.duckdb", [], *lake_args(as_role(dsn, "desk"), data))
    # (this cluster trusts 127.0.0.1, so a password is accepted unread: here it shows it is never shown;
    # test_team_passwords.py checks passwords)
    secret = as_role(dsn, "viewer") + " password=never-shown-7f3a"
    viewer = TeamDaemon(tmp_path / "viewer.duckdb", [], *lake_args(secret, data))
    try:
        alice.start()
        desk.start()
        viewer.start()
        seen = viewer.client()
        wait_for(
            lambda: raw(seen, "alice/exp/sft")[0] == list(range(1, 102)),
            "alice's steps on the read-only reader",
        )
        assert "may only read the lake: serving it read-only" in viewer.log.read_text()
        markers = {d: json.loads(Path(f"{d.db}.collector.json").read_text()) for d in (desk, viewer)}
        assert markers[viewer]["lake_read_only"] is True and markers[desk]["lake_read_only"] is False
        assert markers[viewer]["lake"].endswith("password=***")  # the dashboard shows the marker's lake
        assert "never-shown" not in viewer.log.read_text() + json.dumps(markers[viewer])
        # Postgres itself refuses the read-only role any change of the catalog.
        refused = psql(pg, "roles", "viewer", "DELETE FROM ducklake_snapshot")
        assert refused.returncode != 0 and "permission denied" in refused.stderr, refused.stderr
        # A collector with the read-only role is refused at start, saying why.
        eve = subprocess.run(
            [str(TEAM_PYTHON), "-m", "collector", "serve", "--db", str(tmp_path / "eve.duckdb"),
             str(tmp_path / "alice"), "--once", *lake_args(as_role(dsn, "viewer"), data, "eve")],
            cwd=REPO, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert eve.returncode == 1 and "'viewer' may only read it" in eve.stderr, eve.stderr[-2000:]
        # The read-only reader lists every run and incident but refuses a stop, an ack or a resolve (403).
        incident = wait_for(lambda: seen.get("/api/runs/alice/exp/sft/incidents")[0], "alice's NaN incident")
        for path in (
            "/api/runs/alice/exp/sft/stop",
            f"/api/incidents/{incident['id']}/ack",
            f"/api/alerts/{incident['id']}/resolve",
        ):
            with pytest.raises(ApiError, match="may only read it") as caught:
                seen.post(path, {"reason": "from the read-only page", "note": "x"})
            assert caught.value.status == 403, path
        # The team API whose role writes asks the ack; alice applies it; the read-only reader shows it.
        asked = desk.client().post(f"/api/incidents/{incident['id']}/ack", {"note": "on it (desk)"})
        assert asked["state_requested"] == "acked"
        wait_for(
            lambda: _state(seen, incident["id"]) == "acked",
            "the ack asked on desk, applied by alice, on the read-only reader",
        )
        assert not (metrics.parent / "runwatch.stop").exists()  # the refused stop was never asked
        # Tokens: each process has its own; a reader answers nothing but its health without its own token.
        url = seen.base_url
        assert httpx.get(f"{url}/api/health").status_code == 200
        assert httpx.get(f"{url}/api/runs").status_code == 401
        alice_token = (tmp_path / "alice.duckdb.token").read_text().strip()
        viewer_token = (tmp_path / "viewer.duckdb.token").read_text().strip()
        assert alice_token != viewer_token
        for token, status in ((alice_token, 401), ("not-a-token", 401), (viewer_token, 200)):
            answer = httpx.get(f"{url}/api/runs", headers={"Authorization": f"Bearer {token}"})
            assert answer.status_code == status, (token[:4], answer.text)
    finally:
        for d in (alice, desk, viewer):
            d.ensure_stopped()


# DuckLake makes its catalog when a writing role first attaches the lake; this makes nothing else.
MAKE_CATALOG = (
    "import sys, duckdb\n"
    "from collector.store.lake import LakeSpec, attach, load_extensions\n"
    "con = duckdb.connect()\n"
    "load_extensions(con)\n"
    "attach(con, LakeSpec.parse(sys.argv[1], sys.argv[2]))\n"
)


def test_readers_started_on_a_brand_new_lake_answer_empty_then_read_the_first_collector(pg, tmp_path):
    """A team starts its dashboard before any collector: a read-only and a writing team API on a lake no
    collector has created answer as an empty store (health saying why), create nothing in the lake, read it
    once its catalog exists, and list the first collector's runs as it publishes them, without a restart."""
    dsn, data = lake_with_roles(pg, "fresh"), tmp_path / "lake"
    viewer = TeamDaemon(tmp_path / "viewer.duckdb", [], *lake_args(as_role(dsn, "viewer"), data))
    desk = TeamDaemon(tmp_path / "desk.duckdb", [], *lake_args(as_role(dsn, "desk"), data))
    # a team API given another folder than the collectors': DuckLake refuses it once the lake exists
    stray = TeamDaemon(tmp_path / "stray.duckdb", [], *lake_args(dsn, tmp_path / "elsewhere"))
    root = tmp_path / "alice"
    metrics = root / "exp" / "sft" / "metrics.jsonl"
    alice = TeamDaemon(tmp_path / "alice.duckdb", [root], *lake_args(as_role(dsn, "alice"), data, "alice"))
    no_collector = "no collector has published into this team lake yet"
    try:
        viewer.start()
        desk.start()
        stray.start()
        readers = {"viewer": viewer.client(), "desk": desk.client()}
        for name, client in readers.items():
            for path in ("/api/runs", "/api/alerts", "/api/incidents", "/api/problem_files"):
                assert client.get(path) == [], (name, path)
            lake = client.get("/api/health")["lake"]
            assert lake["collectors"] == 0 and lake["read_only"] is None, (name, lake)
            assert lake["message"].startswith(no_collector), (name, lake)
        said = cli(viewer.db, "runs")  # the CLI on the team's API says why it lists nothing
        assert f"collector runs: {no_collector}" in said.stderr, said.stderr
        assert cli_json(viewer.db, "runs") == []
        tables = psql(pg, "fresh", pg.user, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
        assert tables.stdout.split()[2] == "0", (
            tables.stdout
        )  # neither reader created anything, whatever its role
        # The catalog made (as a collector's first attach makes it), none of runwatch's tables yet: the readers
        # attach the lake and still answer empty.
        catalog = subprocess.run(
            [str(TEAM_PYTHON), "-c", MAKE_CATALOG, f"ducklake:postgres:{as_role(dsn, 'alice')}", str(data)],
            cwd=REPO, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert catalog.returncode == 0, catalog.stderr[-2000:]
        for name, client in readers.items():
            wait_for(
                lambda c=client: c.get("/api/health")["lake"]["read_only"] is not None,
                f"the {name} reader attaching the lake's catalog",
            )
            assert client.get("/api/runs") == [] and client.get("/api/alerts") == [], name
            assert client.get("/api/health")["lake"]["collectors"] == 0, name
        assert readers["viewer"].get("/api/health")["lake"]["read_only"] is True
        assert readers["desk"].get("/api/health")["lake"]["read_only"] is False
        assert json.loads(Path(f"{viewer.db}.collector.json").read_text())["lake_read_only"] is True
        refused = wait_for(
            lambda: stray.client().get("/api/health")["lake"].get("error"), "the stray reader's error"
        )
        assert "does not match existing data path" in refused and str(tmp_path / "elsewhere") in refused, (
            refused
        )
        assert "collector runs: warning: cannot attach the lake" in cli(stray.db, "runs").stderr
        # The first collector publishes: both readers list its run, its points and its alert.
        write_steps(metrics, 1, 100)
        with metrics.open("a") as f:
            f.write('{"step": 101, "data": {"train/loss": NaN, "train/lr": 0.0001}}\n')
        (metrics.parent / "status.json").write_text('{"state": "running"}')
        alice.start()
        for name, client in readers.items():
            wait_for(
                lambda c=client: raw(c, "alice/exp/sft")[0] == list(range(1, 102)), f"alice's steps on {name}"
            )
            # (built now: the overview kept from the empty lake above may be the answer for 2 s)
            assert [r["id"] for r in client.get("/api/runs", {"max_age_s": 0})] == ["alice/exp/sft"], name
            wait_for(
                lambda c=client: [a["rule"] for a in c.get("/api/alerts", {"run": "alice/exp/sft"})] == ["nonfinite"],
                f"alice's NaN alert on {name}",
            )  # fmt: skip
            lake = client.get("/api/health")["lake"]
            assert lake["collectors"] == 1 and "message" not in lake, (name, lake)
        assert [r["id"] for r in cli_json(viewer.db, "runs")] == ["alice/exp/sft"]
        assert no_collector not in cli(viewer.db, "runs").stderr
        # The writing reader attached the lake writable once it existed: a stop asked there reaches alice.
        with pytest.raises(ApiError, match="may only read it"):
            readers["viewer"].post("/api/runs/alice/exp/sft/stop", {"reason": "x"})
        readers["desk"].post("/api/runs/alice/exp/sft/stop", {"reason": "asked before the dashboard's time"})
        wait_for(lambda: (metrics.parent / "runwatch.stop").exists(), "desk's stop written by alice")
    finally:
        for d in (alice, desk, viewer, stray):
            d.ensure_stopped()


def _state(client: Client, incident_id: int) -> str:
    return next(i["state"] for i in client.get("/api/incidents") if i["id"] == incident_id)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.TransportError:  # not listening yet
        return False


def test_the_lakes_data_on_an_s3_compatible_server(pg, tmp_path, monkeypatch):
    """`--data-path s3://bucket/folder/`: a collector writes the Parquet files to a real S3 server over HTTP, a
    reader reads them back, nothing is written to a local lake folder."""
    port = free_port()
    log = tmp_path / "moto.log"
    with log.open("ab") as out:
        moto = subprocess.Popen(
            [str(Path(TEAM_PYTHON).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(endpoint), "moto_server to answer", proc=moto, log=log)
        assert httpx.put(f"{endpoint}/team-lake").status_code == 200  # the bucket
        for name, value in (
            ("AWS_ACCESS_KEY_ID", "runwatch-test"),
            ("AWS_SECRET_ACCESS_KEY", "runwatch-test-secret"),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ENDPOINT_URL", endpoint),
        ):
            monkeypatch.setenv(name, value)  # the collector and the reader inherit them
        # A bucket that is not there: the collector stops at once, saying where it could not write.
        lost = subprocess.run(
            [str(TEAM_PYTHON), "-m", "collector", "serve", "--db", str(tmp_path / "lost.duckdb"),
             str(tmp_path), "--once", *lake_args(pg.new_database("nobucket"), "s3://no-such-bucket/runs/", "lost")],
            cwd=REPO, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert lost.returncode == 1, lost.stderr[-2000:]
        assert "cannot publish into the lake" in lost.stderr and "s3://no-such-bucket/runs/" in lost.stderr
        assert "Traceback" not in lost.stderr, lost.stderr[-2000:]
        dsn, data = pg.new_database("s3"), "s3://team-lake/runs/"
        metrics = tmp_path / "root" / "exp" / "rl" / "metrics.jsonl"
        write_steps(metrics, 1, 400)
        sam = TeamDaemon(tmp_path / "sam.duckdb", [tmp_path / "root"], *lake_args(dsn, data, "sam"))
        reader = TeamDaemon(tmp_path / "reader.duckdb", [], *lake_args(dsn, data))
        try:
            sam.start()
            reader.start()
            client = reader.client()
            wait_for(lambda: exactly(client, "sam/exp/rl", 400), "sam's 400 steps through S3")
            write_steps(metrics, 401, 450)
            wait_for(lambda: exactly(client, "sam/exp/rl", 450), "sam's later lines through S3")
            listing = httpx.get(f"{endpoint}/team-lake", params={"list-type": "2", "prefix": "runs/"}).text
            keys = re.findall(r"<Key>([^<]+)</Key>", listing)
            assert any(k.startswith("runs/main/point_rows/") and k.endswith(".parquet") for k in keys), keys
        finally:
            sam.ensure_stopped()
            reader.ensure_stopped()
        assert not list(tmp_path.glob("**/*.parquet"))  # the data went to the bucket, not to a folder here
    finally:
        moto.terminate()
        moto.wait(timeout=30)


def test_an_endpoint_that_is_not_http_is_refused_naming_its_variable(tmp_path):
    """A bad S3 endpoint stops the collector with the variable it was read from and the value given."""
    code = (
        "import duckdb\n"
        "from collector.store.lake import load_extensions\n"
        "from collector.store.lake_access import prepare_data_path\n"
        "from collector.store.schema import StoreError\n"
        "con = duckdb.connect()\n"
        "load_extensions(con)  # as a collector does before its data path (httpfs from the team venv)\n"
        "try:\n"
        "    prepare_data_path(con, 's3://team-lake/runs/')\n"
        "except StoreError as e:\n"
        "    print(e)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    for named in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        said = subprocess.run(
            [str(TEAM_PYTHON), "-c", code], cwd=REPO, env={**env, named: "ftp://minio.example:9000"},
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert said.returncode == 0, said.stderr[-2000:]
        assert said.stdout.strip() == f"{named}=ftp://minio.example:9000: expected http(s)://host[:port]"


def test_a_shared_folder_read_by_another_user_of_its_group(pg, tmp_path, monkeypatch):
    """The lake's folder shared through a Unix group as the README says (setgid, a default ACL): the files a
    collector writes under its private umask (077) are readable by the group, and a team API running as another
    user of that group (nobody:nogroup) reads every point; others may not enter the folder."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("switching to another user needs root and setpriv (the tests run as root in CI)")
    if shutil.which("setfacl") is None:
        pytest.fail("setfacl is missing: `apt-get install acl` (make test does)")
    probe = subprocess.run(
        [*AS_NOBODY, str(TEAM_PYTHON), "-c", "import collector"], cwd=REPO, capture_output=True
    )
    if probe.returncode != 0:  # (a checkout in a folder only root may enter, e.g. /root)
        pytest.skip(f"user {NOBODY} cannot run the collector from {REPO}: {probe.stderr.decode()[-300:]}")
    shared = Path(tempfile.mkdtemp(prefix="runwatch-team-share-"))  # (pytest's folders are root's alone)
    try:
        shared.chmod(0o755)
        lake = shared / "lake"
        lake.mkdir()
        os.chown(lake, 0, NOBODY)
        lake.chmod(0o2770)
        subprocess.run(["setfacl", "-d", "-m", "g::rwX,o::---", str(lake)], check=True)
        home = shared / "nobody"
        home.mkdir()
        os.chown(home, NOBODY, NOBODY)
        monkeypatch.setenv("HOME", str(home))
        dsn = pg.new_database("shared")
        write_steps(tmp_path / "root" / "exp" / "sft" / "metrics.jsonl", 1, 250)
        alice = TeamDaemon(tmp_path / "alice.duckdb", [tmp_path / "root"], *lake_args(dsn, lake, "alice"))
        reader = TeamDaemon(home / "team.duckdb", [], *lake_args(dsn, lake), prefix=AS_NOBODY)
        try:
            alice.start()
            reader.start()
            wait_for(lambda: exactly(reader.client(), "alice/exp/sft", 250), "alice's points read as nobody")
            files = list(lake.rglob("*.parquet"))
            assert files and all(
                f.stat().st_gid == NOBODY and f.stat().st_mode & 0o047 == 0o040 for f in files
            ), [
                (f.name, oct(f.stat().st_mode), f.stat().st_gid) for f in files
            ]  # group-readable through the ACL, nothing for others
            # The group shut out (as without the ACL: the collector's umask 077 makes it all 0600/0700): the
            # reader says what is wrong and where to look, not a bare 500.
            subprocess.run(["chmod", "-R", "g-rwx", str(lake / "main")], check=True)
            with pytest.raises(
                ApiError, match="cannot read the lake's data .*Permission denied.*default ACL"
            ):
                raw(reader.client(), "alice/exp/sft")
        finally:
            alice.ensure_stopped()
            reader.ensure_stopped()
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def forget(dsn: str, data: Path, name: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(TEAM_PYTHON), "-m", "collector", "forget", *lake_args(dsn, data), "--collector", name],
        cwd=REPO, capture_output=True, text=True, timeout=180,
    )  # fmt: skip


def test_a_retired_collector_is_forgotten_from_the_lake_in_one_transaction(pg, tmp_path):
    """`collector forget` deletes a test collector's runs, points, alerts and name from the lake, and nothing
    of another collector's; refused for a read-only role and while that collector is live."""
    dsn, data = lake_with_roles(pg, "retire"), tmp_path / "lake"
    write_steps(tmp_path / "alice" / "exp" / "sft" / "metrics.jsonl", 1, 120)
    for run in ("a", "b"):
        carol_metrics = tmp_path / "carol" / "test" / run / "metrics.jsonl"
        write_steps(carol_metrics, 1, 50)
    with carol_metrics.open("a") as f:
        f.write('{"step": 51, "data": {"train/loss": NaN, "train/lr": 0.0001}}\n')
    role = as_role(dsn, "alice")
    alice = TeamDaemon(tmp_path / "alice.duckdb", [tmp_path / "alice"], *lake_args(role, data, "alice"))
    carol = TeamDaemon(tmp_path / "carol.duckdb", [tmp_path / "carol"], *lake_args(role, data, "carol"))
    reader = TeamDaemon(tmp_path / "reader.duckdb", [], *lake_args(as_role(dsn, "viewer"), data))
    try:
        alice.start()
        carol.start()
        reader.start()
        client = reader.client()
        ids = ["alice/exp/sft", "carol/test/a", "carol/test/b"]
        wait_for(
            lambda: sorted(r["id"] for r in client.get("/api/runs")) == ids, "the three runs in the lake"
        )
        wait_for(lambda: client.get("/api/alerts", {"run": "carol/test/b"}), "carol's NaN alert in the lake")
        live = forget(role, data, "carol")
        assert live.returncode == 1 and "the collector 'carol' is live" in live.stderr, live.stderr[-2000:]
        assert "taken until 30 s after its last heartbeat" in live.stderr, live.stderr[-2000:]
        carol.ensure_stopped()
        viewer = forget(as_role(dsn, "viewer"), data, "carol")
        assert viewer.returncode == 1 and "'viewer' may only read it" in viewer.stderr, viewer.stderr[-2000:]
        fresh = {"max_age_s": 0}  # (built now, not the overview kept before the two refusals)
        assert sorted(r["id"] for r in client.get("/api/runs", fresh)) == ids  # nothing deleted by either
        done = forget(role, data, "carol")
        assert done.returncode == 0 and "forgot collector 'carol': deleted" in done.stdout, done.stderr[
            -2000:
        ]
        assert "runs 2," in done.stdout and "alerts 1," in done.stdout and "point_rows 202" in done.stdout, (
            done.stdout
        )
        wait_for(lambda: [r["id"] for r in client.get("/api/runs")] == ["alice/exp/sft"], "carol's runs gone")
        assert client.get("/api/alerts", {"state": "all"}) == [] and client.get("/api/incidents") == []
        assert client.get("/api/health")["lake"]["collectors"] == 1
        assert exactly(client, "alice/exp/sft", 120)  # alice's rows untouched
        again = forget(role, data, "carol")
        assert again.returncode == 1 and "no collector named 'carol'" in again.stderr, again.stderr[-2000:]
        # alice goes on publishing after carol's rows went (the lake's tables and alice's marks intact)
        write_steps(tmp_path / "alice" / "exp" / "sft" / "metrics.jsonl", 121, 130)
        wait_for(lambda: exactly(client, "alice/exp/sft", 130), "alice's later lines in the lake")
    finally:
        for d in (alice, carol, reader):
            d.ensure_stopped()


def test_forget_says_why_it_cannot_and_deletes_all_or_nothing(pg, tmp_path):
    """`collector forget` on a lake no collector has published into, with a name that is none, or meeting a
    failing statement part way: exit 1 with one line saying why (no traceback), and the rows it had deleted
    before the failure are back (its deletes are one transaction)."""
    dsn, data = pg.new_database("forgetodd"), tmp_path / "lake"
    newline = forget(dsn, data, "carol\n")  # `$` in the name's pattern let a trailing newline through
    assert newline.returncode == 1 and "is no collector's name" in newline.stderr, newline.stderr[-2000:]
    lake_sql(dsn, data, "CREATE TABLE lake.other (a INTEGER)")  # a DuckLake, but not a team's
    bare = forget(dsn, data, "carol")
    assert bare.returncode == 1 and "no collector has published into this lake" in bare.stderr, bare.stderr
    assert "Traceback" not in bare.stderr
    # carol's name row goes first (tables by name), then a table whose run_id cannot be matched fails
    lake_sql(dsn, data, "CREATE TABLE lake.team_format (format BIGINT, upgraded_at DOUBLE)")
    lake_sql(dsn, data, "INSERT INTO lake.team_format VALUES (2, 0)")  # (a lake this code wrote)
    lake_sql(
        dsn,
        data,
        "CREATE TABLE lake.team_names (name VARCHAR, host VARCHAR, pid INTEGER, heartbeat_at DOUBLE)",
    )
    lake_sql(dsn, data, "INSERT INTO lake.team_names VALUES ('carol', 'elsewhere', 1, 0)")
    lake_sql(dsn, data, "CREATE TABLE lake.zz_odd (run_id INTEGER)")
    failed = forget(dsn, data, "carol")
    assert failed.returncode == 1 and "collector 'carol' not forgotten from the lake" in failed.stderr, (
        failed.stderr[-2000:]
    )
    assert "Traceback" not in failed.stderr and "forget again" in failed.stderr
    assert lake_sql(dsn, data, "SELECT name FROM lake.team_names") == [["carol"]]
    # A COMMIT refused (here: a role that may not record delete files) is said as the catalog said it, not
    # hidden by the ROLLBACK after it, and nothing is gone.
    lake_sql(dsn, data, "DROP TABLE lake.zz_odd")
    lake_sql(dsn, data, "CREATE TABLE lake.zz_runs (run_id VARCHAR)")
    lake_sql(
        dsn, data, "INSERT INTO lake.zz_runs VALUES ('carol/a'), ('alice/b')"
    )  # one file: a partial delete
    grants = psql(pg, "forgetodd", pg.user, FORGETTER)
    assert grants.returncode == 0, grants.stderr
    refused = forget(as_role(dsn, "forgetter"), data, "carol")
    assert refused.returncode == 1 and "ducklake_delete_file" in refused.stderr, refused.stderr[-2000:]
    assert "cannot rollback" not in refused.stderr, refused.stderr[-2000:]
    assert lake_sql(dsn, data, "SELECT name FROM lake.team_names") == [["carol"]]
    assert lake_sql(dsn, data, "SELECT run_id FROM lake.zz_runs ORDER BY 1") == [["alice/b"], ["carol/a"]]


# A role that may write the lake's catalog tables but not record a delete file: its DELETE commits fail.
FORGETTER = """
CREATE ROLE forgetter LOGIN;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO forgetter;
REVOKE INSERT ON ducklake_delete_file FROM forgetter;
"""
