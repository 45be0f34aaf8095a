"""CSV backlogs through DuckDB's CSV reader (collector.ingest.bulk_csv) on a real DuckDB file: what is stored,
quarantined and kept as the source's position is what the CSV parser alone stores, row for row."""

from __future__ import annotations

import math
import os
import random
from pathlib import Path

from collector.api.run_files import source_warning
from collector.ingest.bulk_csv import CsvBulkReader
from collector.ingest.reader import Ingestor
from collector.store import read as store_read
from collector.store.db import Store

HEADER = "step,train/loss,lr,grad_norm,wall_time,\n"  # a wall time (not a metric), an unnamed column


def row(step: int, rng: random.Random) -> str:
    cells = [rng.random() * 3, 1e-4 * (1 - step / 1e6), rng.choice(["nan", "inf", "-inf", "", "1e-5", "0.5"])]
    loss, lr, grad = (c if isinstance(c, str) else repr(c) for c in cells)
    return f"{step},{loss},{lr},{grad},{1.7e9 + step:.3f},{rng.choice(['', '7'])}"


def write_history(path: Path, steps: int, bad: dict[int, str] | None = None, crlf: bool = False) -> None:
    """`steps` rows of a training history; `bad` puts a given line in place of the row of that step."""
    rng = random.Random(steps)
    end = "\r\n" if crlf else "\n"
    with path.open("w", newline="") as f:
        f.write(HEADER.replace("\n", end))
        for step in range(1, steps + 1):
            f.write((bad or {}).get(step, row(step, rng)) + end)


def snapshot(store: Store, run: str) -> dict:
    """Everything a read leaves: points (with wall times), replaced points, quarantine, summaries, position."""
    points = store.rows(
        "SELECT metric, step, value, wall_time FROM points WHERE run_id = ? ORDER BY metric, step", [run]
    )
    return {
        "points": [(m, s, "nan" if math.isnan(v) else v, w) for m, s, v, w in points],
        "replaced": store.rows("SELECT metric, step, value FROM points_replaced ORDER BY ALL"),
        "quarantine": [(b["line"], b["reason"]) for b in store_read.quarantined(store, run)],
        "stats": sorted(
            (x["metric"], x["points"], x["last_step"], str(x["last_value"]))
            for x in store_read.metric_stats(store, run)
        ),
        "source": store.rows("SELECT byte_offset, lines, segment, parser_state, tail_sig FROM sources"),
    }


def ingest(tmp_path: Path, root: Path, name: str, bulk: bool) -> tuple[Store, Ingestor]:
    store = Store(tmp_path / f"{name}.duckdb")
    ing = Ingestor(store, [root], bulk=bulk, bulk_bytes=1 << 20, chunk_bytes=256 << 10)
    ing.bulk_rows = 0  # rows the CSV bulk reader stored (its real reads, counted on the way)
    reader = ing.bulk_readers["csv"]
    read = reader.read

    def counted(s, st, after):
        done = read(s, st, after)
        ing.bulk_rows += done.source.lines - s.lines if done else 0
        return done

    reader.read = counted
    ing.ingest_all()
    return store, ing


def both_paths(tmp_path: Path, root: Path, run: str) -> tuple[dict, dict]:
    """What the bulk path and the parser alone store; most rows must have gone through DuckDB (the parser reads a chunk at each bad row and a backlog under 1 MiB)."""
    out = []
    for bulk in (True, False):
        store, ing = ingest(tmp_path, root, f"{run}-{bulk}", bulk)
        out.append(snapshot(store, run))
        if bulk:
            assert ing.bulk_rows > 0.6 * out[0]["source"][0][1], "most rows through DuckDB"
        ing.close()
        store.close()
    return out[0], out[1]


def test_a_clean_backlog_goes_through_duckdb_with_every_cell_counted(tmp_path):
    root = tmp_path / "root"
    (root / "r").mkdir(parents=True)
    f = root / "r" / "training_history.csv"
    write_history(f, 60_000, crlf=True)  # ~4 MiB; Python's csv module writes \r\n
    store = Store(tmp_path / "t.duckdb")
    ing = Ingestor(store, [root], bulk_bytes=1 << 20)
    ing.discover()
    s = ing.sources[str(f)]
    reader = ing.bulk_readers["csv"]
    assert isinstance(reader, CsvBulkReader)
    reader.direct_bytes = 0  # the copied way, 1 MiB a chunk (a whole file is read in place: tested below)
    done = reader.read(s, f.stat(), -1)
    assert done is not None and done.more  # one 1 MiB chunk, stored by DuckDB
    lines = f.read_bytes()[: done.source.offset].count(b"\n")
    assert done.source.lines == lines
    # Every row has a loss and lr; grad_norm is empty in about 1 row in 6.
    rows = lines - 1
    grads = sum(1 for x in f.read_bytes()[: done.source.offset].split(b"\r\n")[1:] if x and x.split(b",")[3])
    assert done.points == 2 * rows + grads
    assert done.source.points == done.points  # the source's count, which its 0-points warning reads
    ing.ingest_all()
    ing.close()
    store.close()
    got, want = both_paths(tmp_path, root, "r")
    assert got == want
    assert len(got["points"]) > 150_000 and got["quarantine"] == []
    assert any(v == "nan" for _, _, v, _ in got["points"]) and any(
        v == -math.inf for _, _, v, _ in got["points"]
    )
    assert all(w == 1.7e9 + s for _, s, _, w in got["points"])  # the wall-time column, for every point


def test_bad_rows_in_the_middle_are_quarantined_with_their_line_numbers(tmp_path):
    root = tmp_path / "root"
    (root / "r").mkdir(parents=True)
    f = root / "r" / "training_history.csv"
    bad = {
        9_000: "9000,0.5",  # short row
        9_001: "9001,0.5,1e-4,1,1700009001,,extra",  # long row
        9_002: "9002,n/a,1e-4,1,1700009002,",  # a text cell: skipped by the parser, the rest stored
        9_003: "9002.5,0.5,1e-4,1,1700009003,",  # not a whole step
        9_004: "",  # a blank line
        9_005: "9005,+-1,1e-4,1,1700009005,",  # DuckDB would read +-1 as -1: the parser skips it
        30_000: HEADER.strip(),  # the header written again (a restarted writer)
        30_001: '30001,"0.25",1e-4,1,1700030001,',  # quoted
        30_002: "30002,0.25,1e-4,1,1700030002,\r7",  # a lone carriage return
    }
    write_history(f, 60_000, bad)  # ~4.5 MiB
    with f.open("a") as out:  # a header with one more column, and rows under it: seven fields
        out.write("step,train/loss,lr,grad_norm,wall_time,,eval/loss\n")
        for step in range(60_001, 80_001):
            out.write(f"{step},0.1,1e-5,1.0,{1.7e9 + step},,{0.3 if step % 10 == 0 else ''}\n")
    got, want = both_paths(tmp_path, root, "r")
    assert got == want
    lines = {step + 1: text for step, text in bad.items()}  # (line 1 is the header)
    quarantined = dict(got["quarantine"])
    # short, long, not a whole step, a lone \r (the parser's csv reader refuses it)
    assert sorted(quarantined) == [9_001, 9_002, 9_004, 30_003]
    assert "expected 6 fields" in quarantined[9_001] and "not a whole number" in quarantined[9_004]
    assert lines[30_003].endswith("\r7")
    stored = {(m, s) for m, s, *_ in got["points"]}
    assert ("eval/loss", 60_010) in stored and ("eval/loss", 60_011) not in stored
    assert ("lr", 9_002) in stored and ("train/loss", 9_002) not in stored  # the text cell alone is skipped
    assert ("lr", 9_005) in stored and ("train/loss", 9_005) not in stored
    assert ("train/loss", 30_001) in stored and ("train/loss", 30_002) not in stored
    assert got["source"][0][:2] == (f.stat().st_size, 80_002)


def test_incremental_reads_continue_after_a_bulk_read(tmp_path):
    root = tmp_path / "root"
    (root / "r").mkdir(parents=True)
    f = root / "r" / "training_history.csv"
    write_history(f, 30_000)
    store, ing = ingest(tmp_path, root, "live", True)
    rng = random.Random(5)
    with f.open("a") as out:  # a few live rows, a partial one, then a big backlog again (bulk, past offset 0)
        out.write("".join(row(s, rng) + "\n" for s in range(30_001, 30_011)) + "30011,0.5")
    ing.ingest_all()
    assert store_read.sources(store, "r")[0]["lines"] == 30_011
    with f.open("a") as out:
        out.write(",1e-4,1,1700030011,\n" + "".join(row(s, rng) + "\n" for s in range(30_012, 60_000)))
    ing.ingest_all()
    got = snapshot(store, "r")
    ing.close()
    store.close()
    python, _ = ingest(tmp_path, root, "python", False)
    assert got == snapshot(python, "r")
    assert got["source"][0][:2] == (f.stat().st_size, 60_000)
    python.close()


def test_a_whole_file_is_read_in_place_with_its_points_counted(tmp_path):
    root = tmp_path / "root"
    (root / "r").mkdir(parents=True)
    f = root / "r" / "training_history.csv"
    write_history(f, 40_000)
    store = Store(tmp_path / "t.duckdb")
    ing = Ingestor(store, [root], bulk_bytes=1 << 20)
    ing.discover()
    s = ing.sources[str(f)]
    done = ing.bulk_readers["csv"].read(s, f.stat(), -1)
    # One read of the whole file (no 1 MiB chunks: nothing copied), all its rows, its end as the offset.
    assert done is not None and not done.more
    assert (done.source.offset, done.source.lines) == (f.stat().st_size, 40_001)
    assert done.source.points == done.points == store.rows("SELECT count(*) FROM points")[0][0] > 80_000
    assert os.listdir(ing.bulk_reader.scratch) == []
    ing.sources[str(f)] = done.source
    ing.ingest_all()
    assert source_warning(store_read.sources(store, "r")[0]) is None  # no "0 points from N lines"
    got = snapshot(store, "r")
    ing.close()
    store.close()
    python, _ = ingest(tmp_path, root, "python", False)
    assert got == snapshot(python, "r")
    python.close()


def test_a_bad_row_in_a_whole_file_stops_the_read_in_place_and_is_quarantined(tmp_path):
    root = tmp_path / "root"
    (root / "r").mkdir(parents=True)
    f = root / "r" / "training_history.csv"
    # DuckDB reads a text cell as a failed cast, but a sign pair it would read as a number: the count in the
    # bytes must catch that one.
    write_history(f, 40_000, {35_000: "35000,+-1,1e-4,1,1700035000,"})
    store = Store(tmp_path / "t.duckdb")
    ing = Ingestor(store, [root], bulk_bytes=64 << 20)
    ing.discover()
    s = ing.sources[str(f)]
    done = ing.bulk_readers["csv"].read(s, f.stat(), -1)
    # The copied way took the rows before the bad one; the parser reads from there.
    assert done is not None and done.more and done.source.lines == 35_000
    ing.close()
    store.close()
    got, want = both_paths(tmp_path, root, "r")
    assert got == want
    stored = {(m, s) for m, s, *_ in got["points"]}
    assert ("lr", 35_000) in stored and ("train/loss", 35_000) not in stored
    assert ("train/loss", 39_999) in stored
