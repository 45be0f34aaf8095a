"""Files the collector cannot read in full are named, per run and overall: a real daemon subprocess on a real
DuckDB file, asked over real HTTP and through the real CLI.

A file without read permission is the real failure here. Root reads any file, so when the tests run as root
the collector (and the CLI beside it) run as `nobody` through `setpriv`, in a folder that user may write.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import pytest

from collector.api.client import ApiError
from tests.collector.test_daemon_support import REPO, Daemon, wait_for

NOBODY = 65534
AS_USER = (
    ("setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--") if os.geteuid() == 0 else ()
)


@pytest.fixture
def base():
    """A folder every user may pass through (pytest's own temp folders are the test user's alone)."""
    if AS_USER and shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: a file without read permission is readable anyway")
    if AS_USER:
        probe = subprocess.run(
            [*AS_USER, sys.executable, "-c", "import collector"], cwd=REPO, capture_output=True
        )
        if probe.returncode != 0:  # (a checkout in a folder only root may enter, e.g. /root)
            pytest.skip(f"user {NOBODY} cannot run the collector from {REPO}: {probe.stderr.decode()[-300:]}")
    folder = Path(tempfile.mkdtemp(prefix="rw-problem-files-"))
    folder.chmod(0o777)
    yield folder
    subprocess.run(["chmod", "-R", "u+rwX", str(folder)], check=False)  # (the test's unreadable parts)
    shutil.rmtree(folder, ignore_errors=True)


def cli(db: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`python -m collector ARGS --db DB`, as the same user as the daemon."""
    out = subprocess.run(
        [*AS_USER, sys.executable, "-m", "collector", *args, "--db", str(db)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0 or not check, out.stderr
    return out


def verl_lines(steps: range) -> str:
    return "".join(json.dumps({"step": s, "data": {"train/loss": 1.0 / s}}) + "\n" for s in steps)


def run_detail(c, run: str) -> dict:
    """The run's detail, or {} while the collector has not listed the run yet (it serves before it discovers)."""
    try:
        return c.get(f"/api/runs/{run}")
    except ApiError as e:
        if e.status != 404:
            raise
        return {}


def health(d: Daemon) -> dict:
    """`/api/health` over plain HTTP, with no token (it needs none)."""
    port = json.loads(Path(f"{d.db}.collector.json").read_text())["port"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=30) as resp:
        return json.loads(resp.read())


def runs_with_problems(base: Path) -> tuple[Path, Path, Path]:
    """(root, database, the locked file) in `base`: run `ok` with a bad line and a binary file, run `locked`
    whose metrics.jsonl and one other file no one may read, run `gone` (delete its file once it is read)."""
    root = base / "root"
    for run in ("ok", "locked", "gone"):
        (root / run).mkdir(parents=True)
    (root / "ok" / "metrics.jsonl").write_text(
        verl_lines(range(1, 4)) + "{not json\n" + verl_lines(range(4, 6))
    )
    (root / "ok" / "weights.dat").write_bytes(b"\x00\x01binary" * 100)
    locked = root / "locked" / "metrics.jsonl"
    locked.write_text(verl_lines(range(1, 11)))
    locked.chmod(0)
    (root / "locked" / "notes.xyz").write_text("something\n")
    (root / "locked" / "notes.xyz").chmod(0)
    (root / "gone" / "metrics.jsonl").write_text(verl_lines(range(1, 4)))
    hidden = root / "hidden"  # a folder no one may list: its run is not seen, the folder is named
    hidden.mkdir()
    (hidden / "metrics.jsonl").write_text(verl_lines(range(1, 4)))
    hidden.chmod(0)
    data = base / "db"
    data.mkdir()
    data.chmod(0o777)  # the collector's user writes the database there
    return root, data / "rw.duckdb", locked


def test_files_not_read_in_full_are_named_per_run_and_overall(base, monkeypatch):
    root, db, locked = runs_with_problems(base)
    monkeypatch.setenv("HOME", str(db.parent))  # (nobody's home does not exist)
    d = Daemon(db, [root], prefix=AS_USER)
    try:
        d.start()
        c = d.client()
        wait_for(lambda: run_detail(c, "gone").get("last_step") == 3, "run gone read")
        (root / "gone" / "metrics.jsonl").unlink()
        wait_for(lambda: run_detail(c, "ok").get("last_step") == 5, "run ok read around its bad line")

        def problems() -> list[dict]:
            return c.get("/api/problem_files")

        def by_kind(kind: str) -> dict[str, dict]:
            return {p["path"]: p for p in problems() if p["problem"] == kind}

        failing = wait_for(lambda: by_kind("failing").get(str(locked)), "the locked file listed as failing")
        assert failing["run"] == "locked" and "Permission denied" in failing["reason"]
        assert failing["attempts"] >= 1 and failing["since"] <= failing["next_try_at"]
        wait_for(
            lambda: str(root / "gone" / "metrics.jsonl") in by_kind("deleted"), "the deleted file listed"
        )
        all_problems = problems()
        kinds = {(p["run"], Path(p["path"]).name, p["problem"]) for p in all_problems}
        assert {
            ("ok", "metrics.jsonl", "bad_lines"),
            ("ok", "weights.dat", "not_read"),
            ("locked", "metrics.jsonl", "failing"),
            ("locked", "notes.xyz", "not_read"),
            ("gone", "metrics.jsonl", "deleted"),
            (None, "hidden", "not_read"),
        } <= kinds
        [hidden] = [p for p in all_problems if p["run"] is None]
        assert "cannot be listed" in hidden["reason"] and "Permission denied" in hidden["reason"]
        unreadable = next(p for p in all_problems if p["path"].endswith("notes.xyz"))
        assert "cannot be opened" in unreadable["reason"]  # not "unknown format": it was never looked at
        bad = next(p for p in all_problems if p["problem"] == "bad_lines")
        assert bad["bad_lines"] == 1

        # Per run: the run's detail names its failing file; the filter gives the run's problems only.
        detail = c.get("/api/runs/locked")
        assert [f["path"] for f in detail["failing_files"]] == [str(locked)]
        assert detail["failing_files"][0]["reason"] == failing["reason"]
        assert c.get("/api/runs/ok")["failing_files"] == []
        assert {p["run"] for p in c.get("/api/problem_files", params={"run": "ok"})} == {"ok"}
        with pytest.raises(ApiError) as unknown:
            c.get("/api/problem_files", params={"run": "no-such-run"})
        assert unknown.value.status == 404

        # Overall, without a token: counts only.
        counts = health(d)["problem_files"]
        assert counts["failing"] == 1 and counts["deleted"] == 1 and counts["bad_lines"] == 1
        assert counts["not_read"] >= 2 and "path" not in json.dumps(counts)

        # The CLI through the running collector: the API's JSON, and a table naming the file and why.
        def stable(entries: list[dict]) -> list[tuple]:  # (attempts and times move on with each retry)
            return [(p["run"], p["path"], p["problem"], p["reason"], p["bad_lines"]) for p in entries]

        assert stable(json.loads(cli(db, "files", "--json").stdout)) == stable(problems())
        table = cli(db, "files", "--run", "locked").stdout
        assert str(locked) in table and "failing" in table and "Permission denied" in table

        # Kept in the store: with no collector running, the CLI reads the same from the database.
        d.stop()
        direct = json.loads(cli(db, "files", "--json").stdout)
        assert [p for p in direct if p["problem"] == "failing"][0]["path"] == str(locked)
        unknown_run = cli(db, "files", "--run", "no-such-run", check=False)
        assert (
            unknown_run.returncode == 1 and "no run 'no-such-run'" in unknown_run.stderr
        )  # as the API's 404

        # Readable again: the next collector reads it at once and it is failing no more.
        locked.chmod(stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)
        d.start()
        c = d.client()
        wait_for(lambda: run_detail(c, "locked").get("last_step") == 10, "the unlocked file read")
        wait_for(lambda: c.get("/api/runs/locked")["failing_files"] == [], "the failure cleared")
        assert not by_kind("failing") and health(d)["problem_files"]["failing"] == 0
    finally:
        d.ensure_stopped()
