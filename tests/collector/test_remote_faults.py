"""Remote roots when the network misbehaves, and a one-shot ingest beside a running daemon (real sshd).

The stalled network is a real TCP relay in front of the test's sshd (`StallingProxy`): it stops forwarding
mid-transfer while keeping the connection open, so the collector sees no reset, no close, only silence.
Waits are bounded and generous (a loaded 2-core CI machine); nothing asserts how fast anything happened.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.collector import test_remote
from tests.collector.test_daemon_support import Daemon, cli, wait_for
from tests.collector.test_remote import health_state, raw_steps
from tests.sshd_support import StallingProxy

EXTRA = [f"train/m{i}" for i in range(8)]  # wide lines: a backlog of megabytes from few steps
sshd, ssh_home = test_remote.sshd, test_remote.ssh_home  # the same real server and client home
SLOW_S = 240.0  # a stall is noticed by a timeout (20 s) and reconnects back off up to 30 s


def wide_line(step: int) -> str:
    data = {"train/loss": 1.0 / step} | {m: float(i) for i, m in enumerate(EXTRA)}
    return json.dumps({"step": step, "data": data}) + "\n"


def write_wide(path: Path, steps) -> None:
    with open(path, "a") as f:
        f.writelines(wide_line(s) for s in steps)


def test_a_network_that_stalls_mid_read_times_out_shows_the_root_down_and_loses_nothing(ssh_home, tmp_path):
    remote = tmp_path / "remote"
    (remote / "big").mkdir(parents=True)
    metrics = remote / "big" / "metrics.jsonl"
    backlog = 60_000
    write_wide(metrics, range(1, backlog + 1))
    assert metrics.stat().st_size > 10 << 20  # many MiB: the stall below lands inside its transfer

    proxy = StallingProxy(ssh_home)
    url = proxy.url(remote)
    # The login, the listing and the first 3 MiB of the backlog pass, then the link goes silent (still open).
    proxy.stall_after(3 << 20)
    daemon = Daemon(tmp_path / "db.duckdb", [url]).start()
    try:
        client = daemon.client()
        wait_for(lambda: proxy.stalled, "the link to stall mid-transfer", timeout=SLOW_S)
        # The collector gives up on the silent link by itself (the relay never closed it) and says so.
        wait_for(lambda: health_state(client, url) == "disconnected", "the stalled root shown down", SLOW_S)
        assert proxy.stalled
        state = next(s for s in client.get("/api/health")["root_states"] if s["root"] == url)
        assert state["error"]  # why, in words (a timeout or the keepalive giving up)
        runs = {r["id"]: r for r in client.get("/api/runs")}
        assert (runs.get("big", {}).get("last_step") or 0) < backlog  # the stall came mid-read
        if "big" in runs:
            assert (runs["big"]["status"], runs["big"]["root_state"]) == ("unreachable", "disconnected")

        write_wide(metrics, range(backlog + 1, backlog + 21))  # the trainer goes on meanwhile
        proxy.flow()
        wait_for(lambda: health_state(client, url) == "connected", "the root back", SLOW_S)
        total = backlog + 20

        def all_read():
            found = [r for r in client.get("/api/runs") if r["id"] == "big"]
            return found and found[0]["last_step"] == total

        wait_for(all_read, "every line, the backlog and those written during the stall", SLOW_S)
        steps, values = raw_steps(client, "big")
        assert steps == list(range(1, total + 1))  # each step once
        assert values == [1.0 / s for s in steps]
        run = client.get("/api/runs/big")
        assert {m["metric"]: m["points"] for m in run["metrics"]} == dict.fromkeys(
            ["train/loss", *EXTRA], total
        )
        assert client.get("/api/runs/big/replaced", params={"metric": "train/loss"}) == []
    finally:
        proxy.flow()
        daemon.ensure_stopped()
        proxy.close()


def test_ingest_of_a_remote_path_while_a_daemon_serves_the_database_goes_through_the_daemon(
    ssh_home, tmp_path
):
    remote, elsewhere = tmp_path / "remote", tmp_path / "elsewhere"
    (remote / "exp").mkdir(parents=True)
    (elsewhere / "other").mkdir(parents=True)
    metrics = remote / "exp" / "metrics.jsonl"
    test_remote.append(metrics, range(1, 6))
    test_remote.append(elsewhere / "other" / "metrics.jsonl", range(1, 4))
    db = tmp_path / "db.duckdb"
    daemon = Daemon(db, [ssh_home.url(remote)]).start()
    try:
        client = daemon.client()
        test_remote.wait_steps(client, "exp", 5, "the remote backlog")
        # README: a command works against the running collector through its API (DuckDB lets one process
        # open the file): ingest of a run folder inside its remote root is queued there, not refused.
        test_remote.append(metrics, range(6, 11))
        out = cli(db, "ingest", ssh_home.url(remote / "exp"), "--json")
        assert json.loads(out.stdout) == {"queued": [f"rw-test:{remote / 'exp'}"]}
        test_remote.wait_steps(client, "exp", 10, "the lines appended before the ingest request")
        steps, _ = raw_steps(client, "exp")
        assert steps == list(range(1, 11))

        # A remote folder outside the daemon's roots: refused with what to do, nothing read.
        out = cli(db, "ingest", ssh_home.url(elsewhere), check=False)
        assert out.returncode == 1
        assert "outside the watched roots" in out.stderr and "restart `collector serve` with it" in out.stderr
        assert "or stop it and run ingest again" in out.stderr
        assert [r["id"] for r in client.get("/api/runs")] == ["exp"]
    finally:
        daemon.ensure_stopped()
    # With the daemon stopped, the same command reads the database directly.
    out = cli(db, "ingest", ssh_home.url(elsewhere), "--json")
    assert json.loads(out.stdout)["points_added"] == 3


def test_ingest_while_another_process_holds_the_database_names_it_and_says_what_to_do(tmp_path):
    run = tmp_path / "runs" / "exp"
    run.mkdir(parents=True)
    test_remote.append(run / "metrics.jsonl", range(1, 4))
    db = tmp_path / "db.duckdb"
    # A real process holding the file read-write (as a collector does while it starts, before its API).
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import duckdb, sys; c = duckdb.connect({str(db)!r}); print('open', flush=True);"
         " sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline() == "open\n"
        out = cli(db, "ingest", str(tmp_path / "runs"), check=False)
        assert out.returncode == 1
        assert f"process {holder.pid} (`python" in out.stderr and "duckdb.connect" in out.stderr
        assert "wait for it to finish or stop it" in out.stderr
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    out = cli(db, "ingest", str(tmp_path / "runs"), "--json")
    assert json.loads(out.stdout)["points_added"] == 3
