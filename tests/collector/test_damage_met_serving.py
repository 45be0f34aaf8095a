"""Damage first met while serving (a part of the database not read at start-up) is told as the CLI tells it
at start-up, against a real collector process: `serve` stops with one message naming the file, what is wrong
and what to do (exit 1, no traceback, no cycle retried for ever); `ingest` on a damaged file says the same
and leaves no empty alert log beside it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from collector.api.client import ApiError
from collector.core.runtime import marker_path
from collector.store.damage import HEADER_BYTES
from tests.collector.test_daemon_support import REPO, Daemon, cli
from tests.waiting import DEADLINE_S

STEPS = 5000


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> tuple[Path, Path]:
    """A database of two runs (20 metrics x 5,000 steps each: the points fill blocks far past the catalog)."""
    base = tmp_path_factory.mktemp("damage-met")
    root = base / "runs"
    for name in ("a", "b"):
        (root / name).mkdir(parents=True)
        lines = (
            json.dumps({"step": s, "data": {f"m{k}": (s * k % 97) / 7 for k in range(20)}})
            for s in range(1, STEPS + 1)
        )
        (root / name / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    db = base / "good.duckdb"
    cli(db, "ingest", str(root))
    return db, root


def damaged_copy(good: Path, into: Path) -> Path:
    """The database with one byte in every KB of the blocks holding stored points flipped (DuckDB's
    storage_info names them): the header and the catalog read at start-up are intact, the points are not."""
    with duckdb.connect(str(good), read_only=True) as con:
        (block_size,) = con.execute("SELECT block_size FROM pragma_database_size()").fetchone()
        blocks = con.execute(
            "SELECT DISTINCT block_id FROM pragma_storage_info('point_rows') WHERE block_id >= 0"
        ).fetchall()
    assert blocks, "the points fill no block of their own"
    raw = bytearray(good.read_bytes())
    for (block,) in blocks:
        start = HEADER_BYTES + block * block_size
        for at in range(start + 64, start + block_size, 1024):
            raw[at] ^= 0xFF
    db = into / "damaged.duckdb"
    db.write_bytes(bytes(raw))
    return db


def test_serve_stops_saying_the_damage_it_meets_after_start_up(good, tmp_path):
    db = damaged_copy(good[0], tmp_path)
    with open(good[1] / "a" / "metrics.jsonl", "a") as f:  # something new to store: ingest writes on
        f.write(json.dumps({"step": STEPS + 1, "data": {"m1": 0.5}}) + "\n")
    daemon = Daemon(db, [good[1]]).start(wait=False)
    try:
        code = daemon.proc.wait(timeout=DEADLINE_S)
    finally:
        daemon.ensure_stopped()
    log = daemon.log.read_text()
    assert code == 1, log[-3000:]
    assert "serving" in log, log[-3000:]  # started: the damage was met later, not at start-up
    assert "Traceback" not in log and "failed; retrying" not in log, log[-3000:]
    told = [line for line in log.splitlines() if "is damaged" in line]
    assert len(told) == 1, log[-3000:]
    assert told[0].startswith(f"collector serve: the database {db} is damaged: its contents are corrupt")
    assert "The collector stopped" in told[0] and "Restore it from a backup" in told[0]
    assert "ingest the runs again" in told[0]
    assert not marker_path(db).exists()


def test_ingest_on_a_damaged_database_writes_nothing_beside_it(good, tmp_path):
    db = damaged_copy(good[0], tmp_path)
    with open(good[1] / "b" / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": STEPS + 1, "data": {"m2": 0.5}}) + "\n")
    out = subprocess.run(
        [sys.executable, "-m", "collector", "ingest", "--db", str(db), str(good[1])],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert out.returncode == 1, (out.stdout, out.stderr)
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith(f"collector ingest: the database {db} is damaged: its contents are corrupt"), line
    assert "Transaction" not in line and "Restore it from a backup" in line
    assert "The ingest stopped; runs it stored before stay" in line and "Nothing was changed" not in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["damaged.duckdb"]  # no alert log, WAL, token


def test_a_route_that_meets_damage_says_it_and_the_collector_answers_on(tmp_path):
    root, good = tmp_path / "runs", tmp_path / "good.duckdb"
    run = root / "r"
    run.mkdir(parents=True)
    for scale in (1, 2):  # the file rewritten in place: every earlier value moves to points_replaced
        lines = (
            json.dumps({"step": s, "data": {f"m{k}": scale * s + k for k in range(10)}})
            for s in range(1, 20001)
        )
        (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
        cli(good, "ingest", str(root))
    with duckdb.connect(str(good), read_only=True) as con:
        (block_size,) = con.execute("SELECT block_size FROM pragma_database_size()").fetchone()
        tables = [t for (t,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
        blocks_of = "SELECT block_id FROM pragma_storage_info(?) WHERE block_id >= 0"
        used = {t: {b for (b,) in con.execute(blocks_of, [t]).fetchall()} for t in tables}
    own = used["points_replaced"] - set().union(*(b for t, b in used.items() if t != "points_replaced"))
    assert own, used
    raw = bytearray(good.read_bytes())
    for block in own:  # only the older lives are damaged: the collector starts and ingests on
        start = HEADER_BYTES + block * block_size
        for at in range(start + 64, start + block_size, 1024):
            raw[at] ^= 0xFF
    db = tmp_path / "damaged.duckdb"
    db.write_bytes(bytes(raw))
    daemon = Daemon(db, [root]).start()
    try:
        client = daemon.client()
        with pytest.raises(ApiError) as told:
            client.get("/api/runs/r/replaced", params={"metric": "m1"})
        assert told.value.status == 500
        detail = str(told.value)
        assert f"the database {db} is damaged: its contents are corrupt" in detail, detail
        assert "This request changed nothing" in detail and "Restore it from a backup" in detail
        assert client.get("/api/health")["ok"] is True  # the rest of the database still answers
        assert daemon.stop() == 0
    finally:
        daemon.ensure_stopped()
    assert "Traceback" not in daemon.log.read_text()
