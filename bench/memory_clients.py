"""Collector memory while dashboards poll: peak RSS of `python -m collector serve` backfilling a 1M-step
history while N dashboard-like clients poll the API, against the same backfill with no client.

Each client loops: `GET /api/runs`, then for every run listed its run page and a 2,000-point chart of
`train/loss` (what the app asks for on a run page), until the backfill is stored and 20 s after (judging the
backlog runs then). Peak RSS is the kernel's high-water mark of the daemon (`VmHWM` in /proc), read at the end.

`--runs N` backfills N copies of the history at once (N run folders in one root).

    .venv/bin/python bench/memory_clients.py [--steps 1000000] [--clients 20] [--format jsonl|csv] [--runs 1]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import threading
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen  # noqa: E402
import harness  # noqa: E402
from backfill import remove_db  # noqa: E402
from backfill_csv import csv_root  # noqa: E402

NAME = "memory_clients"
AFTER_S = 20.0


def peak_rss_mb(pid: int) -> tuple[float, float]:
    """(VmHWM, VmRSS) of a live process in MB."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
    )
    return int(fields["VmHWM"].split()[0]) / 1024, int(fields["VmRSS"].split()[0]) / 1024


def one(root: Path, steps: int, clients: int) -> dict:
    db = gen.OUT / "work" / NAME / "rw.duckdb"
    db.parent.mkdir(parents=True, exist_ok=True)
    remove_db(db)
    requests, errors = [0], []
    stop = threading.Event()
    with harness.Daemon(db, [root]) as d:
        t0 = time.monotonic()

        def client() -> None:
            while not stop.is_set():
                try:
                    for run in d.get("/api/runs"):
                        rid = urllib.parse.quote(run["id"], safe="")
                        d.get(f"/api/runs/{rid}")
                        d.get(f"/api/runs/{rid}/metrics", {"metric": "train/loss", "points": 2000})
                        requests[0] += 3
                    requests[0] += 1
                except Exception as e:  # noqa: BLE001 (counted and reported)
                    errors.append(repr(e))
                    time.sleep(0.2)

        threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
        for t in threads:
            t.start()
        stored_at = None
        while time.monotonic() - t0 < 900:
            runs = d.get("/api/runs")
            if runs and all(r.get("last_step") == steps for r in runs) and stored_at is None:
                stored_at = time.monotonic() - t0
            if stored_at is not None and time.monotonic() - t0 > stored_at + AFTER_S:
                break
            time.sleep(0.5)
        hwm, rss = peak_rss_mb(d.proc.pid)
        stop.set()
        for t in threads:
            t.join(60)
    return {
        "clients": clients,
        "stored_s": stored_at,
        "peak_rss_mb": hwm,
        "rss_end_mb": rss,
        "requests": requests[0],
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
    }


def copies(root: Path, runs: int) -> Path:
    """A root holding `runs` copies of the one run folder under `root` (made once)."""
    if runs == 1:
        return root
    many = root.with_name(f"{root.name}-x{runs}")
    for i in range(runs):
        dest = many / f"{gen.RUN_NAME}-{i}"
        if not dest.exists():
            shutil.copytree(root / gen.RUN_NAME, dest)
    return many


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--format", choices=("jsonl", "csv"), default="jsonl")
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args()
    h = gen.history(args.steps)
    root = copies(gen.verl_root(h) if args.format == "jsonl" else csv_root(h), args.runs)
    rows, result = [], {"steps": args.steps, "format": args.format, "runs": args.runs}
    for clients in (0, args.clients):
        r = one(root, args.steps, clients)
        result[f"clients_{clients}"] = r
        rows.append([clients, r["stored_s"], r["peak_rss_mb"], r["rss_end_mb"], r["requests"], r["errors"]])
    gen.print_table(
        f"collector serve, {args.runs} x {args.format} backfill of {args.steps:,} steps",
        ["clients", "stored after s", "peak RSS MB", "RSS at end MB", "requests", "errors"],
        rows,
    )
    gen.write_json(f"{NAME}_{args.format}_x{args.runs}", result)


if __name__ == "__main__":
    main()
