"""Team mode: `--collectors` collectors, each over its own `--runs` live run folders, publishing into one DuckLake
(a throwaway PostgreSQL catalog on 127.0.0.1, `tests/pg_support.py`, Parquet data in a local folder), and one
reader `serve --store` answering the API for all of them. Runs under the team venv (DuckDB 1.4.4 + DuckLake):

    .venv-team/bin/python bench/team.py [--collectors 4] [--runs 250] [--seconds 60] [--overview-runs 0]

The writer is `scale.py`'s (1 line/s per run on a 100 ms tick, 10% of runs at 10 lines/s), spread over every
collector's root. Figures: write-to-API p95 (a line written on any collector until the reader's
`GET /api/runs/NAME/run-i/metrics?after=step-1` returns it), NaN-to-alert p95 (a NaN loss until the reader's
`GET /api/alerts?run=NAME/run-i&rule=nonfinite` lists it), catalog commits per second (DuckLake snapshots in
Postgres over the measured window), Parquet files per run-hour (data files in the lake's folder at the end,
with DuckLake's defaults: no compaction, inlining off), `GET /api/runs` p50/p95 on the reader (the overview), its
answers' age (from when the lake was read: `X-Runwatch-As-Of`; the reader may answer the overview it keeps, up to
2 s old) and the reader's CPU meanwhile, and each collector's CPU. `--phases-every-s S` also times the overview's
parts in a reader of its own every S seconds (`team_overview_phases.py`: lake queries, rows, encoding; wall and
CPU time). `--overview-runs N` first ingests N more small runs (one extra collector, `--once`) so the
overview is timed with that many runs in the lake; with `--collectors 0` the overview is timed alone (no live
runs). The reader keeps the overview and builds again only the rows of the runs a commit changed
(`collector.api.runs`), so it is timed three ways: its first call (built whole), in the window (between commits,
or after them where collectors run), and `--cold-calls` times right after a commit of its own (a stop asked of a
run: a commit of nothing the overview shows; the call pays for finding that out). `--keep-lake DIR` (with
`--collectors 0`) keeps the cluster, the lake and the seed in DIR and reuses them when DIR already holds a seed
of `--overview-runs` runs (seeding 10,000 runs takes minutes); `--seed-from DIR` copies such a kept seed into
the bench's folder and runs the live collectors beside its runs (the overview with live commits: most calls
come right after one; `--overview-every-s` spaces the calls, each counted as after a commit when the lake's
snapshot moved since the one before).
Targets (issue 26): p95 < 2 s from a line on any collector
to the shared API; overview < 300 ms at 10,000 runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import archive  # noqa: E402
import gen  # noqa: E402
import harness  # noqa: E402
import lake_locks  # noqa: E402
import scale  # noqa: E402

from tests.pg_support import PgServer  # noqa: E402

NAME = "team"
TARGET_P95_MS = 2000.0
TARGET_OVERVIEW_P95_MS = 300.0


def snapshots(pg: PgServer, database: str) -> int:
    """DuckLake's snapshots so far: one per committed lake transaction."""
    res = pg._run(
        ["/usr/bin/psql", "-h", "127.0.0.1", "-p", str(pg.port), "-U", pg.user, "-d", database, "-tAc",
         "SELECT coalesce(max(snapshot_id), 0) FROM ducklake_snapshot"],
    )  # fmt: skip
    return int(res.stdout.strip() or 0)


def timed_overview(reader: harness.Daemon) -> tuple[float, float | None]:
    """`GET /api/runs` as a dashboard asks it: (ms until its body is parsed, its age in ms: from when the lake was
    read, `X-Runwatch-As-Of`, to when the answer was parsed; None where the reader does not say, the code
    before 26 Nov: it built each answer in the call, as of the call's start, so its age was about its ms)."""
    req = urllib.request.Request(reader.url("/api/runs"), headers={"Authorization": f"Bearer {reader.token}"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=120) as resp:
        json.loads(resp.read())
        as_of = resp.headers.get("X-Runwatch-As-Of")
    ms, now = (time.perf_counter() - t0) * 1000, time.time()
    return ms, (now - float(as_of)) * 1000 if as_of is not None else None


def time_overview(
    reader: harness.Daemon,
    pg: PgServer,
    every_s: float,
    done: threading.Event,
    out: list[tuple[float, bool, float, float | None]],
) -> None:
    """`GET /api/runs` every `every_s` until `done`: (ms, whether the lake's snapshot moved since the call
    before, the reader process's CPU ms meanwhile: its other requests too, the answer's age ms) each; the
    snapshot is read just before the call (a commit landing in between counts next time)."""
    last = snapshots(pg, "lake")
    while not done.wait(every_s):
        now = snapshots(pg, "lake")
        cpu = harness.cpu_seconds(reader.proc.pid)
        ms, age = timed_overview(reader)
        out.append((ms, now != last, (harness.cpu_seconds(reader.proc.pid) - cpu) * 1000, age))
        last = now


def _ms3(figures: dict, prefix: str) -> str:
    """'p50 / p95 / max (n calls)' of `figures`' `prefix`-ed keys; '-' where there were no calls."""
    if not figures.get(f"{prefix}calls"):
        return "-"
    p50, p95, top = (figures[f"{prefix}{k}"] for k in ("p50", "p95", "max"))
    return f"{p50:.0f} / {p95:.0f} / {top:.0f} ({figures[f'{prefix}calls']} calls)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--collectors", type=int, default=4)
    ap.add_argument("--runs", type=int, default=250, help="live runs per collector")
    ap.add_argument("--fast-share", type=float, default=0.1)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--warmup-s", type=float, default=10.0)
    ap.add_argument("--sample-every", type=int, default=997)
    ap.add_argument("--nan-every-s", type=float, default=3.0)
    ap.add_argument("--poll-ms", type=float, default=100.0)
    ap.add_argument("--overview-runs", type=int, default=0, help="extra stored runs for the overview timing")
    ap.add_argument("--cold-calls", type=int, default=5, help="overview calls each right after a commit")
    ap.add_argument(
        "--keep-lake", type=Path, help="keep (and reuse) the seeded lake here; with --collectors 0"
    )
    ap.add_argument(
        "--seed-from", type=Path, help="a --keep-lake folder: copy its seed, run collectors beside it"
    )
    ap.add_argument(
        "--overview-every-s", type=float, default=5.0, help="GET /api/runs this often in the window"
    )
    ap.add_argument(
        "--phases-every-s",
        type=float,
        help="also time the overview's parts in-process over the window this often (team_overview_phases.py)",
    )
    ap.add_argument("--phases-alternate", action="store_true", help="with --phases-every-s: its --alternate")
    args = ap.parse_args()
    if args.keep_lake and args.collectors:
        raise SystemExit("--keep-lake: only with --collectors 0 (a kept lake holds the seed's runs only)")
    if args.seed_from and args.keep_lake:
        raise SystemExit("--seed-from: not with --keep-lake (the copy is the bench's own)")

    work = args.keep_lake or gen.OUT / "team"
    seed_mark = work / "seeded.json"
    reuse = (
        args.keep_lake is not None
        and seed_mark.is_file()
        and json.loads(seed_mark.read_text()) == {"runs": args.overview_runs}
    )
    if not reuse:
        shutil.rmtree(work, ignore_errors=True)
    if args.seed_from:  # (cp -a: the cluster's files stay its user's)
        args.overview_runs = json.loads((args.seed_from / "seeded.json").read_text())["runs"]
        work.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-a", str(args.seed_from), str(work)], check=True)
        reuse = True
    data = work / "lake"
    data.mkdir(parents=True, exist_ok=True)
    pg = PgServer(keep_in=work / "pg" if args.keep_lake or args.seed_from else None).start()
    if args.seed_from:  # the copy's catalog names the copy's data folder
        pg.sql(
            "lake", f"UPDATE ducklake_metadata SET value = '{data}/' WHERE key = 'data_path'"
        ).check_returncode()
    store = ["--store", f"ducklake:postgres:{pg.dsn}", "--data-path", str(data)]
    names = [f"c{k}" for k in range(args.collectors)]
    first = 5
    fast = round(args.runs * args.fast_share)
    rate = args.collectors * (fast * 10 + (args.runs - fast))
    print(
        f"{args.collectors} collectors x {args.runs} runs: {rate} lines/s for {args.seconds:.0f} s",
        flush=True,
    )
    res: dict = {"collectors": args.collectors, "runs_per_collector": args.runs, "lines_per_s": rate}
    daemons: list[harness.Daemon] = []
    try:
        if reuse:
            print(f"reusing the seed of {args.overview_runs} runs in {work}", flush=True)
            res["overview_seed"] = {"runs": args.overview_runs, "reused": str(work)}
        elif args.overview_runs:
            extra_root = work / "extra"
            scale.make_root(extra_root, args.overview_runs, first)
            t0 = time.perf_counter()
            m = harness.measured_run(
                harness.collector_cmd("serve", "--db", str(work / "extra.duckdb"), str(extra_root), "--once",
                                      "--collector", "extra", *store)
            )  # fmt: skip
            res["overview_seed"] = {
                "runs": args.overview_runs,
                "wall_s": time.perf_counter() - t0,
                "rc": m.rc,
            }
            print(
                f"seeded {args.overview_runs} runs into the lake in {time.perf_counter() - t0:.0f} s",
                flush=True,
            )
            if args.keep_lake and m.rc == 0:
                seed_mark.write_text(json.dumps({"runs": args.overview_runs}))
        roots = [work / n / "root" for n in names]
        for root in roots:
            scale.make_root(root, args.runs, first)
        for n, root in zip(names, roots, strict=True):
            d = harness.Daemon(work / f"{n}.duckdb", [root], ("--collector", n, *store))
            daemons.append(d)  # before it starts: one that never comes up is still stopped below
            d.__enter__()
        reader = harness.Daemon(work / "reader.duckdb", [], tuple(store))
        daemons.append(reader)
        reader.__enter__()
        res["overview_first_ms"] = archive.timed_get(reader, "/api/runs")[0]  # (built whole)
        t0 = time.perf_counter()
        want = args.collectors * args.runs + args.overview_runs
        while (
            sum(1 for r in reader.get("/api/runs", timeout=120) if (r.get("last_step") or 0) >= first) < want
        ):
            if time.perf_counter() - t0 > 600:
                raise SystemExit(f"not every run in the lake within 600 s: {reader.log_tail()}")
            time.sleep(1.0)
        res["listed_all_s"] = time.perf_counter() - t0
        any_run = reader.get("/api/runs", timeout=120)[0]["id"]
        print(f"reader lists all {want} runs {res['listed_all_s']:.1f} s after it answered", flush=True)

        writers = [scale.Writer(root, args.runs, fast, first) for root in roots]
        lat: list = []
        alerts: list = []
        probers: list[threading.Thread] = []
        runs_ms: list[tuple] = []  # (ms, whether the lake committed since, reader CPU ms, age ms or None)
        overview_done = threading.Event()
        poll = args.poll_ms / 1000
        start = time.perf_counter()
        measure_from, end = start + args.warmup_s, start + args.warmup_s + args.seconds
        next_nan, nan_k, nan_run = measure_from, 0, args.runs - 1
        snaps0 = cpu0 = None
        tick = lines = 0
        try:
            while (now := time.perf_counter()) < end:
                due_at = start + tick * scale.TICK_S
                if due_at > now:
                    time.sleep(due_at - now)
                if snaps0 is None and now >= measure_from:
                    snaps0, wall0 = snapshots(pg, "lake"), time.perf_counter()
                    # A shared machine: every figure goes with the load average it was taken at.
                    load0 = os.getloadavg()
                    cpu0 = [harness.cpu_seconds(d.proc.pid) for d in daemons[: args.collectors]]
                    compactions = lake_locks.CompactionWatch(pg, "lake")  # (the writes wait meanwhile)
                    compactions.start()
                    overview = threading.Thread(
                        target=time_overview, args=(reader, pg, args.overview_every_s, overview_done, runs_ms)
                    )
                    overview.start()
                    probers.append(overview)
                    if args.phases_every_s:  # (a second reader, in-process: its own output, read at the end)
                        phases = subprocess.Popen(
                            [sys.executable, str(Path(__file__).parent / "team_overview_phases.py"), store[1], str(data),
                             "--seconds", str(args.seconds), "--every-s", str(args.phases_every_s),
                             *(["--alternate"] if args.phases_alternate else [])],
                            cwd=gen.REPO, stdout=subprocess.PIPE, text=True,
                        )  # fmt: skip
                for k, w in enumerate(writers):
                    for i in w.due(tick):
                        run, step, t_write = w.write(i)
                        lines += 1
                        if snaps0 is not None and lines % args.sample_every == 0:
                            t = threading.Thread(
                                target=scale.follow,
                                args=(reader, f"/api/runs/{names[k]}/{run}/metrics",
                                      {"metric": "train/loss", "after": step - 1},
                                      lambda a, s=step: any(s in x.get("steps", []) for x in a["series"]),
                                      t_write, lat, poll),
                            )  # fmt: skip
                            t.start()
                            probers.append(t)
                if writers and snaps0 is not None and time.perf_counter() >= next_nan and nan_run >= fast:
                    next_nan += args.nan_every_s
                    k = nan_k % args.collectors
                    run, step, t_write = writers[k].write(nan_run, loss="NaN")
                    nan_k += 1
                    nan_run -= 1 if k == args.collectors - 1 else 0
                    t = threading.Thread(
                        target=scale.follow,
                        args=(reader, "/api/alerts", {"run": f"{names[k]}/{run}", "rule": "nonfinite", "state": "all"},
                              lambda a, s=step: any(x.get("first_step") == s for x in a), t_write, alerts, poll),
                    )  # fmt: skip
                    t.start()
                    probers.append(t)
                tick += 1
        finally:
            overview_done.set()
            for t in probers:
                t.join()
            for w in writers:
                w.close()
        window = time.perf_counter() - wall0
        if args.phases_every_s:
            res["overview_phases"] = json.loads(phases.communicate(timeout=600)[0])
        res["compactions"] = compactions.stop()
        commits = snapshots(pg, "lake") - snaps0
        cold_ms = []
        for _ in range(args.cold_calls):  # a commit of the reader's own, then the overview built anew
            reader.post(
                f"/api/runs/{any_run}/stop", {"reason": "bench: a lake commit before a cold overview"}
            )
            cold_ms.append(archive.timed_get(reader, "/api/runs", {"max_age_s": 0})[0])  # (built now)
        load1 = os.getloadavg()
        cores = [(harness.cpu_seconds(d.proc.pid) - c) / window for d, c in zip(daemons, cpu0, strict=False)]
        files = sum(1 for _ in data.rglob("*.parquet"))
        run_hours = (args.collectors * args.runs + args.overview_runs) * (time.perf_counter() - start) / 3600
        ok = [ms for ms, _ in lat if ms is not None]
        ages = [a for *_, a in runs_ms if a is not None]
        ok_alerts = [ms for ms, _ in alerts if ms is not None]
        res |= {
            "samples": len(lat),
            "p50_ms": gen.percentile(ok, 50),
            "p95_ms": gen.percentile(ok, 95),
            "missed": sum(1 for ms, _ in lat + alerts if ms is None),
            "errors": [e for _, e in lat + alerts if e][:5],
            "alert_samples": len(alerts),
            "alert_p95_ms": gen.percentile(ok_alerts, 95),
            "catalog_commits_per_s": commits / window,
            "parquet_files": files,
            "parquet_files_per_run_hour": files / run_hours if run_hours else None,
            "overview_ms": {
                "p50": gen.percentile([ms for ms, *_ in runs_ms], 50),
                "p95": gen.percentile([ms for ms, *_ in runs_ms], 95),
                "reader_cpu_p50": gen.percentile([cpu for _, _, cpu, _ in runs_ms], 50),
                "reader_cpu_p95": gen.percentile([cpu for _, _, cpu, _ in runs_ms], 95),
                # (None: the reader does not say its answer's age; see `timed_overview`)
                "age_p50": gen.percentile([a for *_, a in runs_ms if a is not None], 50) if ages else None,
                "age_p95": gen.percentile([a for *_, a in runs_ms if a is not None], 95) if ages else None,
                "calls": len(runs_ms),
                "commits_in_window": commits,
                "after_commit_p50": gen.percentile([ms for ms, moved, *_ in runs_ms if moved], 50),
                "after_commit_p95": gen.percentile([ms for ms, moved, *_ in runs_ms if moved], 95),
                "after_commit_max": max((ms for ms, moved, *_ in runs_ms if moved), default=None),
                "after_commit_calls": sum(1 for _, moved, *_ in runs_ms if moved),
            },
            "overview_cold_ms": {
                "p50": gen.percentile(cold_ms, 50),
                "p95": gen.percentile(cold_ms, 95),
                "max": max(cold_ms, default=None),
                "calls": len(cold_ms),
            },
            "runs_in_lake": want,
            "collector_cores": cores,
            "load_avg_1_5_15": {"start": load0, "end": load1},
        }
    finally:
        for d in reversed(daemons):
            if d.proc is not None:
                d.__exit__(None, None, None)
        pg.stop() if args.keep_lake else pg.remove()
    res["met"] = {
        "p95": res.get("p95_ms", float("inf")) < TARGET_P95_MS,
        "overview_p95": res.get("overview_ms", {}).get("p95", float("inf")) < TARGET_OVERVIEW_P95_MS,
    }
    gen.print_table(
        "team mode: one lake, many collectors",
        ["figure", "value", "target"],
        [
            ["write-to-API p50 / p95 ms", f"{res['p50_ms']:.0f} / {res['p95_ms']:.0f} ({res['samples']} samples)", "p95 < 2000"],
            ["NaN-to-alert p95 ms", f"{res['alert_p95_ms']:.0f} ({res['alert_samples']} samples)", ""],
            ["missed", res["missed"], "0"],
            ["catalog commits per second", f"{res['catalog_commits_per_s']:.2f}", ""],
            ["Parquet files (per run-hour)", f"{files} ({res['parquet_files_per_run_hour']:.2f})", ""],
            ["compactions: how many, s holding the writes in all / the longest", "{compactions} / {held_s:.2f} / {max_s:.2f}".format(**res["compactions"]), ""],
            [f"GET /api/runs p50 / p95 ms, {want} runs, in the window ({commits} commits)", f"{res['overview_ms']['p50']:.0f} / {res['overview_ms']['p95']:.0f} ({len(runs_ms)} calls)", "p95 < 300"],
            ["  of those, after a lake commit p50 / p95 / max ms", _ms3(res["overview_ms"], "after_commit_"), "p95 < 300"],
            ["  its answers' age p50 / p95 ms (from when the lake was read)", "-" if not ages else f"{res['overview_ms']['age_p50']:.0f} / {res['overview_ms']['age_p95']:.0f}", ""],
            ["  the reader's CPU during a call p50 / p95 ms (its other requests too)", f"{res['overview_ms']['reader_cpu_p50']:.0f} / {res['overview_ms']['reader_cpu_p95']:.0f}", ""],
            ["the reader's first call (built whole) ms", f"{res['overview_first_ms']:.0f}", ""],
            ["right after a stop's commit p50 / p95 / max ms", f"{res['overview_cold_ms']['p50']:.0f} / {res['overview_cold_ms']['p95']:.0f} / {res['overview_cold_ms']['max']:.0f} ({len(cold_ms)} calls)", ""],
            ["collector cores", " ".join(f"{c:.2f}" for c in cores), ""],
            ["load average (1 min) at start / end", f"{load0[0]:.1f} / {load1[0]:.1f} ({os.cpu_count()} cores)", ""],
        ],
    )  # fmt: skip
    for kind, of in res.get("overview_phases", {}).get("summary", {}).items():
        gen.print_table(
            f"the overview's parts in-process, calls built {kind} ({of['calls']}): wall {of['wall_ms_p50_p95'][0]:.0f} / "
            f"{of['wall_ms_p50_p95'][1]:.0f} ms p50 / p95, the thread's CPU {of['thread_cpu_ms_p50_p95'][0]:.0f} / "
            f"{of['thread_cpu_ms_p50_p95'][1]:.0f} ms, the process's CPU {of['process_cpu_ms_p50_p95'][0]:.0f} / "
            f"{of['process_cpu_ms_p50_p95'][1]:.0f} ms",
            ["part", "wall ms p50", "thread CPU ms p50"],
            [[p, f"{w:.1f}", f"{c:.1f}"] for p, (w, c) in of["parts_wall_cpu_ms_p50"].items()],
        )
    print(f"wrote {gen.write_json(NAME, res)}")


if __name__ == "__main__":
    main()
