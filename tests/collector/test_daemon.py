"""The real daemon as a subprocess: lifecycle (marker, token, second serve, stale marker, SIGTERM) and live
tailing with the real watchdog observer (new runs, partial lines, truncation, concurrent writers, polling)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading

import pytest

from collector.api.client import ApiError
from collector.core.runtime import marker_path, token_path
from tests.collector.test_daemon_support import REPO, Daemon, cli_json, wait_for
from tests.collector.test_ingest import expected_from_jsonl, same, verl_line


def series(client, run: str, metric: str = "train/loss", **params) -> dict:
    return client.get(f"/api/runs/{run}/metrics", params={"metric": metric, "points": 10**7, **params})[
        "series"
    ][0]


def stored_map(client, run: str, metrics: tuple[str, ...] = ("train/loss", "train/grad_norm")) -> dict:
    """The run's points as {(metric, step): value}; empty while the collector has not found the run yet."""
    out = {}
    for m in metrics:
        try:
            s = series(client, run, m)
        except ApiError as e:
            if e.status == 404:
                return {}
            raise
        out.update({(m, st): v for st, v in zip(s["steps"], s["values"], strict=True)})
    return out


def test_lifecycle_marker_token_second_serve_stale_marker_sigterm(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    db = tmp_path / "rw.duckdb"
    # A stale marker from a collector that died (its pid is gone) is replaced.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    marker_path(db).write_text(json.dumps({"pid": dead.pid, "host": "127.0.0.1", "port": 9, "roots": []}))
    daemon = Daemon(db, [root]).start()
    try:
        info = json.loads(marker_path(db).read_text())
        assert info["pid"] == daemon.proc.pid and info["port"] > 0 and info["host"] == "127.0.0.1"
        assert info["roots"] == [str(root.resolve())] and info["started_at"] > 0
        assert stat.S_IMODE(os.stat(token_path(db)).st_mode) == 0o600
        assert daemon.client().get("/api/health")["ok"] is True

        second = subprocess.run(
            [sys.executable, "-m", "collector", "serve", "--db", str(db), str(root)],
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        assert second.returncode == 1
        assert f"already serving {db}" in second.stderr and str(daemon.proc.pid) in second.stderr
    finally:
        daemon.ensure_stopped() if daemon.proc.poll() is not None else None
    assert daemon.stop() == 0
    assert not marker_path(db).exists()


@pytest.fixture
def live(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    daemon = Daemon(tmp_path / "rw.duckdb", [root]).start()
    yield root, daemon
    daemon.ensure_stopped()


def test_new_run_folder_partial_line_and_truncation_while_running(live):
    root, daemon = live
    client = daemon.client()
    run_dir = root / "exp" / "run-a"
    run_dir.mkdir(parents=True)  # a new folder after start: found without a restart
    f = run_dir / "metrics.jsonl"
    f.write_text(verl_line(1, 3.0) + verl_line(2, 2.0))  # created and written at once
    wait_for(lambda: any(r["id"] == "exp/run-a" for r in client.get("/api/runs")), "the new run")
    wait_for(lambda: series(client, "exp/run-a")["steps"] == [1, 2], "steps 1-2")

    with f.open("a") as fh:  # half a line: nothing yet, then the rest
        fh.write('{"step":3,"data":{"train/loss":1.5,')
        fh.flush()
        fh.write('"train/grad_norm":1.0}}\n')
    wait_for(lambda: series(client, "exp/run-a", after=2)["steps"] == [3], "step 3 once its line is complete")

    f.write_text(
        verl_line(2, 20.0) + verl_line(3, 30.0) + verl_line(4, 40.0)
    )  # resumed from step 1: truncated
    wait_for(lambda: series(client, "exp/run-a")["values"] == [3.0, 20.0, 30.0, 40.0], "the rewritten steps")
    run = client.get("/api/runs/exp/run-a")
    assert run["sources"][0]["segment"] == 1 and run["sources"][0]["bad_lines"] == 0
    old = client.get("/api/runs/exp/run-a/replaced", params={"metric": "train/loss"})
    assert sorted((o["step"], o["value"]) for o in old) == [(2, 2.0), (3, 1.5)]
    assert daemon.stop() == 0


def test_concurrent_writers_lose_and_repeat_nothing(live):
    root, daemon = live
    runs = [f"w{i}" for i in range(6)]
    for r in runs:
        (root / r).mkdir()

    def writer(run: str) -> None:
        with (root / run / "metrics.jsonl").open("a") as fh:
            for step in range(1, 301):
                fh.write(verl_line(step, 1.0 / step, step * 0.1))
                if step % 7 == 0:
                    fh.flush()

    threads = [threading.Thread(target=writer, args=(r,)) for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    client = daemon.client()
    for r in runs:
        want = expected_from_jsonl(root / r / "metrics.jsonl")
        wait_for(lambda r=r, want=want: len(stored_map(client, r)) == len(want), f"all points of {r}")
        assert same(stored_map(client, r), want)
    assert daemon.stop() == 0
    # After a clean stop the database opens directly and agrees.
    assert {r["id"] for r in cli_json(daemon.db, "runs")} == set(runs)


def test_polling_observer_and_once(tmp_path):
    root = tmp_path / "root"
    (root / "p").mkdir(parents=True)
    (root / "p" / "metrics.jsonl").write_text(verl_line(1, 1.0))
    db = tmp_path / "rw.duckdb"
    daemon = Daemon(db, [root], "--polling").start()
    try:
        client = daemon.client()
        wait_for(lambda: series(client, "p")["steps"] == [1], "the first point")
        with (root / "p" / "metrics.jsonl").open("a") as fh:
            fh.write(verl_line(2, 0.5))
        wait_for(lambda: series(client, "p")["steps"] == [1, 2], "the appended point, seen by polling")
    finally:
        assert daemon.stop() == 0
    with (root / "p" / "metrics.jsonl").open("a") as fh:
        fh.write(verl_line(3, 0.25))
    once = subprocess.run(
        [sys.executable, "-m", "collector", "serve", "--once", "--db", str(db), str(root)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert once.returncode == 0, once.stderr
    assert not marker_path(db).exists()
    assert cli_json(db, "metrics", "--run", "p", "--metric", "train/loss")["steps"] == [1, 2, 3]


def test_a_bulk_backlog_ingested_by_the_cli_is_judged_by_the_daemon(tmp_path):
    root = tmp_path / "root"
    (root / "big").mkdir(parents=True)
    with (root / "big" / "metrics.jsonl").open("w") as f:  # ~3 MiB: read in bulk by DuckDB
        for step in range(1, 40_001):
            loss = "NaN" if step == 30_000 else repr(0.5 + 2.0 * 0.9999**step + 0.01 * (step % 7))
            f.write(
                f'{{"step":{step},"data":{{"train/loss":{loss},"train/grad_norm":{1.0 + (step % 5) * 0.01}}}}}\n'
            )
    db = tmp_path / "rw.duckdb"
    out = json.loads(
        subprocess.run(
            [sys.executable, "-m", "collector", "ingest", "--db", str(db), str(root), "--json"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert out["points_added"] == 80_000
    daemon = Daemon(db, [root]).start()
    try:
        client = daemon.client()
        alerts = wait_for(
            lambda: client.get("/api/alerts", params={"run": "big", "rule": "nonfinite"}), "the NaN judged"
        )
        assert alerts[0]["first_step"] == 30_000
    finally:
        assert daemon.stop() == 0


def test_rotation_deletion_and_garbage_while_running(live):
    root, daemon = live
    client = daemon.client()
    (root / "rot").mkdir()
    f = root / "rot" / "metrics.jsonl"
    f.write_text("".join(verl_line(i, 1.0) for i in range(1, 4)))
    wait_for(lambda: stored_map(client, "rot").get(("train/loss", 3)) == 1.0, "the first lines")
    with f.open("ab") as fh:  # garbage and bytes that are not UTF-8 between good lines
        fh.write(b"garbage\n" + b'{"step":4,"data":{"train/loss":\xff}}\n' + verl_line(5, 1.0).encode())
    wait_for(lambda: ("train/loss", 5) in stored_map(client, "rot"), "the line after the garbage")
    bad = client.get("/api/runs/rot/quarantine")
    assert [(b["line"], b["path"]) for b in bad] == [(4, str(f)), (5, str(f))]

    os.rename(f, root / "rot" / "metrics.jsonl.1")  # rotation: the old file moves away, a new one starts
    f.write_text("".join(verl_line(i, 2.0) for i in range(6, 9)))
    wait_for(lambda: stored_map(client, "rot").get(("train/loss", 8)) == 2.0, "the new file's lines")
    run = client.get("/api/runs/rot")
    assert run["sources"][0]["segment"] == 1
    assert sorted(s for m, s in stored_map(client, "rot") if m == "train/loss") == [1, 2, 3, 5, 6, 7, 8]

    f.unlink()  # deleted: what was ingested stays, the daemon carries on
    (root / "rot2").mkdir()
    (root / "rot2" / "metrics.jsonl").write_text(verl_line(1, 3.0))
    wait_for(
        lambda: stored_map(client, "rot2").get(("train/loss", 1)) == 3.0, "a run started after the deletion"
    )
    wait_for(lambda: client.get("/api/runs/rot")["sources"][0]["state"] == "deleted", "the deletion noticed")
    assert len(stored_map(client, "rot")) == 2 * 7  # loss and grad_norm of steps 1-3 and 5-8
    assert daemon.stop() == 0
