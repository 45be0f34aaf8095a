"""The live demo: a real verl SFT (or GRPO) run on CPU, the collector watching it, and the dashboard.

    python scripts/demo.py              # trainer + collector + `streamlit run app`, prints the address
    python scripts/demo.py --headless   # trainer + collector, prints alerts and checkpoint advice here
    python scripts/demo.py --rl         # the same with a verl GRPO run (preset grpo_demo) instead of SFT

The run overfits on purpose and hits a gradient spike, so within a few minutes the alerts appear and the
checkpoint advice names the step before the validation loss turned. Ctrl-C (or SIGTERM) stops everything it
started; further signals while it stops are ignored. It starts its own collector: when one already serves the
database it stops and names it (`--use-running-collector` uses that one, saying its alerts print on its console).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable


def read_marker(db: Path) -> dict | None:
    """The live collector's marker for `db`, or None (collector.core.runtime's: run as `python scripts/demo.py`,
    the repository is put on the path first)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from collector.core.runtime import read_marker as live_marker

    return live_marker(db)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_taken(port: int) -> bool:
    """Whether something already listens on 127.0.0.1:`port` (another dashboard, a demo left running)."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def wait_for_dashboard(port: int, proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    """Until the dashboard answers on `port`: exits naming its log when it stopped instead (a port taken
    between the check and its start), so the address printed is never someone else's page."""
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never via a proxy
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"demo: the dashboard exited with code {proc.returncode}; see {log}")
        try:
            with opener.open(f"http://127.0.0.1:{port}/_stcore/health", timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    print(f"demo: the dashboard does not answer yet after {timeout:.0f} s (see {log})", file=sys.stderr)


def start(cmd: list[str], log: Path | None = None, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start a child in its own process group so Ctrl-C can stop it and everything it spawned."""
    out = open(log, "ab") if log else None  # noqa: SIM115 - the child owns the file for its lifetime
    return subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT if out else None, start_new_session=True
    )


def ignore_signals() -> None:
    """From here on the demo is stopping: a second Ctrl-C, or the SIGTERM `make` forwards to its group, must not
    cut the cleanup short (and leave a collector running)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def stop(
    procs: list[subprocess.Popen],
    interrupt: tuple[subprocess.Popen, ...] = (),
    settle: Callable[[], None] = lambda: None,
) -> None:
    """Stop each child's process group (SIGTERM, then SIGKILL after 20 s), the last started first. Those in
    `interrupt` (the trainer) go first, with SIGINT: a person's Ctrl-C passed on, so its run says it was stopped
    (a warning), not that it failed by SIGTERM (an error: a scheduler's limit, a kill); then `settle` (the
    collector takes in the run's last state, else it keeps it `running` until it next starts), then the rest."""
    first = [p for p in procs if p in interrupt]
    _stop_groups(first, signal.SIGINT)
    if first:
        settle()
    _stop_groups([p for p in reversed(procs) if p not in interrupt], signal.SIGTERM)


def _stop_groups(procs: list[subprocess.Popen], sig: int) -> None:
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, sig)
    deadline = time.time() + 20
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def wait_for_final_state(db: Path, run: str, timeout: float = 15) -> None:
    """Until the collector serving `db` no longer says `run` is running (its trainer has stopped and written
    so), for at most `timeout` seconds; at once when no collector serves it."""
    deadline = time.time() + timeout
    while time.time() < deadline and read_marker(db) is not None:
        runs = cli_json(db, "runs") or []
        if any(r.get("id") == run and r.get("status") != "running" for r in runs):
            return
        time.sleep(0.5)


def stop_dashboards_collector(db: Path) -> None:
    """Stop the collector the demo's dashboard started, if it did: when the demo's own collector goes away (a
    kill -9), the dashboard starts one for the database in a session of its own, which outlives the dashboard;
    its marker names this demo as its `dashboard_pid` (the demo starts the dashboard with `DASHBOARD_ENV`)."""
    from collector.core.runtime import pid_alive
    from collector.core.runtime import read_marker as live_marker

    info = live_marker(db, prove=False)
    if info is None or info.get("dashboard_pid") != os.getpid():
        return
    pid = int(info["pid"])
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.time() + 20
    while pid_alive(pid) and time.time() < deadline:
        time.sleep(0.2)
    if pid_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    print(f"demo: stopped the collector its dashboard started (pid {pid}) when the demo's own one went away")


def wait_for_collector(db: Path, proc: subprocess.Popen, timeout: float = 60) -> dict:
    """The marker of the collector `proc` (not of another one that serves the same database)."""
    marker = Path(str(db) + ".collector.json")
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"demo: the collector exited with code {proc.returncode}; see its log above")
        info = read_marker(db)
        if info is not None and info.get("pid") == proc.pid:
            return info
        time.sleep(0.2)
    sys.exit(f"demo: the collector did not start within {timeout:.0f} s ({marker} never appeared)")


def cli_json(db: Path, *args: str) -> object:
    out = subprocess.run(
        [PY, "-m", "collector", *args, "--db", str(db), "--json"], cwd=REPO, capture_output=True, text=True
    )
    if out.returncode != 0:
        print(f"demo: `collector {' '.join(args)}` failed: {out.stderr.strip()}", file=sys.stderr)
        return None
    return json.loads(out.stdout)


def print_alerts(db: Path, run: str) -> None:
    alerts = cli_json(db, "alerts", "--run", run, "--state", "all") or []
    print(f"\nAlerts for {run}: {len(alerts)}")
    for a in alerts:
        print(
            f"  [{a['severity']:5}] {a['rule']:<16} steps {a['first_step']}-{a['last_step']} ({a['state']})"
        )


def print_advice(db: Path, run: str) -> None:
    advice = cli_json(db, "checkpoints", "--run", run) or {}
    rec = advice.get("recommended")
    print("\nCheckpoint advice:")
    if rec:
        print(f"  keep step {rec['step']}: {rec['path'] or '(no checkpoint seen)'}\n  why: {rec['reason']}")
    else:
        print("  no complete checkpoint to recommend yet")
    if advice.get("deletable"):
        print(
            f"  safe to delete: steps {advice['deletable']} (frees {advice.get('frees_bytes', 0) / 1e6:.1f} MB)"
        )
    for k in advice.get("kept", []):  # why the others stay, as `collector checkpoints` says it
        if not rec or k["step"] != rec["step"]:
            print(f"  kept step {k['step']}: {k['why']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--headless", action="store_true", help="no dashboard; print alerts and advice here")
    ap.add_argument(
        "--root", type=Path, default=REPO / "runs", help="folder the runs are written to and watched"
    )
    ap.add_argument(
        "--preset", default=None, help="trainer preset (see `python -m trainer.launch --help`; default demo)"
    )
    ap.add_argument(
        "--rl", action="store_true", help="a verl GRPO run (preset grpo_demo unless --preset names another)"
    )
    ap.add_argument("--nproc", type=int, default=1)
    ap.add_argument("--port", type=int, default=8501, help="dashboard port (0 = a free one)")
    ap.add_argument(
        "--db", type=Path, default=REPO / ".runwatch" / "runwatch.duckdb", help="collector database"
    )
    ap.add_argument("--steps", type=int, help="stop the run after N steps (default: the preset's)")
    ap.add_argument(
        "--use-running-collector",
        action="store_true",
        help="use a collector that already serves --db (its alerts print on its own console, not here)",
    )
    args = ap.parse_args()
    args.preset = args.preset or ("grpo_demo" if args.rl else "demo")
    kind = "GRPO (verl main_ppo)" if args.preset.startswith("grpo") else "SFT"

    root = args.root.resolve()
    root.mkdir(parents=True, exist_ok=True)
    db = args.db.resolve()
    state = db.parent  # the database and logs live outside the watched root
    (state / "logs").mkdir(parents=True, exist_ok=True)
    run_id = f"{args.preset}-" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    run_dir = root / run_id
    env_note = os.environ.setdefault("WANDB_MODE", "offline")

    running = read_marker(db)
    if running is not None and not args.use_running_collector:
        sys.exit(
            f"demo: a collector this demo did not start (pid {running['pid']}) already serves {db}; its alerts"
            f" would print on its own console, not here. Stop it (`kill {running['pid']}`) and run the demo"
            " again, or give --use-running-collector to use it, or --db another database."
        )

    procs: list[subprocess.Popen] = []
    trainers: list[subprocess.Popen] = []
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    # Python leaves SIGINT ignored when it started ignored (`make demo &` from a script, nohup): Ctrl-C, or a
    # SIGINT to the process group, must stop the demo all the same
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if running is not None:
            print(
                f"demo: using the collector already running (pid {running['pid']}, not started by this demo;"
                f" it keeps running after it): its alerts print on its own console, not here"
            )
            if str(root) not in (running.get("roots") or []):
                print(
                    f"demo: that collector does not watch {root}: the run will not show up", file=sys.stderr
                )
        else:
            print(f"demo: collector watching {root} (database {db})")
            procs.append(start([PY, "-m", "collector", "serve", "--db", str(db), str(root), "--port", "0"]))
            info = wait_for_collector(db, procs[0])
            print(f"demo: collector API on http://127.0.0.1:{info['port']} (pid {info['pid']})")

        print(
            f"demo: starting verl {kind} on CPU, preset {args.preset!r}, run {run_id} (WANDB_MODE={env_note})"
        )
        launch = [
            "-m",
            "trainer.launch",
            "--preset",
            args.preset,
            "--out",
            str(run_dir),
            "--nproc",
            str(args.nproc),
        ]
        if args.steps:
            launch += ["--steps", str(args.steps)]
        trainer = start([PY, *launch], log=state / "logs" / f"{run_id}.trainer.log")
        procs.append(trainer)
        trainers.append(trainer)
        print(f"demo: trainer output goes to {state / 'logs' / (run_id + '.trainer.log')}")

        if not args.headless:
            from collector.core.runtime import DASHBOARD_ENV  # (on the path: read_marker put it there)

            port = args.port or free_port()
            if port_taken(port):
                taken, port = port, free_port()
                print(f"demo: port {taken} is taken (another dashboard?): the dashboard uses {port} instead")
            dashboard_log = state / "logs" / "dashboard.log"
            procs.append(
                start(
                    [
                        PY,
                        "-m",
                        "streamlit",
                        "run",
                        "app",
                        "--server.address",
                        "127.0.0.1",
                        "--server.port",
                        str(port),
                        "--server.headless",
                        "true",
                        "--browser.gatherUsageStats",
                        "false",
                        "--",
                        "--db",
                        str(db),
                        "--root",
                        str(root),
                    ],
                    log=dashboard_log,
                    # a collector this dashboard starts (the demo's own gone) names the demo: stopped with it
                    env=os.environ | {DASHBOARD_ENV: str(os.getpid())},
                )
            )
            wait_for_dashboard(port, procs[-1], dashboard_log)
            print(
                f"\n  runwatch dashboard: http://127.0.0.1:{port}\n  (Ctrl-C stops the trainer, the collector and the dashboard)\n"
            )

        # Live alerts: the collector prints one line per alert event on this terminal as they happen.
        while trainer.poll() is None:
            time.sleep(1)
        print(f"demo: training finished with exit code {trainer.returncode}")
        time.sleep(3)  # let the collector take in the last lines
        print_alerts(db, run_id)
        print_advice(db, run_id)
        if not args.headless:
            print("demo: the dashboard stays up; Ctrl-C to stop")
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        ignore_signals()
        print("\ndemo: stopping")
    finally:
        ignore_signals()
        stop(procs, tuple(trainers), settle=lambda: wait_for_final_state(db, run_id))
        if not args.headless:
            stop_dashboards_collector(db)
        print("demo: everything it started has stopped")


if __name__ == "__main__":
    main()
