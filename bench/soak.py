"""Soak: kill -9 the collector again and again while writers append and rotate; compare every point.

M writer processes each append verl lines to their run's `metrics.jsonl` at a steady rate; along the way each
rotates its file once (`metrics.jsonl` -> `metrics.jsonl.1`, then a new `metrics.jsonl`; the lines written
just before the rename may not have been read yet, and the collector may be dead at that moment). (A file
truncated while the collector is dead loses its unread lines for anyone; truncation is tested in the suite.)
Meanwhile a real `python -m collector serve` is killed with SIGKILL N times at random moments (after
0.2-3 s of life, sometimes before it listens), and every few kills, while it is down, the whole root is
renamed away and back. Each writer keeps its ground truth (every line it wrote) outside the root.

At the end the collector runs once more until every line is in, is stopped, and the database is compared with
the ground truth point by point: lost (written, not stored), extra (stored, never written), changed (another
value), and re-read (values stored twice over, kept in `points_replaced`: work done again, not data lost).

    .venv/bin/python bench/soak.py [--kills 30] [--writers 6] [--rate 200] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen  # noqa: E402
import harness  # noqa: E402

NAME = "soak"
WRITER = textwrap.dedent(
    """
    import json, os, random, sys, time
    run, truth, lines, rate, seed = sys.argv[1:6]
    lines, rate, seed = int(lines), float(rate), int(seed)
    rotate_at = random.Random(seed).randrange(lines // 4, 3 * lines // 4)
    path = os.path.join(run, "metrics.jsonl")
    f, t = open(path, "a"), open(truth, "a")
    for i in range(1, lines + 1):
        step = i
        line = json.dumps({"step": step, "data": {"train/loss": 1.0 / step + seed, "train/lr": step * 1e-6}})
        f.write(line + "\\n"); f.flush()
        t.write(line + "\\n"); t.flush()
        if i == rotate_at:
            f.close(); os.replace(path, path + ".1"); f = open(path, "a")
        time.sleep(1.0 / rate)
    """
)


def truth_of(path: Path) -> dict[tuple[str, int], float]:
    points: dict[tuple[str, int], float] = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        for metric, value in record["data"].items():
            points[(metric, record["step"])] = value
    return points


def kill9(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=30)
    ap.add_argument("--writers", type=int, default=6)
    ap.add_argument("--lines", type=int, default=6000, help="lines per writer")
    ap.add_argument("--rate", type=float, default=200.0, help="lines per second per writer")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="runwatch-soak-"))
    root, moved, truths = work / "root", work / "root-away", work / "truth"
    truths.mkdir()
    db = work / "rw.duckdb"
    writers = []
    for w in range(args.writers):
        (root / f"run{w}").mkdir(parents=True)
        cmd = [sys.executable, "-c", WRITER, str(root / f"run{w}"), str(truths / f"run{w}.jsonl")]
        writers.append(subprocess.Popen([*cmd, str(args.lines), str(args.rate), str(w)]))
    serve = harness.collector_cmd("serve", "--db", str(db), str(root), "--port", "0")
    renames = 0
    started = time.monotonic()
    for k in range(args.kills):
        with open(work / "collector.log", "ab") as log:
            proc = subprocess.Popen(serve, cwd=gen.REPO, stdout=log, stderr=subprocess.STDOUT)
        time.sleep(rng.uniform(0.2, 3.0))
        kill9(proc)
        if k % 5 == 4:
            # While the collector is down the root goes away and comes back (a remount, a mv and mv back).
            os.replace(root, moved)
            time.sleep(0.05)
            os.replace(moved, root)
            renames += 1
    for w in writers:
        w.wait()
    with harness.Daemon(db, [root]) as daemon:
        want_lines = {
            f"run{w}": len((root / f"run{w}" / "metrics.jsonl").read_bytes().splitlines())
            for w in range(args.writers)
        }
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            runs = {r["id"]: r for r in daemon.get("/api/runs")}
            if all(runs.get(r, {}).get("last_step") == args.lines for r in want_lines):
                break
            time.sleep(0.5)
        harness.wait_idle(daemon.proc.pid, cap_s=120)
    sys.path.insert(0, str(gen.REPO))
    from collector.store.db import Store  # after the daemon let go of the file

    store = Store(db)
    try:
        rows_by_run = {}
        for w in range(args.writers):
            run = f"run{w}"
            rows = store.rows("SELECT metric, step, value FROM points WHERE run_id = ?", [run])
            rows_by_run[run] = rows
        replaced = store.rows("SELECT count(*) FROM points_replaced")[0][0]
        quarantined = store.rows("SELECT count(*) FROM quarantine")[0][0]
    finally:
        store.close()
    lost = extra = changed = written = twice = 0
    for w in range(args.writers):
        run = f"run{w}"
        want = truth_of(truths / f"{run}.jsonl")
        rows = rows_by_run[run]
        got = {(m, s): v for m, s, v in rows}
        twice += len(rows) - len(got)
        written += len(want)
        lost += len(want.keys() - got.keys())
        extra += len(got.keys() - want.keys())
        changed += sum(
            1 for key in want.keys() & got.keys() if abs(got[key] - want[key]) > 1e-12 * abs(want[key])
        )
    result = {
        "kills": args.kills,
        "root_renames": renames,
        "writers": args.writers,
        "rotations": args.writers,
        "points_written": written,
        "lost": lost,
        "extra": extra,
        "changed": changed,
        "stored_twice": twice,
        "re_read_values": replaced,
        "quarantined_lines": quarantined,
        "seconds": round(time.monotonic() - started, 1),
    }
    print("| figure | value |\n|---|---|")
    for key, value in result.items():
        print(f"| {key} | {value} |")
    return result


if __name__ == "__main__":
    main()
