"""Ingest hardening (issue 11): no input stops another line, file or run; the parser decides what a value is,
on both read paths. Real DuckDB files, real files on disk, the real CLI as a subprocess."""

from __future__ import annotations

import json
import math
import random
import shutil
import time

import pytest

from collector.ingest.bulk import BULK_MIN_BYTES
from collector.ingest.reader import Ingestor
from collector.store import read as store_read
from collector.store.db import Store
from tests.collector.test_daemon_support import cli_json

BIG_STEP = 2**63  # one past the largest 64-bit step


def stored(store: Store, run: str) -> dict[tuple[str, int], float]:
    rows = store.rows("SELECT metric, step, value FROM points WHERE run_id = ?", [run])
    return {(m, s): v for m, s, v in rows}


def quarantined(store: Store, run: str) -> list[tuple[int, str]]:
    return [(b["line"], b["reason"]) for b in store_read.quarantined(store, run)]


def verl(step: int, **data: object) -> str:
    return json.dumps({"step": step, "data": data}) + "\n"


def too_big_runs(root) -> None:
    """Three runs, each with one step beyond 64 bits among good lines, and a good run beside them."""
    (root / "jsonl").mkdir(parents=True)
    (root / "jsonl" / "metrics.jsonl").write_text(
        verl(1, loss=1.0) + f'{{"step": {BIG_STEP}, "data": {{"loss": 2.0}}}}\n' + verl(2, loss=3.0)
    )
    (root / "csv").mkdir()
    (root / "csv" / "training_history.csv").write_text("step,loss\n1,1.0\n1e19,2.0\n2,3.0\n")
    (root / "console").mkdir()
    (root / "console" / "train.log").write_text(
        "step:1 - loss:1.0\nstep:99999999999999999999 - loss:2.0\nstep:2 - loss:3.0\n"
    )
    (root / "good").mkdir()
    (root / "good" / "metrics.jsonl").write_text(verl(1, loss=0.5) + verl(2, loss=0.25))


def test_a_step_beyond_64_bits_is_a_quarantined_line_and_no_other_line_or_run_is_lost(tmp_path):
    root = tmp_path / "root"
    too_big_runs(root)
    store = Store(tmp_path / "t.duckdb")
    ing = Ingestor(store, [root])
    ing.ingest_all()  # one shared transaction holds all four runs: none may cost another its points
    for run, bad_line in (("jsonl", 2), ("csv", 3), ("console", 2)):  # (the CSV's line 1 is its header)
        assert stored(store, run) == {("loss", 1): 1.0, ("loss", 2): 3.0}, run
        [(line, reason)] = quarantined(store, run)
        assert line == bad_line and "beyond the 64-bit step range" in reason, (run, reason)
    assert stored(store, "good") == {("loss", 1): 0.5, ("loss", 2): 0.25}
    assert ing.failures.by_path == {}
    ing.close()
    store.close()


def test_the_cli_ingests_around_a_step_beyond_64_bits_and_exits_0(tmp_path):
    root = tmp_path / "root"
    too_big_runs(root)
    db = tmp_path / "cli.duckdb"
    out = cli_json(db, "ingest", str(root))  # raises with the stderr when the exit status is not 0
    assert out["points_added"] == 2 * 4
    runs = {r["id"]: r for r in cli_json(db, "runs")}
    assert set(runs) == {"jsonl", "csv", "console", "good"}


@pytest.mark.parametrize("bulk", [False, True])
def test_a_5000_digit_integer_is_one_quarantined_line_and_the_file_goes_on(tmp_path, bulk):
    """Python refuses to read integers of more than 4,300 digits (a plain ValueError); DuckDB reads one as
    infinity. Either way the line is quarantined, the lines around it are stored, the offset moves on."""
    root = tmp_path / "root"
    (root / "r").mkdir(parents=True)
    f = root / "r" / "metrics.jsonl"
    lines = [verl(i, loss=1.0 / i) for i in range(1, 40_001 if bulk else 11)]
    lines[4] = '{"step": 5, "data": {"loss": ' + "7" * 5000 + "}}\n"
    f.write_text("".join(lines))
    assert (f.stat().st_size >= BULK_MIN_BYTES) == bulk
    store = Store(tmp_path / "t.duckdb")
    ing = Ingestor(store, [root])
    ing.ingest_all()
    got = stored(store, "r")
    assert len(got) == len(lines) - 1 and ("loss", 5) not in got and got[("loss", 6)] == 1.0 / 6
    [(line, reason)] = quarantined(store, "r")
    assert line == 5 and "4300 digits" in reason
    assert store_read.sources(store, "r")[0]["offset"] == f.stat().st_size
    ing.close()
    store.close()


@pytest.mark.parametrize("bulk", [False, True])
def test_a_numeric_string_is_skipped_and_counted_on_both_read_paths(tmp_path, bulk):
    """`"loss": "1.5"` is not a number: the parser skips it and says how many it skipped; a backlog read by
    DuckDB (which would cast the string) gives the same points."""
    root = tmp_path / "root"
    (root / "r").mkdir(parents=True)
    f = root / "r" / "metrics.jsonl"
    steps = 40_000 if bulk else 10
    lines = [verl(i, loss=1.0 / i, lr=1e-4) for i in range(1, steps + 1)]
    lines[2] = verl(3, loss="1.5", lr=1e-4)
    lines[-2] = verl(steps - 1, loss=0.5, lr="high")
    f.write_text("".join(lines))
    assert (f.stat().st_size >= BULK_MIN_BYTES) == bulk
    store = Store(tmp_path / "t.duckdb")
    ing = Ingestor(store, [root])
    ing.ingest_all()
    got = stored(store, "r")
    assert len(got) == 2 * steps - 2 and ("loss", 3) not in got and ("lr", steps - 1) not in got
    assert got[("lr", 3)] == 1e-4 and got[("loss", steps - 1)] == 0.5
    assert quarantined(store, "r") == []
    assert any("not numbers skipped (2 a string)" in e.message for e in ing.events)
    ing.close()
    store.close()


def test_a_value_beyond_float_range_and_an_unpaired_surrogate_name(tmp_path):
    root = tmp_path / "root"
    (root / "r").mkdir(parents=True)
    f = root / "r" / "metrics.jsonl"
    f.write_text(
        verl(1, loss=1.0)
        + '{"step": 2, "data": {"loss": ' + "9" * 400 + "}}\n"
        + '{"step": 3, "data": {"\\ud800": 1.0}}\n'
        + verl(4, loss=4.0)
    )  # fmt: skip
    store = Store(tmp_path / "t.duckdb")
    ing = Ingestor(store, [root])
    ing.ingest_all()
    got = stored(store, "r")
    assert got[("loss", 1)] == 1.0 and got[("loss", 2)] == math.inf and got[("loss", 4)] == 4.0
    [(line, reason)] = quarantined(store, "r")
    assert line == 3 and "is not valid text" in reason
    ing.close()
    store.close()


def test_a_file_that_cannot_be_read_is_marked_and_retried_with_backoff_and_others_go_on(tmp_path):
    """A source replaced by a folder of the same name cannot be read at all: the failure is that file's
    alone (named, kept as it was, tried again later, less often), the other runs of the cycle are stored."""
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    (root / "a" / "metrics.jsonl").write_text(verl(1, loss=1.0))
    (root / "b" / "metrics.jsonl").write_text(verl(1, loss=1.0))
    store = Store(tmp_path / "t.duckdb")
    ing = Ingestor(store, [root])
    paths = ing.discover()
    ing.ingest(paths)
    broken = str(root / "a" / "metrics.jsonl")
    (root / "a" / "metrics.jsonl").unlink()
    (root / "a" / "metrics.jsonl").mkdir()
    (root / "b" / "metrics.jsonl").write_text(verl(1, loss=1.0) + verl(2, loss=2.0))

    ing.ingest(paths)
    assert stored(store, "b") == {("loss", 1): 1.0, ("loss", 2): 2.0}
    first = ing.failures.by_path[broken]
    assert first.attempts == 1 and "IsADirectoryError" in first.reason
    assert any(e.path == broken and "failure 1 in a row" in e.message for e in ing.events)
    ing.ingest(paths)  # before its retry time: not tried again
    assert ing.failures.by_path[broken].attempts == 1
    while time.monotonic() < first.retry_at:
        time.sleep(0.05)
    ing.ingest(paths)
    second = ing.failures.by_path[broken]
    assert second.attempts == 2 and second.retry_at - first.retry_at > 1.0  # waits longer each time

    shutil.rmtree(root / "a" / "metrics.jsonl")
    (root / "a" / "metrics.jsonl").write_text(verl(1, loss=1.0) + verl(5, loss=5.0))
    while time.monotonic() < second.retry_at:
        time.sleep(0.05)
    ing.ingest(paths)
    assert broken not in ing.failures.by_path and stored(store, "a")[("loss", 5)] == 5.0
    ing.close()
    store.close()


def test_a_csv_header_written_again_with_the_step_column_moved_is_the_header_in_force(tmp_path):
    """A writer that restarts may write a new header with other columns in another order: the rows after it
    are read under it (never under the old one), in the same read or a later one."""
    root = tmp_path / "root"
    (root / "r").mkdir(parents=True)
    f = root / "r" / "training_history.csv"
    f.write_text("step,loss,lr\n1,1.0,0.1\nloss,val/loss,step\n0.5,0.7,2\n")
    store = Store(tmp_path / "t.duckdb")
    ing = Ingestor(store, [root])
    ing.ingest_all()
    with f.open("a") as out:
        out.write("0.4,0.6,3\nglobal_step,acc\n4,0.9\n")
    ing.ingest_all()
    assert stored(store, "r") == {
        ("loss", 1): 1.0,
        ("lr", 1): 0.1,
        ("loss", 2): 0.5,
        ("val/loss", 2): 0.7,
        ("loss", 3): 0.4,
        ("val/loss", 3): 0.6,
        ("acc", 4): 0.9,
    }
    assert quarantined(store, "r") == []
    ing.close()
    store.close()


def test_a_csv_header_with_a_latin1_byte_keeps_its_file(tmp_path):
    root = tmp_path / "root"
    (root / "r").mkdir(parents=True)
    (root / "r" / "training_history.csv").write_bytes(
        b"step,temp \xb0C,loss\n1,40,1.0\n2,41,\xff\n3,42,0.5\n"
    )
    store = Store(tmp_path / "t.duckdb")
    ing = Ingestor(store, [root])
    ing.ingest_all()
    assert stored(store, "r") == {
        ("temp \ufffdC", 1): 40.0,
        ("loss", 1): 1.0,
        ("temp \ufffdC", 3): 42.0,
        ("loss", 3): 0.5,
    }
    [(line, reason)] = quarantined(store, "r")  # a data row with a bad byte is still a bad line
    assert line == 3 and reason.startswith("non-UTF-8 bytes")
    ing.close()
    store.close()


def loss_lines(first: int, last: int) -> str:
    return "".join(
        verl(step, **{"train/loss": 1.0 / step, "train/lr": step * 1e-6}) for step in range(first, last + 1)
    )


def expected_points(last: int) -> dict[tuple[str, int], float]:
    out = {}
    for step in range(1, last + 1):
        out[("train/loss", step)] = 1.0 / step
        out[("train/lr", step)] = step * 1e-6
    return out


def test_lines_written_before_a_rotation_while_the_collector_was_down_are_read(tmp_path):
    root = tmp_path / "root"
    (root / "r").mkdir(parents=True)
    f = root / "r" / "metrics.jsonl"
    f.write_text(loss_lines(1, 10))
    store = Store(tmp_path / "t.duckdb")
    ing = Ingestor(store, [root])
    ing.ingest_all()
    ing.close()  # the collector stops; the trainer goes on, then rotates its file
    with f.open("a") as out:
        out.write(loss_lines(11, 15))
    f.rename(root / "r" / "metrics.jsonl.1")
    f.write_text(loss_lines(16, 20))
    ing = Ingestor(store, [root])  # the next collector, the same database
    ing.ingest_all()
    assert stored(store, "r") == expected_points(20)
    assert any("renamed to" in e.message and "metrics.jsonl.1" in e.message for e in ing.events)
    src, rotated = sorted(store_read.sources(store, "r"), key=lambda x: x["path"])
    assert (src["offset"], src["lines"], src["segment"]) == (f.stat().st_size, 5, 1)
    # The renamed file is a source of its own that starts where its old life stopped: read once, not again.
    old_life = root / "r" / "metrics.jsonl.1"
    assert rotated["path"] == str(old_life) and rotated["offset"] == old_life.stat().st_size
    assert store.rows("SELECT count(*) FROM points_replaced")[0][0] == 0
    ing.ingest_all()
    assert stored(store, "r") == expected_points(20)
    ing.close()
    store.close()


def test_a_root_renamed_away_and_back_is_the_same_files_not_read_again(tmp_path):
    root = tmp_path / "root"
    (root / "r").mkdir(parents=True)
    f = root / "r" / "metrics.jsonl"
    f.write_text(loss_lines(1, 10))
    store = Store(tmp_path / "t.duckdb")
    ing = Ingestor(store, [root])
    paths = ing.discover()
    ing.ingest_all(paths)
    root.rename(tmp_path / "away")
    ing.ingest(paths)  # gone: marked deleted, what was read stays
    assert store_read.sources(store, "r")[0]["state"] == "deleted"
    (tmp_path / "away").rename(root)
    with f.open("a") as out:
        out.write(loss_lines(11, 12))
    ing.ingest_all(paths)
    [src] = store_read.sources(store, "r")
    assert (src["state"], src["segment"], src["lines"]) == ("active", 0, 12)  # read on, not from 0
    assert stored(store, "r") == expected_points(12)
    assert any("is back, the same file" in e.message for e in ing.events)
    ing.close()
    store.close()


def test_kill_9_during_rotations_truncations_and_root_renames_keeps_every_point(tmp_path):
    """A trainer that appends, rotates its file (`metrics.jsonl` -> `metrics.jsonl.N`), resumes from a
    checkpoint (its file cut back, then the same steps written again) and has its folder renamed away and
    back, while the collector is killed at random moments and restarted (and the trainer goes on while it is
    down): in the end the store holds every step the trainer wrote, each once, with its value."""
    from tests.collector.test_daemon_support import Daemon, wait_for

    rng = random.Random(20261124)
    root = tmp_path / "root"
    run_dir = root / "r"
    run_dir.mkdir(parents=True)
    f = run_dir / "metrics.jsonl"
    f.write_text(loss_lines(1, 3000))  # a backlog, so some kills land mid-read
    state = {"next": 3001, "life_start": 1, "rotations": 0}
    done: list[str] = []
    db = tmp_path / "rw.duckdb"
    daemon = Daemon(db, [root])

    def source() -> dict | None:
        try:
            return daemon.client().get("/api/runs/r")["sources"][0]
        except Exception:  # not listening yet, or the run not registered yet
            return None

    def append(count: int) -> None:
        with f.open("a") as out:
            out.write(loss_lines(state["next"], state["next"] + count - 1))
        state["next"] += count

    def act(up: bool) -> None:
        choice = rng.random()
        if choice < 0.4:
            append(rng.randint(50, 600))
            done.append("append")
        elif choice < 0.6 and up:
            # Rotation, the last lines perhaps unread; the collector must see the new file before it can be
            # renamed in turn (a file born and rotated away while no collector runs is never known).
            before = source()
            state["rotations"] += 1
            f.rename(run_dir / f"metrics.jsonl.{state['rotations']}")
            state["life_start"] = state["next"]
            f.write_text("")
            append(5)
            wait_for(
                lambda: (
                    (now := source()) is not None
                    and (before is None or now["segment"] > before["segment"])
                    and (now["offset"], now["lines"]) == (f.stat().st_size, 5)
                ),
                "the new file read",
            )
            done.append("rotate")
        elif choice < 0.8 and state["next"] > state["life_start"] + 10:
            # Resume from a checkpoint: the file is cut back to before step `back`, which is written again.
            back = rng.randint(state["life_start"], state["next"] - 1)
            f.write_text(loss_lines(state["life_start"], back - 1))
            f.write_text(loss_lines(state["life_start"], back - 1) + loss_lines(back, state["next"] - 1))
            done.append("truncate")
        else:
            root.rename(tmp_path / "away")
            time.sleep(rng.uniform(0.05, 0.4))
            (tmp_path / "away").rename(root)
            done.append("root rename")

    try:
        daemon.start()
        wait_for(lambda: (src := source()) is not None and src["offset"] > 0, "the backlog started")
        for _ in range(8):
            daemon.kill9()
            for _ in range(rng.randint(0, 2)):
                act(up=False)
            daemon.start(wait=rng.random() < 0.6)
            for _ in range(rng.randint(1, 3)):
                act(up=True)
                time.sleep(rng.uniform(0.0, 0.6))
        daemon.kill9()
        daemon.start()
        want = 2 * (state["next"] - 1)
        wait_for(
            lambda: sum(m["points"] for m in daemon.client().get("/api/runs/r")["metrics"]) >= want,
            "every step stored",
        )
        assert daemon.stop() == 0
    finally:
        daemon.ensure_stopped()
    print("actions:", ", ".join(done))
    assert {"append", "rotate", "truncate", "root rename"} <= set(done)
    store = Store(db)
    try:
        rows = store.rows("SELECT metric, step, value FROM points WHERE run_id = 'r'")
        got = {(m, s): v for m, s, v in rows}
        assert len(rows) == len(got), "a (metric, step) is stored twice"
        assert got == expected_points(state["next"] - 1)  # point by point: every step, its value
        assert store.rows("SELECT count(*) FROM quarantine")[0][0] == 0
    finally:
        store.close()


def test_quarantine_and_replaced_answer_404_for_an_unknown_run(tmp_path):
    """Like every other route of a run: a run the store does not know is a 404 naming it, not `[]`."""
    from collector.api.client import ApiError
    from tests.collector.test_daemon_support import Daemon, wait_for

    root = tmp_path / "root"
    (root / "r").mkdir(parents=True)
    (root / "r" / "metrics.jsonl").write_text(verl(1, loss=1.0) + "{broken\n")
    daemon = Daemon(tmp_path / "rw.duckdb", [root]).start()
    try:
        client = daemon.client()
        for path, params in (("quarantine", {}), ("replaced", {"metric": "loss"})):
            with pytest.raises(ApiError) as e:
                client.get(f"/api/runs/nope/{path}", params=params)
            assert e.value.status == 404 and "nope" in str(e.value)
        [bad] = wait_for(lambda: _quarantine_of(client, "r"), "the bad line quarantined")
        assert bad["line"] == 2
        assert client.get("/api/runs/r/replaced", params={"metric": "loss"}) == []
    finally:
        daemon.ensure_stopped()


def _quarantine_of(client, run: str) -> list[dict]:
    try:
        return client.get(f"/api/runs/{run}/quarantine")
    except Exception:  # the run not registered yet
        return []


@pytest.mark.parametrize("finished_later", [False, True])
def test_a_line_over_64_mib_is_one_quarantine_entry(tmp_path, finished_later):
    """The line is quarantined once, whole, however its bytes arrive; the lines after it keep their numbers."""
    from collector.ingest.chunk import MAX_LINE_BYTES

    root = tmp_path / "root"
    (root / "r").mkdir(parents=True)
    f = root / "r" / "metrics.jsonl"
    long_line = b'{"step": 2, "data": {"note": "' + b"x" * (MAX_LINE_BYTES + (4 << 20)) + b'"}}\n'
    head, rest = long_line[: MAX_LINE_BYTES + (1 << 20)], long_line[MAX_LINE_BYTES + (1 << 20) :]
    f.write_bytes(
        verl(1, loss=1.0).encode() + head + (b"" if finished_later else rest + verl(3, loss=3.0).encode())
    )
    store = Store(tmp_path / "t.duckdb")
    ing = Ingestor(store, [root])
    ing.ingest_all()
    if finished_later:
        with f.open("ab") as out:
            out.write(rest + verl(3, loss=3.0).encode())
        ing.ingest_all()
    assert stored(store, "r") == {("loss", 1): 1.0, ("loss", 3): 3.0}
    [(line, reason)] = quarantined(store, "r")
    assert line == 2 and "longer than" in reason
    src = store_read.sources(store, "r")[0]
    assert (src["offset"], src["lines"]) == (f.stat().st_size, 3)
    ing.close()
    store.close()


def test_steps_across_the_whole_int64_range_chart_without_overflow(tmp_path):
    """Issue 11 item 3: the default chart query buckets by step; with over 2,000 points and steps from -2**63 to
    2**63-1 (a NaN among them, which takes the finite-range pass too) it answers, every point in a bucket."""
    run = tmp_path / "root" / "r"
    run.mkdir(parents=True)
    steps = [-(2**63), *range(1, 3001), 2**52, 2**62, 2**63 - 1]
    lines = [verl(s, loss=1.0 + s % 7) for s in steps]
    lines[1500] = verl(steps[1500], loss=math.nan)
    (run / "metrics.jsonl").write_text("".join(lines))
    store = Store(tmp_path / "t.duckdb")
    ing = Ingestor(store, [tmp_path / "root"])
    ing.ingest_all()
    out = store_read.series(store, "r", "loss", 2000)
    assert out["downsampled"] and out["total_points"] == len(steps)
    assert out["steps"][0] == -(2**63) and out["steps"][-1] == 2**63 - 1
    assert sum(out["nonfinite"]) == 1 and any(math.isnan(v) for v in out["values"])
    ing.close()
    store.close()
