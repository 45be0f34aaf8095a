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
CSV_STEPS = 400_000

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


def expected_from_csv(path) -> dict[tuple[str, int], float]:
    """What a plain CSV history says (header line 1, every cell a number or empty), read with the stdlib."""
    import csv

    with path.open(newline="") as f:
        rows = csv.reader(f)
        names = next(rows)
        return {(n, int(r[0])): float(c) for r in rows for n, c in zip(names[1:], r[1:], strict=True) if c}


def test_kill_9_during_a_csv_backlog_then_restart_loses_and_repeats_nothing(tmp_path):
    rng = random.Random(20261124)
    run_dir = tmp_path / "root" / "csv"
    run_dir.mkdir(parents=True)
    f = run_dir / "training_history.csv"
    with f.open("w") as out:  # ~24 MiB: many 64 MiB-or-less chunks through DuckDB's reader while kills land
        out.write("step,train/loss,train/lr,grad_norm,val/loss\n")
        for step in range(1, CSV_STEPS + 1):
            val = repr(2.0 / step) if step % 100 == 0 else ""
            out.write(f"{step},{1.0 / step!r},{step * 1e-6!r},{1 + (step % 7) / 10},{val}\n")
    db = tmp_path / "rw.duckdb"
    daemon = Daemon(db, [tmp_path / "root"])
    progress: list[str] = []
    try:
        for _ in range(6):
            daemon.start(wait=rng.random() < 0.5)
            time.sleep(rng.uniform(0.3, 3.0))
            daemon.kill9()
            progress.append(_offset(db, f))
        daemon.start()
        n_lines = CSV_STEPS + 1
        wait_for(
            lambda: (
                daemon.client().get("/api/runs/csv")["sources"][0]["lines"] >= n_lines
                if any(r["id"] == "csv" for r in daemon.client().get("/api/runs"))
                else False
            ),
            "csv: every line ingested",
        )
        assert daemon.stop() == 0
    finally:
        daemon.ensure_stopped()
    print("killed at:", ", ".join(progress))
    store = Store(db)
    try:
        rows = store.rows("SELECT metric, step, value FROM points WHERE run_id = 'csv'")
        got = {(m, s): v for m, s, v in rows}
        assert len(rows) == len(got), "a (metric, step) is stored twice"
        assert same(got, expected_from_csv(f)), "stored points differ from the file"
        assert store.rows("SELECT byte_offset, lines, segment FROM sources") == [
            (f.stat().st_size, n_lines, 0)
        ]
        assert store.rows("SELECT count(*) FROM points_replaced")[0][0] == 0
        assert store.rows("SELECT count(*) FROM quarantine")[0][0] == 0
        stats = store.rows("SELECT metric, points FROM metric_stats WHERE run_id = 'csv' ORDER BY metric")
        assert stats == sorted((m, sum(1 for k in got if k[0] == m)) for m in {k[0] for k in got})
    finally:
        store.close()
