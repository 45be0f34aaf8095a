"""kill -9 of the real collector at random moments during ingest, several rounds, while a writer appends;
then a restart must hold exactly what the files say: nothing lost, nothing twice."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
import time

from collector.store.db import Store
from tests.collector.test_daemon_support import Daemon, wait_for
from tests.collector.test_ingest import expected_from_jsonl, same

BACKLOG_STEPS = 150_000  # ~12 MiB: several chunks through the DuckDB path while kills land
LIVE_STEPS = 6_000

WRITER = textwrap.dedent(
    """
    import json, sys, time
    path, first, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    with open(path, "a") as f:
        for step in range(first, first + count):
            f.write(json.dumps({"step": step, "data": {"train/loss": 1.0 / step, "train/lr": step * 1e-6}}) + "\\n")
            if step % 50 == 0:
                f.flush()
                time.sleep(0.01)
    """
)


def write_backlog(path, steps: int) -> None:
    with path.open("w") as f:
        for step in range(1, steps + 1):
            f.write(
                json.dumps({"step": step, "data": {"train/loss": 1.0 / step, "train/lr": step * 1e-6}}) + "\n"
            )


def _offset(db, path) -> str:
    """The stored offset of `path` after a kill, opening the database as the next collector would."""
    if not db.exists():
        return "before the database existed"
    store = Store(db)
    try:
        rows = store.rows("SELECT byte_offset FROM sources WHERE path = ?", [str(path)])
    finally:
        store.close()
    return f"{rows[0][0] if rows else 0}/{path.stat().st_size} bytes"


def test_kill_9_at_random_moments_then_restart_loses_and_repeats_nothing(tmp_path):
    rng = random.Random(20261122)
    root = tmp_path / "root"
    run_dir = root / "killed"
    run_dir.mkdir(parents=True)
    f = run_dir / "metrics.jsonl"
    write_backlog(f, BACKLOG_STEPS)
    # A second run whose file is appended to by another process the whole time.
    (root / "live").mkdir()
    live = root / "live" / "metrics.jsonl"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(live), "1", str(LIVE_STEPS)])
    db = tmp_path / "rw.duckdb"
    daemon = Daemon(db, [root])
    progress: list[str] = []  # how far each killed life got (printed: where the kills landed)
    try:
        for _ in range(6):
            daemon.start(wait=rng.random() < 0.5)  # sometimes killed before it is even listening
            time.sleep(rng.uniform(0.2, 2.5))
            daemon.kill9()
            progress.append(_offset(db, f))
        writer.wait(timeout=300)
        daemon.start()
        for path, run in ((f, "killed"), (live, "live")):
            n_lines = len(path.read_bytes().splitlines())
            wait_for(
                lambda run=run, n=n_lines: (
                    daemon.client().get("/api/runs/" + run)["sources"][0]["lines"] >= n
                    if any(r["id"] == run for r in daemon.client().get("/api/runs"))
                    else False
                ),
                f"{run}: every line ingested",
            )
        assert daemon.stop() == 0
    finally:
        daemon.ensure_stopped()
        if writer.poll() is None:
            writer.kill()
    assert len(progress) == 6
    print("killed at:", ", ".join(progress))

    store = Store(db)
    try:
        for path, run in ((f, "killed"), (live, "live")):
            want = expected_from_jsonl(path)
            rows = store.rows("SELECT metric, step, value FROM points WHERE run_id = ?", [run])
            got = {(m, s): v for m, s, v in rows}
            assert len(rows) == len(got), f"{run}: a (metric, step) is stored twice"
            assert same(got, want), f"{run}: stored points differ from the file"
            ((offset, lines, segment),) = store.rows(
                "SELECT byte_offset, lines, segment FROM sources WHERE run_id = ?", [run]
            )
            # Offsets and rows commit together: the offset is the file's end and the line count the file's,
            # never more (rows re-read after a crash) nor less.
            assert (offset, lines, segment) == (path.stat().st_size, len(path.read_bytes().splitlines()), 0)
        assert store.rows("SELECT count(*) FROM points_replaced")[0][0] == 0
        assert store.rows("SELECT count(*) FROM quarantine")[0][0] == 0
    finally:
        store.close()
