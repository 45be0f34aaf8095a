"""Remote roots against a real OpenSSH server on 127.0.0.1 (Debian's sshd, keys and known_hosts made here).

The "remote" run folders are folders of this machine read through `ssh://rw-test/...`, so every test can
compare what the collector stored with the files themselves.
"""

from __future__ import annotations

import json
import struct
import threading
import time
from pathlib import Path

import pytest

from collector.formats import discover
from collector.ingest import fs
from collector.ingest.fs import forget_hosts
from tests.collector.test_daemon_support import Daemon, cli, wait_for
from tests.sshd_support import SshServer, sshd_missing


@pytest.fixture(scope="module")
def sshd(tmp_path_factory) -> SshServer:
    missing = sshd_missing()
    if missing:
        pytest.fail(missing)
    server = SshServer(tmp_path_factory.mktemp("ssh")).start()
    yield server
    server.stop()


@pytest.fixture
def ssh_home(sshd: SshServer, monkeypatch) -> SshServer:
    """This process and its children use the test's ~/.ssh (config, key, known_hosts) and no agent."""
    monkeypatch.setenv("HOME", str(sshd.home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    if sshd.proc is None:
        sshd.start()
    yield sshd
    forget_hosts()


def verl_line(step: int, value: float | None = None) -> str:
    return json.dumps({"step": step, "data": {"train/loss": 1.0 / step if value is None else value}}) + "\n"


def append(path: Path, steps, value: float | None = None) -> None:
    with open(path, "a") as f:
        for step in steps:
            f.write(verl_line(step, value))


def safetensors(path: Path, floats: int = 4, cut: int = 0) -> None:
    header = json.dumps({"w": {"dtype": "F32", "shape": [floats], "data_offsets": [0, 4 * floats]}}).encode()
    data = struct.pack("<Q", len(header)) + header + bytes(4 * floats)
    path.write_bytes(data[: len(data) - cut])


def test_the_seam_answers_the_same_for_a_file_read_locally_and_over_ssh(ssh_home, tmp_path):
    run = tmp_path / "runs" / "exp"
    run.mkdir(parents=True)
    append(run / "metrics.jsonl", range(1, 50))
    (run / "status.json").write_text('{"state": "running"}')
    local_key = str(run / "metrics.jsonl")
    remote_root = fs.root_path(ssh_home.url(tmp_path / "runs"))
    remote_key = str(remote_root / "exp" / "metrics.jsonl")
    assert remote_key == f"rw-test:{run / 'metrics.jsonl'}"

    here, there = fs.Files.stat(local_key), fs.Files.stat(remote_key)
    assert (there.st_size, there.st_ino, there.st_dev) == (here.st_size, here.st_ino, here.st_dev)
    assert abs(there.st_mtime - here.st_mtime) < 1e-3
    # Reads that follow a small read are served from what it fetched ahead: each must still be exact.
    for start, size in (
        (0, 10),
        (100, 300),
        (50, 20),
        (60, 5),
        (here.st_size - 5, 100),
        (here.st_size - 3, 2),
    ):
        assert fs.Files.read_range(remote_key, start, size) == fs.Files.read_range(local_key, start, size)
    assert fs.Files.read_tail(remote_key, 64) == fs.Files.read_tail(local_key, 64)

    local_runs = discover.find_runs([tmp_path / "runs"])
    remote_runs = discover.find_runs([remote_root])
    assert [(r.id, r.format, [(s.path.name, s.format, s.role) for s in r.sources]) for r in remote_runs] == [
        (r.id, r.format, [(s.path.name, s.format, s.role) for s in r.sources]) for r in local_runs
    ]
    with pytest.raises(TypeError, match="another machine"):
        open(remote_root / "exp" / "metrics.jsonl")  # noqa: SIM115 (a remote path is never opened locally)
    with pytest.raises(FileNotFoundError):
        fs.Files.stat(str(remote_root / "exp" / "missing.jsonl"))


def test_an_unknown_host_key_is_refused_with_how_to_accept_it(ssh_home, tmp_path):
    run = tmp_path / "runs" / "exp"
    run.mkdir(parents=True)
    append(run / "metrics.jsonl", range(1, 5))
    known = ssh_home.home / ".ssh" / "known_hosts"
    kept = known.read_text()
    try:
        known.write_text("")
        out = cli(tmp_path / "db.duckdb", "ingest", ssh_home.url(tmp_path / "runs"), check=False)
        assert out.returncode == 1
        assert "host key not verified" in out.stderr and "accepts no host key silently" in out.stderr
        assert f"ssh-keyscan -p {ssh_home.port} 127.0.0.1 >> ~/.ssh/known_hosts" in out.stderr
        assert known.read_text() == ""  # nothing accepted on the user's behalf
        # A key that differs from the one on file is refused the same way.
        other = (
            kept.split()[0]
            + " ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBvbuObz5xl2WRHP0XhR7Vs0PZcpYm9o7ZB5uhHbqUvF\n"
        )
        known.write_text(other)
        out = cli(tmp_path / "db.duckdb", "ingest", ssh_home.url(tmp_path / "runs"), check=False)
        assert out.returncode == 1 and "host key not verified" in out.stderr
    finally:
        known.write_text(kept)
    out = cli(tmp_path / "db.duckdb", "ingest", ssh_home.url(tmp_path / "runs"), "--json")
    assert json.loads(out.stdout)["points_added"] == 4


def test_a_root_with_a_password_is_refused_without_repeating_it(tmp_path):
    out = cli(tmp_path / "db.duckdb", "ingest", "ssh://me:hunter2@127.0.0.1/runs", check=False)
    assert out.returncode == 1 and "no password in a root" in out.stderr
    assert "hunter2" not in out.stderr + out.stdout


def test_a_remote_backlog_is_read_once_through_the_bulk_path(ssh_home, tmp_path):
    run = tmp_path / "runs" / "big"
    run.mkdir(parents=True)
    append(run / "metrics.jsonl", range(1, 40_001))  # ~1.7 MB: DuckDB reads it from pieces copied over SFTP
    db = tmp_path / "db.duckdb"
    url = ssh_home.url(tmp_path / "runs")
    first = json.loads(cli(db, "ingest", url, "--json").stdout)
    assert first["runs"] == ["big"] and first["points_added"] == 40_000
    again = json.loads(cli(db, "ingest", url, "--json").stdout)
    assert again["points_added"] == 0
    runs = json.loads(cli(db, "runs", "--json").stdout)
    assert runs[0]["path"] == f"rw-test:{run}" and runs[0]["last_step"] == 40_000


def wait_steps(client, run: str, last: int, what: str) -> dict:
    def done():
        found = [r for r in client.get("/api/runs") if r["id"] == run]
        return found[0] if found and found[0]["last_step"] == last else None

    return wait_for(done, what)


def raw_steps(client, run: str) -> tuple[list[int], list[float]]:
    series = client.get(f"/api/runs/{run}/metrics", params={"metric": "train/loss", "points": 100_000})
    series = series["series"][0]
    assert not series["downsampled"]
    return series["steps"], series["values"]


def test_a_remote_root_beside_a_local_one_tails_rotation_truncation_and_checkpoints(ssh_home, tmp_path):
    remote, local = tmp_path / "remote", tmp_path / "local"
    (remote / "gpu-run").mkdir(parents=True)
    (local / "laptop-run").mkdir(parents=True)
    metrics = remote / "gpu-run" / "metrics.jsonl"
    append(metrics, range(1, 11))
    append(local / "laptop-run" / "metrics.jsonl", range(1, 4))
    daemon = Daemon(tmp_path / "db.duckdb", [ssh_home.url(remote), local]).start()
    try:
        client = daemon.client()
        health = client.get("/api/health")
        assert health["roots"] == [ssh_home.url(remote), str(local)]
        wait_for(lambda: health_state(client, ssh_home.url(remote)) == "connected", "the host connected")
        wait_steps(client, "gpu-run", 10, "the remote backlog")
        wait_steps(client, "laptop-run", 3, "the local run")
        states = {r["id"]: (r["root_state"], r["path"]) for r in client.get("/api/runs")}
        assert states == {
            "gpu-run": ("connected", f"rw-test:{remote / 'gpu-run'}"),
            "laptop-run": ("local", str(local / "laptop-run")),
        }

        # Live: lines appended (one written in two parts) arrive.
        append(metrics, range(11, 16))
        with open(metrics, "a") as f:
            f.write(verl_line(16)[:10])
            f.flush()
            wait_steps(client, "gpu-run", 15, "the appended lines")
            f.write(verl_line(16)[10:])
        wait_steps(client, "gpu-run", 16, "the line completed later")

        # Rotation: the lines written just before the rename are read from the renamed file.
        append(metrics, range(17, 19))
        metrics.rename(metrics.with_suffix(".jsonl.1"))
        append(metrics, range(19, 22))
        wait_steps(client, "gpu-run", 21, "the lines after a rotation")
        steps, _ = raw_steps(client, "gpu-run")
        assert steps == list(range(1, 22))

        # Truncation: the file starts again at step 1 with other values: they replace the earlier ones.
        metrics.write_text("")
        append(metrics, range(1, 4), value=9.0)
        wait_for(lambda: raw_steps(client, "gpu-run")[1][:3] == [9.0, 9.0, 9.0], "the rewritten steps")
        replaced = client.get("/api/runs/gpu-run/replaced", params={"metric": "train/loss"})
        assert sorted(r["step"] for r in replaced) == [1, 2, 3]

        # Checkpoints appear: one whole, one whose weights are cut short; runwatch deletes nothing.
        for step, cut in ((10, 0), (20, 3)):
            hf = remote / "gpu-run" / f"global_step_{step}" / "huggingface"
            hf.mkdir(parents=True)
            (hf / "config.json").write_text("{}")
            (hf / "tokenizer.json").write_text("{}")
            safetensors(hf / "model.safetensors", cut=cut)

        def indexed():
            advice = client.get("/api/runs/gpu-run/checkpoints")
            return advice if len(advice["checkpoints"]) == 2 else None

        advice = wait_for(indexed, "the remote checkpoints indexed")
        by_step = {c["step"]: c for c in advice["checkpoints"]}
        assert by_step[10]["path"] == f"rw-test:{remote / 'gpu-run' / 'global_step_10'}"
        assert by_step[10]["complete"] is True and by_step[20]["complete"] is False
        assert by_step[10]["bytes"] == sum(
            p.stat().st_size for p in (remote / "gpu-run" / "global_step_10").rglob("*") if p.is_file()
        )
        assert (remote / "gpu-run" / "global_step_20" / "huggingface" / "model.safetensors").exists()
    finally:
        daemon.ensure_stopped()


def health_state(client, root: str) -> str | None:
    states = client.get("/api/health")["root_states"]
    return next((s["state"] for s in states if s["root"] == root), None)


def test_the_server_killed_and_restarted_mid_tail_loses_and_repeats_nothing(ssh_home, tmp_path):
    remote = tmp_path / "remote"
    (remote / "exp").mkdir(parents=True)
    metrics = remote / "exp" / "metrics.jsonl"
    append(metrics, range(1, 6))
    daemon = Daemon(tmp_path / "db.duckdb", [ssh_home.url(remote)]).start()
    stop = threading.Event()
    written = [5]

    def writer():  # a trainer on the remote machine: 4 lines a second, through the outage
        while not stop.is_set():
            written[0] += 1
            append(metrics, [written[0]])
            time.sleep(0.25)

    thread = threading.Thread(target=writer, daemon=True)
    try:
        client = daemon.client()
        wait_steps(client, "exp", 5, "the first lines")
        thread.start()
        wait_for(lambda: client.get("/api/runs")[0]["last_step"] > 8, "live lines before the outage")
        ssh_home.stop()
        wait_for(lambda: health_state(client, ssh_home.url(remote)) == "disconnected", "the root shown down")
        run = client.get("/api/runs")[0]
        assert (run["status"], run["root_state"]) == ("unreachable", "disconnected")
        time.sleep(2)  # the trainer goes on writing while the host cannot be reached
        ssh_home.start()
        wait_for(lambda: health_state(client, ssh_home.url(remote)) == "connected", "the root back")
        stop.set()
        thread.join()
        wait_steps(client, "exp", written[0], "every line written during the outage")
        steps, values = raw_steps(client, "exp")
        assert steps == list(range(1, written[0] + 1))  # each point once
        assert values == [1.0 / s for s in steps]
        assert client.get("/api/runs/exp/replaced", params={"metric": "train/loss"}) == []
        assert client.get("/api/runs")[0]["status"] == "unknown"
    finally:
        stop.set()
        daemon.ensure_stopped()
        if ssh_home.proc is None:
            ssh_home.start()


def test_a_listing_relative_to_its_roots_names_every_path_in_full():
    from collector.ingest.ssh_target import parse_listing

    def record(kind: str, rel: str, size: int = 3) -> bytes:
        return f"{kind}\t{kind}\t{size}\t1795514821.5\t7\t9\t{rel}".encode() + b"\0"

    # find's records per root (%P: the root itself is the empty path), each root's ended by an empty record.
    body = (
        record("d", "") + record("f", "exp/metrics.jsonl", 40) + b"\0"
        + b"\0"  # a root with nothing changed
        + record("d", "") + record("f", "etc/x") + b"\0"
    )  # fmt: skip
    found = parse_listing(body, ["/runs", "/empty", "/"])
    assert sorted(found) == ["/", "/etc/x", "/runs", "/runs/exp/metrics.jsonl"]
    assert found["/runs/exp/metrics.jsonl"].st_size == 40 and found["/runs"].kind == "d"
