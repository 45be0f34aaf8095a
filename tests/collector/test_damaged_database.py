"""A damaged database file (garbage, empty, cut in half, bytes flipped) is told as damage, not as a busy file
or a raw traceback (issue 24.5): `runs`, `ingest` and `serve` as real subprocesses each print one message
naming the file, what is wrong and what to do, exit 1, and leave the file as it was."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.collector.test_daemon_support import REPO, cli


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> tuple[Path, Path]:
    """A database holding one run (and the runs' root), to damage copies of."""
    base = tmp_path_factory.mktemp("damaged")
    root = base / "runs"
    (root / "a").mkdir(parents=True)
    (root / "a" / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "data": {"train/loss": 1 / s}}) + "\n" for s in range(1, 200))
    )
    db = base / "good.duckdb"
    cli(db, "ingest", str(root))
    return db, root


def damage(good: Path, kind: str, into: Path) -> Path:
    data = good.read_bytes()
    if kind == "garbage":
        data = os.urandom(5000)
    elif kind == "empty":
        data = b""
    elif kind == "half":
        data = data[: len(data) // 2]
    elif kind == "flipped":  # one byte in every KB from the first block on: its checksum fails
        raw = bytearray(data)
        for at in range(4096, len(raw), 1024):
            raw[at] ^= 0xFF
        data = bytes(raw)
    path = into / f"{kind}.duckdb"
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("kind", ["garbage", "empty", "half", "flipped"])
@pytest.mark.parametrize("command", ["runs", "ingest", "serve"])
def test_a_damaged_database_is_told_plainly_and_left_as_it_was(good, tmp_path, kind, command):
    db = damage(good[0], kind, tmp_path)
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    args = {"runs": [], "ingest": [str(good[1])], "serve": [str(good[1]), "--port", "0"]}[command]
    out = subprocess.run(
        [sys.executable, "-m", "collector", command, "--db", str(db), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1, (out.stdout, out.stderr)
    message = out.stderr.strip()
    assert "Traceback" not in message and len(message.splitlines()) == 1, message
    assert f"the database {db} is damaged" in message
    assert {"empty": "empty (0 bytes)", "garbage": "not a DuckDB database file", "half": "cut short"}.get(
        kind, "corrupt"
    ) in message
    assert "Restore it from a backup" in message and "ingest the runs again" in message
    assert "another process" not in message
    assert out.stdout == ""
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    assert not Path(f"{db}.wal").exists()
