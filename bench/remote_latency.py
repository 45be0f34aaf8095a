"""Remote roots over SSH: live latency, cost per line, and the first backfill against scp.

A real OpenSSH server on 127.0.0.1 (Debian's sshd, throwaway keys, `tests/sshd_support.py`) serves a root of
20 run folders; a real collector daemon watches it as `ssh://rw-test/ROOT` while one writer appends verl lines
round-robin, 2 lines/s per run. Sampled lines are followed until the API returns them (the method of
bench/live_latency.py): p50/p95 from write to API. Also: the daemon's CPU, and the bytes it moved over the
link per new line (file bytes read over SFTP plus listing output, from `/api/health`), against the bytes
written: close to 1x means no file is read again from its start.

Then the first backfill of a 1M-step verl history (bench/gen.py): `python -m collector ingest` of the
remote root, against `scp` of the same file plus our ingest of the copy (target: within 1.5x).

    .venv/bin/python bench/remote_latency.py [--runs 20] [--rate 2] [--seconds 60] [--backfill-steps 1000000]
        [--rounds 3]   # the backfill measured 3 times, scp and ours alternating (the spread under load)
    .venv/bin/python bench/remote_latency.py --seconds 0 --rounds 5   # the backfill only
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen  # noqa: E402
import harness  # noqa: E402
import live_latency  # noqa: E402

sys.path.insert(0, str(gen.REPO))
from tests.sshd_support import SshServer, sshd_missing  # noqa: E402

NAME = "remote_latency"
TARGET_P95_MS = 1500.0
TARGET_BACKFILL_RATIO = 1.5


def link_bytes(d: harness.Daemon, root: str) -> tuple[int, int]:
    state = next(s for s in d.get("/api/health")["root_states"] if s["root"] == root)
    return state["read_bytes"], state["listing_bytes"]


def live(server: SshServer, work: Path, args: argparse.Namespace) -> dict:
    root, db = work / "root", work / "remote.duckdb"
    first = 5
    files = live_latency.make_root(root, args.runs, first)
    url = server.url(root)
    total_rate = args.runs * args.rate
    lines = int(args.seconds * total_rate)
    print(
        f"{args.runs} remote runs, {args.rate} lines/s each, {lines:,} lines ({args.seconds:.0f} s)",
        flush=True,
    )
    with harness.Daemon(db, [url]) as d:
        live_latency.wait_for_runs(d, args.runs, first)
        results: list = []
        probers: list[threading.Thread] = []

        def on_sample(run: str, step: int, t_write: float) -> None:
            t = threading.Thread(
                target=live_latency.probe, args=(d, run, step, t_write, results, args.poll_ms / 1000)
            )
            t.start()
            probers.append(t)

        written0 = sum(p.stat().st_size for p in files)
        read0, listed0 = link_bytes(d, url)
        cpu0, wall0 = harness.cpu_seconds(d.proc.pid), time.perf_counter()
        try:
            warmup = int(args.warmup_s * total_rate)
            lag = live_latency.write_steadily(
                files, lines, total_rate, first, args.sample_every, on_sample, warmup
            )
        finally:
            for t in probers:
                t.join()
        live_latency.wait_for_runs(d, args.runs, first + lines // args.runs)  # every line read
        cpu = (harness.cpu_seconds(d.proc.pid) - cpu0) / (time.perf_counter() - wall0)
        read1, listed1 = link_bytes(d, url)
    written = sum(p.stat().st_size for p in files) - written0
    lat = [r["latency_s"] * 1000 for r in results if r["latency_s"] is not None]
    errors = [r["error"] for r in results if r["error"]]
    res = {
        "runs": args.runs,
        "lines": lines,
        "samples": len(results),
        "missed": len(errors),
        "errors": errors[:10],
        "p50_ms": gen.percentile(lat, 50),
        "p95_ms": gen.percentile(lat, 95),
        "max_ms": max(lat) if lat else float("nan"),
        "daemon_cpu_cores": cpu,
        "writer_max_lag_s": lag,
        "bytes_written_per_line": written / lines,
        "read_bytes_per_line": (read1 - read0) / lines,
        "listing_bytes_per_line": (listed1 - listed0) / lines,
        "read_over_written": (read1 - read0) / max(1, written),
        "target_p95_ms": TARGET_P95_MS,
    }
    res["met"] = bool(lat) and not errors and res["p95_ms"] < TARGET_P95_MS and res["read_over_written"] < 1.5
    return res


def backfill(server: SshServer, work: Path, steps: int) -> dict:
    h = gen.history(steps)
    root = gen.verl_root(h)
    src = gen.verl_file(h)
    size = src.stat().st_size
    print(f"backfill of {steps:,} steps ({size / 1e6:.0f} MB)", flush=True)
    remote_db, local_db = work / "backfill-remote.duckdb", work / "backfill-local.duckdb"
    for p in [*work.glob("backfill-*.duckdb*")]:
        p.unlink() if p.is_file() else shutil.rmtree(p)
    ours = harness.measured_run(
        harness.collector_cmd("ingest", "--db", str(remote_db), server.url(root), "--json")
    )
    if ours.rc != 0:
        raise RuntimeError(f"remote ingest failed: {ours.output[-2000:]}")
    copy_root = work / "copied"
    shutil.rmtree(copy_root, ignore_errors=True)
    (copy_root / src.parent.name).mkdir(parents=True)
    ssh_options = [
        "-F",
        str(server.home / ".ssh" / "config"),
        "-o",
        f"UserKnownHostsFile={server.home / '.ssh' / 'known_hosts'}",
    ]
    t0 = time.perf_counter()
    subprocess.run(
        ["scp", "-q", *ssh_options, f"rw-test:{src}", str(copy_root / src.parent.name / src.name)], check=True
    )
    scp_s = time.perf_counter() - t0
    local = harness.measured_run(
        harness.collector_cmd("ingest", "--db", str(local_db), str(copy_root), "--json")
    )
    if local.rc != 0:
        raise RuntimeError(f"local ingest failed: {local.output[-2000:]}")
    res = {
        "steps": steps,
        "bytes": size,
        "ours_remote_s": ours.wall_s,
        "ours_remote_peak_rss_mb": ours.peak_rss_mb,
        "scp_s": scp_s,
        "ours_local_s": local.wall_s,
        "yardstick_s": scp_s + local.wall_s,
        "points_remote": harness.collector_json("runs", "--db", str(remote_db))[0]["last_step"],
    }
    res["ratio"] = res["ours_remote_s"] / res["yardstick_s"]
    res["load"] = round(os.getloadavg()[0], 2)
    res["met"] = res["ratio"] <= TARGET_BACKFILL_RATIO and res["points_remote"] == steps
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--rate", type=float, default=2.0, help="lines per second per run")
    ap.add_argument(
        "--seconds", type=float, default=60.0, help="how long the writer writes (0: no live part)"
    )
    ap.add_argument("--sample-every", type=int, default=7, help="follow every N-th line")
    ap.add_argument("--poll-ms", type=float, default=20.0)
    ap.add_argument("--warmup-s", type=float, default=5.0)
    ap.add_argument("--backfill-steps", type=int, default=1_000_000, help="0 skips the backfill")
    ap.add_argument("--rounds", type=int, default=1, help="backfill measurements (each: ours, scp, local)")
    args = ap.parse_args()
    missing = sshd_missing()
    if missing:
        raise SystemExit(missing)

    work = gen.OUT / "remote"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    server = SshServer(Path(tempfile.mkdtemp(prefix="bench-sshd-"))).start()
    os.environ.update(server.env())  # the daemon and scp use the test's ~/.ssh, no agent
    res: dict = {}
    try:
        if args.seconds > 0:
            res["live"] = live(server, work, args)
        if args.backfill_steps:
            rounds = [backfill(server, work, args.backfill_steps) for _ in range(args.rounds)]
            res["backfill_rounds"] = rounds
            res["backfill"] = sorted(rounds, key=lambda r: r["ratio"])[(len(rounds) - 1) // 2]  # the median
    finally:
        server.stop()
        shutil.rmtree(server.base, ignore_errors=True)

    lv = res.get("live")
    if lv is not None:
        gen.print_table(
            f"Remote write-to-API latency over SSH, {lv['runs']} runs, {lv['samples']} samples",
            [
                "p50 ms",
                "p95 ms",
                "max ms",
                "missed",
                "daemon CPU (cores)",
                "B written/line",
                "B read/line",
                "B listing/line",
                "target",
            ],
            [
                [
                    lv["p50_ms"],
                    lv["p95_ms"],
                    lv["max_ms"],
                    lv["missed"],
                    round(lv["daemon_cpu_cores"], 3),
                    round(lv["bytes_written_per_line"]),
                    round(lv["read_bytes_per_line"]),
                    round(lv["listing_bytes_per_line"]),
                    f"p95 < {TARGET_P95_MS:.0f} ms, read < 1.5x written: {'met' if lv['met'] else 'NOT met'}",
                ]
            ],
        )
        for e in lv["errors"]:
            print(f"missed: {e}")
    if "backfill" in res:
        bf = res["backfill"]
        gen.print_table(
            f"First backfill of {bf['steps']:,} steps ({bf['bytes'] / 1e6:.0f} MB) from the remote root"
            f" ({len(res['backfill_rounds'])} rounds; the median last)",
            ["ours over ssh s", "scp s", "ours local s", "scp + local s", "ratio", "load (1 min)", "target"],
            [
                [
                    r["ours_remote_s"],
                    r["scp_s"],
                    r["ours_local_s"],
                    r["yardstick_s"],
                    round(r["ratio"], 2),
                    r["load"],
                    f"<= {TARGET_BACKFILL_RATIO}x: {'met' if r['met'] else 'NOT met'}",
                ]
                for r in [*res["backfill_rounds"], bf]
            ],
        )
    print(f"wrote {gen.write_json(NAME, res)}")


if __name__ == "__main__":
    main()
