"""Ingest hardening (issue 11): no input stops another line, file or run; the parser decides what a value is,
on both read paths. Real DuckDB files, real files on disk, the real CLI as a subprocess."""

from __future__ import annotations

import json
import math
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
    assert ing.failing == {}
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
    first = ing.failing[broken]
    assert first.attempts == 1 and "IsADirectoryError" in first.reason
    assert any(e.path == broken and "failure 1 in a row" in e.message for e in ing.events)
    ing.ingest(paths)  # before its retry time: not tried again
    assert ing.failing[broken].attempts == 1
    while time.monotonic() < first.retry_at:
        time.sleep(0.05)
    ing.ingest(paths)
    second = ing.failing[broken]
    assert second.attempts == 2 and second.retry_at - first.retry_at > 1.0  # waits longer each time

    shutil.rmtree(root / "a" / "metrics.jsonl")
    (root / "a" / "metrics.jsonl").write_text(verl(1, loss=1.0) + verl(5, loss=5.0))
    while time.monotonic() < second.retry_at:
        time.sleep(0.05)
    ing.ingest(paths)
    assert broken not in ing.failing and stored(store, "a")[("loss", 5)] == 5.0
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
