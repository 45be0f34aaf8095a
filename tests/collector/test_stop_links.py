"""A stop request never goes through a link planted in the run folder (issue 24.2), against real collector
processes: a `[stop]` rule and `collector stop` write a fresh file of their own, never the file a
predictable temp name links to outside the roots; a `runwatch.stop` that is a link is refused, said so, and
its target's text is never read back (`POST .../stop`, `collector stop --json`)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from collector.api.client import ApiError
from collector.core.stop_request import STOP_FILE
from tests.collector.test_daemon_support import REPO, cli, wait_for
from tests.collector.test_stop import daemon, write_running_run  # noqa: F401 (the fixture)

SECRET = "TOP SECRET: not a stop request\n"


@pytest.fixture
def outside(tmp_path):
    """A file outside the watched roots that a planted link points to."""
    path = tmp_path / "outside" / "precious.txt"
    path.parent.mkdir()
    path.write_text(SECRET)
    return path


def assert_request_written_plainly(run_dir, by: str) -> None:
    request_file = run_dir / STOP_FILE
    assert request_file.is_file() and not request_file.is_symlink()
    assert json.loads(request_file.read_text())["by"] == by
    assert not list(run_dir.glob(f".{STOP_FILE}.*.tmp")) or all(
        p.is_symlink() for p in run_dir.glob(f".{STOP_FILE}.*.tmp")
    )


def test_a_stop_rule_never_writes_through_a_planted_temp_link(daemon, outside):  # noqa: F811
    d, root, _ = daemon
    d.start()
    staged = root.parent / "staged"
    write_running_run(staged, nan_step=30)
    # The name the collector used for its temp file: `.runwatch.stop.<its pid>.tmp`, planted before the
    # folder (moved in whole) is seen.
    (staged / f".{STOP_FILE}.{d.proc.pid}.tmp").symlink_to(outside)
    run = root / "guarded" / "nan"
    staged.rename(run)
    wait_for((run / STOP_FILE).exists, "the stop request of the run with a NaN")
    assert outside.read_text() == SECRET
    assert_request_written_plainly(run, "rule")
    assert d.stop() == 0


def test_collector_stop_never_writes_through_a_planted_temp_link(tmp_path, outside):
    root, db = tmp_path / "runs", tmp_path / "rw.duckdb"
    run = root / "a"
    write_running_run(run, nan_step=None)
    cli(db, "ingest", str(root))
    # The link is planted for the very pid `collector stop` runs as (`exec` keeps the shell's pid).
    script = (
        f'ln -s "$1" "$2/.{STOP_FILE}.$$.tmp" && exec "$3" -m collector stop a --db "$4" --reason planted'
    )
    out = subprocess.run(
        ["sh", "-c", script, "sh", str(outside), str(run), sys.executable, str(db)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert outside.read_text() == SECRET
    assert_request_written_plainly(run, "person")


def test_a_linked_stop_file_is_refused_and_its_target_never_read(daemon, outside):  # noqa: F811
    d, root, db = daemon
    run = root / "a"
    write_running_run(run, nan_step=None)
    (run / STOP_FILE).symlink_to(outside)
    d.start()
    client = d.client()
    wait_for(lambda: any(r["id"] == "a" for r in client.get("/api/runs")), "the run")
    with pytest.raises(ApiError) as refused:
        client.post("/api/runs/a/stop", {"reason": "x"})
    assert refused.value.status == 409
    assert "is a symbolic link" in str(refused.value) and "TOP SECRET" not in str(refused.value)
    state = client.get("/api/runs/a/stop")  # no stop can be written there, and why: the link is not read
    assert state["state"] == "refused" and "is a symbolic link" in state["outcome"], state
    assert "TOP SECRET" not in json.dumps(client.get("/api/runs/a"))
    through_api = cli(db, "stop", "a", "--json", check=False)
    assert d.stop() == 0
    direct = cli(db, "stop", "a", "--json", check=False)  # no collector: the CLI opens the database
    for out in (through_api, direct):
        assert out.returncode == 1 and "is a symbolic link" in out.stderr
        assert "TOP SECRET" not in out.stdout + out.stderr
    assert outside.read_text() == SECRET and (run / STOP_FILE).is_symlink()


@pytest.mark.parametrize("swapped", ["run folder", "folder above it"])
def test_a_run_folder_swapped_for_a_link_out_of_the_roots_gets_no_request(daemon, tmp_path, swapped):  # noqa: F811
    d, root, db = daemon
    run = root / "team" / "a"
    write_running_run(run, nan_step=None)
    d.start()
    client = d.client()
    wait_for(lambda: any(r["id"] == "team/a" for r in client.get("/api/runs")), "the run")
    elsewhere = tmp_path / "elsewhere"  # outside the roots: the stop request must not land there
    if swapped == "run folder":
        write_running_run(elsewhere, nan_step=None)
        run.rename(tmp_path / "moved")
        run.symlink_to(elsewhere)
    else:
        write_running_run(elsewhere / "a", nan_step=None)
        run.parent.rename(tmp_path / "moved")
        run.parent.symlink_to(elsewhere)
    with pytest.raises(ApiError) as refused:
        client.post("/api/runs/team/a/stop", {"reason": "x"})
    assert refused.value.status == 409 and "link" in str(refused.value), refused.value
    through_api = cli(db, "stop", "team/a", check=False)
    assert d.stop() == 0
    direct = cli(db, "stop", "team/a", check=False)  # no collector: the CLI opens the database
    for out in (through_api, direct):
        assert out.returncode == 1 and "link" in out.stderr, out.stderr
    assert not list(elsewhere.rglob(f"*{STOP_FILE}*"))
