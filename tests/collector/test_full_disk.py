"""A full disk is said, not hidden (issue 24.6): with the database on a small tmpfs filled up, a real daemon's
`/api/health` turns `ok: false` with `ingest.state` "stalled" and why, `collector runs` warns, and the
dashboard shows a banner; once space is freed, ingest goes on from where it was and health is ok again.

Needs a tmpfs of its own (mounting one needs root): the disk really fills, DuckDB really gets ENOSPC."""

from __future__ import annotations

import contextlib
import errno
import json
import subprocess
from pathlib import Path

import pytest

from tests.collector.test_daemon_support import REPO, Daemon, cli, wait_for


@pytest.fixture
def small_disk(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill (needs root): {mounted.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path) -> Path:
    """Write a file until the disk is full; the file (delete it to free the space)."""
    filler = disk / "filler"
    chunk = b"\0" * (1 << 20)
    with open(filler, "wb", buffering=0) as f:
        with contextlib.suppress(OSError):
            while True:
                f.write(chunk)
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 4096)
    with pytest.raises(OSError) as full:
        (disk / "probe").write_bytes(b"\0" * 4096)
    assert full.value.errno == errno.ENOSPC
    return filler


def lines(first: int, last: int) -> str:
    return "".join(
        json.dumps({"step": s, "data": {"train/loss": 2 - s / 1e6, "train/grad_norm": 1 + s % 7}}) + "\n"
        for s in range(first, last + 1)
    )


def test_a_full_disk_stalls_ingest_visibly_and_it_resumes_once_freed(small_disk, tmp_path, monkeypatch):
    root = tmp_path / "runs"
    (root / "a").mkdir(parents=True)
    metrics = root / "a" / "metrics.jsonl"
    metrics.write_text(lines(1, 100))
    db = small_disk / "rw.duckdb"
    d = Daemon(db, [root])
    d.log = tmp_path / "collector.log"  # (not on the disk that fills)
    d.start()
    try:
        client = d.client()
        wait_for(lambda: [r for r in client.get("/api/runs") if r["last_step"] == 100], "the first lines")
        assert client.get("/api/health")["ingest"] == {"state": "ok"}

        filler = fill(small_disk)
        with metrics.open("a") as f:
            f.write(lines(101, 60_000))  # ~4 MB to store: more than the full disk takes
        health = wait_for(
            lambda: (h := client.get("/api/health"))["ingest"]["state"] == "stalled" and h,
            "health to say stalled",
        )
        assert health["ok"] is False and health["ingest"]["reason"] == "disk_full"
        assert (
            "No space left on device" in health["ingest"]["error"] and str(db) in health["ingest"]["message"]
        )
        runs = cli(db, "runs")
        assert "warning: ingest is stalled: the disk holding" in runs.stderr and "Free space" in runs.stderr
        assert json.loads(cli(db, "runs", "--json").stdout)[0]["id"] == "a"  # --json stays the list

        monkeypatch.setenv("RUNWATCH_DB", str(db))
        monkeypatch.setenv("RUNWATCH_ROOTS", str(root))
        monkeypatch.chdir(REPO)
        from streamlit.testing.v1 import AppTest

        at = AppTest.from_file(str(REPO / "app" / "streamlit_app.py"), default_timeout=120).run()
        assert not at.exception, [e.value for e in at.exception]
        assert any("ingest is stalled" in e.value and "is full" in e.value for e in at.error), [
            e.value for e in at.error
        ]

        filler.unlink()
        wait_for(lambda: client.get("/api/runs")[0]["last_step"] == 60_000, "ingest to resume", timeout=300)
        wait_for(lambda: client.get("/api/health")["ok"], "health to be ok again")
        assert client.get("/api/health")["ingest"] == {"state": "ok"}
        assert "Traceback" not in d.log.read_text()  # a full disk is said in one line a retry, not a trace
        assert d.stop() == 0
    finally:
        d.ensure_stopped()
        print(d.log.read_text()[-5000:])
