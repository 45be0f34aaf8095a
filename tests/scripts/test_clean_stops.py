"""Stopping the demo and the dashboard as people do (Ctrl-C, or `make`'s SIGTERM to its process group, twice):
everything they started stops, cleanup is not cut short by the second signal, and a collector they did not
start is named, never used in silence. Real subprocesses, a real collector, a real browser session."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path
from urllib.request import urlopen

from collector.core.runtime import read_marker
from collector.detect.runlevel import stopped_by_person
from tests.app.browser_support import chromium_page, free_port, wait_idle
from tests.app.conftest import start_collector, stop_process
from tests.conftest import REPO
from tests.waiting import wait_for


def _left_running(mark: Path) -> list[str]:
    """Command lines of live processes that name `mark` (a temp folder only this test's processes use)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue
        if str(mark) in cmdline and state != "Z":
            found.append(f"{proc.name}: {cmdline[:200]}")
    return found


def _running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie left for its reaper is not: it has exited)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _signal_twice(proc: subprocess.Popen, out: Path) -> None:
    """SIGTERM to the process group twice at once (as `make` forwards it), then once more while it stops."""
    os.killpg(proc.pid, signal.SIGTERM)
    os.killpg(proc.pid, signal.SIGTERM)
    wait_for(lambda: "stopping" in out.read_text() or proc.poll() is not None, "the cleanup to begin", 60)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)


def test_the_demo_stops_everything_it_started_on_repeated_sigterm(tmp_path):
    root, db, out = tmp_path / "runs", tmp_path / "state" / "runwatch.duckdb", tmp_path / "demo.out"
    with open(out, "wb") as sink:
        demo = subprocess.Popen(
            [
                sys.executable,
                "scripts/demo.py",
                "--headless",
                "--root",
                str(root),
                "--db",
                str(db),
                "--steps",
                "40",
            ],
            cwd=REPO,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        collector = wait_for(lambda: read_marker(db), "the demo's collector", 120, proc=demo, log=out)
        # the trainer is training (verl's workers spawned): its first metrics are written
        wait_for(
            lambda: any(root.glob("*/metrics.jsonl")), "the trainer's first metrics", 600, proc=demo, log=out
        )
        _signal_twice(demo, out)
        demo.wait(timeout=120)
    finally:
        stop_process(demo)
    said = out.read_text()
    assert "Traceback" not in said, said[-3000:]
    assert "demo: everything it started has stopped" in said
    assert not _running(collector["pid"]) and read_marker(db) is None, "the demo left its collector running"
    assert not _left_running(tmp_path), _left_running(tmp_path)
    # the trainer was passed the person's stop (SIGINT): its run says it was stopped, which runwatch tells as
    # a warning, not as a run failed by SIGTERM (an error, with a torchrun traceback quoted as its cause)
    (run_dir,) = root.iterdir()
    status = json.loads((run_dir / "status.json").read_text())
    assert status["error"] == "stopped by SIGINT" and stopped_by_person(status["error"]), status
    # and the collector took that in before it stopped: the database says so, not `running`
    runs = subprocess.run(
        [sys.executable, "-m", "collector", "runs", "--db", str(db), "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert [r["status"] for r in json.loads(runs.stdout)] == ["stopped"], runs.stdout + runs.stderr


def test_the_demo_stops_on_sigint_even_when_started_with_sigint_ignored(tmp_path):
    """`make demo &` from a script (or under nohup) starts it with SIGINT ignored, which Python keeps: a SIGINT
    to its process group (Ctrl-C once it is in the foreground) once did nothing, leaving all of it running."""
    root, db, out = tmp_path / "runs", tmp_path / "state" / "runwatch.duckdb", tmp_path / "demo.out"
    with open(out, "wb") as sink:
        demo = subprocess.Popen(
            [sys.executable, "scripts/demo.py", "--headless", "--root", str(root), "--db", str(db)],
            cwd=REPO,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )
    try:
        collector = wait_for(lambda: read_marker(db), "the demo's collector", 120, proc=demo, log=out)
        wait_for(lambda: "trainer output goes to" in out.read_text(), "the trainer's start", 120, proc=demo)
        os.killpg(demo.pid, signal.SIGINT)
        demo.wait(timeout=120)
    finally:
        stop_process(demo)
    said = out.read_text()
    assert "demo: everything it started has stopped" in said, said[-3000:]
    assert not _running(collector["pid"]) and read_marker(db) is None, "the demo left its collector running"
    assert not _left_running(tmp_path), _left_running(tmp_path)


def test_the_demo_stops_the_collector_its_dashboard_started_after_its_own_was_killed(tmp_path):
    """make demo, its collector killed with -9: the dashboard starts one of its own for the database (in a
    session of its own, outliving the dashboard), which Ctrl-C once left running while the demo said
    everything it started had stopped."""
    root, db, out = tmp_path / "runs", tmp_path / "state" / "runwatch.duckdb", tmp_path / "demo.out"
    port = free_port()
    cmd = [sys.executable, "scripts/demo.py", "--root", str(root), "--db", str(db), "--port", str(port)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNWATCH_")} | {"HOME": str(tmp_path)}
    with open(out, "wb") as sink:
        demo = subprocess.Popen(
            [*cmd, "--steps", "20"],
            cwd=REPO,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    second = None
    try:
        first = wait_for(lambda: read_marker(db), "the demo's collector", 120, proc=demo, log=out)
        wait_for(
            lambda: "runwatch dashboard: http" in out.read_text(), "the dashboard's start", 120, proc=demo
        )
        os.kill(first["pid"], signal.SIGKILL)
        with chromium_page() as page:  # the dashboard starts a collector for its first session
            wait_for(
                lambda: urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2), "the dashboard", 120
            )
            page.goto(f"http://127.0.0.1:{port}/")
            second = wait_for(
                lambda: (m := read_marker(db)) and m["pid"] != first["pid"] and m,
                "the collector the dashboard starts",
                120,
                proc=demo,
                log=out,
            )
        assert second.get("dashboard_pid") == demo.pid, second
        _signal_twice(demo, out)
        demo.wait(timeout=120)
    finally:
        stop_process(demo)
        if second is not None and _running(second["pid"]):
            os.kill(second["pid"], signal.SIGTERM)
    said = out.read_text()
    assert f"demo: stopped the collector its dashboard started (pid {second['pid']})" in said, said[-3000:]
    assert "Traceback" not in said, said[-3000:]
    assert not _running(second["pid"]) and read_marker(db) is None
    assert not _left_running(tmp_path), _left_running(tmp_path)


def test_the_demo_never_prints_an_address_it_does_not_serve(tmp_path):
    """The default port taken (another dashboard, a demo left running): the demo printed
    http://127.0.0.1:8501 and said the dashboard stayed up while its own had exited ('Port 8501 is not
    available'), sending people to the other program's page."""
    root, db, out = tmp_path / "runs", tmp_path / "state" / "runwatch.duckdb", tmp_path / "demo.out"
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        taken = other.getsockname()[1]
        with open(out, "wb") as sink:
            demo = subprocess.Popen(
                [
                    sys.executable,
                    "scripts/demo.py",
                    "--root",
                    str(root),
                    "--db",
                    str(db),
                    "--port",
                    str(taken),
                ],
                cwd=REPO,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            said = wait_for(
                lambda: re.search(r"runwatch dashboard: http://127\.0\.0\.1:(\d+)", out.read_text()),
                "the dashboard's address",
                180,
                proc=demo,
                log=out,
            )
            port = int(said.group(1))
            assert port != taken and f"demo: port {taken} is taken" in out.read_text()
            with urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=10) as answer:
                assert answer.status == 200  # the address printed is the demo's dashboard, already up
            _signal_twice(demo, out)
            demo.wait(timeout=120)
        finally:
            stop_process(demo)
    assert "demo: everything it started has stopped" in out.read_text()
    assert not _left_running(tmp_path), _left_running(tmp_path)


def test_the_demo_names_a_collector_it_did_not_start(tmp_path):
    root, db = tmp_path / "runs", tmp_path / "state" / "runwatch.duckdb"
    root.mkdir()
    db.parent.mkdir()
    other = start_collector(db, [root], tmp_path / "other.log")
    try:
        demo = subprocess.run(
            [sys.executable, "scripts/demo.py", "--headless", "--root", str(root), "--db", str(db)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert demo.returncode == 1, demo.stdout + demo.stderr
        assert f"a collector this demo did not start (pid {other.proc.pid})" in demo.stderr
        assert f"kill {other.proc.pid}" in demo.stderr and "--use-running-collector" in demo.stderr
        assert not list(root.iterdir()), "the demo started a run anyway"
        assert read_marker(db)["pid"] == other.proc.pid  # left alone
    finally:
        stop_process(other.proc)


def _dashboard(home: Path, db: Path, root: Path, out: Path) -> tuple[subprocess.Popen, int]:
    """`python -m app` on a free port for `db` and `root` (its own session, HOME `home`, output to `out`)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNWATCH_")} | {"HOME": str(home)}
    with open(out, "wb") as sink:
        app = subprocess.Popen(
            [sys.executable, "-m", "app", "--port", str(port), "--", "--db", str(db), "--root", str(root)],
            cwd=REPO,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return app, port


def test_the_dashboard_stops_the_collector_it_started(tmp_path):
    root, db, out = tmp_path / "runs", tmp_path / "state" / "runwatch.duckdb", tmp_path / "app.out"
    root.mkdir()
    app, port = _dashboard(tmp_path, db, root, out)
    collector = None
    try:
        with chromium_page() as page:  # the collector starts with the first session
            wait_for(
                lambda: urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2),
                "the dashboard",
                120,
                proc=app,
            )
            page.goto(f"http://127.0.0.1:{port}/")
            wait_idle(page)
            collector = wait_for(lambda: read_marker(db), "the collector the dashboard starts", 120, proc=app)
        _signal_twice(app, out)
        app.wait(timeout=120)
    finally:
        stop_process(app)
        if collector is not None and _running(collector["pid"]):
            os.kill(collector["pid"], signal.SIGTERM)
    said = out.read_text()
    assert f"runwatch: stopped the collector this dashboard started (pid {collector['pid']})" in said, said[
        -2000:
    ]
    assert "Traceback" not in said, said[-3000:]
    assert read_marker(db) is None and not _running(collector["pid"])


def test_the_dashboard_leaves_a_collector_restarted_while_it_ran(tmp_path):
    """A collector (or a team API) restarted by its owner while the dashboard runs has a new pid: the dashboard
    did not start it and must not stop it (it stopped any collector whose pid had changed)."""
    root, db, out = tmp_path / "runs", tmp_path / "state" / "runwatch.duckdb", tmp_path / "app.out"
    root.mkdir()
    db.parent.mkdir()
    first = start_collector(db, [root], tmp_path / "first.log")
    app, port = _dashboard(tmp_path, db, root, out)
    second = None
    try:
        wait_for(
            lambda: urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2),
            "the dashboard",
            120,
            proc=app,
        )
        stop_process(first.proc)
        second = start_collector(db, [root], tmp_path / "second.log")
        _signal_twice(app, out)
        app.wait(timeout=120)
        said = out.read_text()
        pid = second.proc.pid
        assert (
            f"the collector (pid {pid}) for {db} was not started by this dashboard and keeps running" in said
        ), said[-2000:]
        assert _running(pid) and read_marker(db)["pid"] == pid
    finally:
        stop_process(app)
        stop_process(first.proc)
        if second is not None:
            stop_process(second.proc)
