"""Files the collector writes beside the database are its owner's only, whatever the umask it was started with."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_ingest_under_a_loose_umask_writes_private_files(tmp_path: Path):
    run = tmp_path / "runs" / "exp"
    run.mkdir(parents=True)
    lines = [{"step": s, "data": {"train/loss": 2.0 / s}} for s in range(1, 50)]
    lines.append({"step": 50, "data": {"train/loss": None}})  # a NaN: the alert log gets a line
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    db = tmp_path / "state" / "rw.duckdb"
    db.parent.mkdir()
    token = Path(f"{db}.token")
    token.write_text("an-old-token\n")
    token.chmod(0o644)  # left readable by an older version or a user's copy
    loose = "umask 022; exec " + " ".join(
        [sys.executable, "-m", "collector", "ingest", "--db", str(db), str(run)]
    )
    out = subprocess.run(["sh", "-c", loose], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    written = [p for p in db.parent.iterdir()]
    assert db in written and Path(f"{db}.alerts.jsonl") in written, written
    for path in written:
        expected = 0o700 if path.is_dir() else 0o600
        assert mode(path) == expected, f"{path.name} is {oct(mode(path))}"
        for child in path.rglob("*") if path.is_dir() else ():
            assert mode(child) & 0o077 == 0, f"{child} is {oct(mode(child))}"
    assert os.stat(token).st_mode & 0o077 == 0
