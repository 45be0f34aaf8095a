"""One value per (run, metric, step) across all files of a run: a run's lines split over two or three files
(overlapping steps, resumed lives) are stored as the one-file answer, on the incremental and bulk paths.

A seeded random loop (repeatable): a run's history is a few lives, each resuming from an earlier step with
values of its own; its lines are cut into pieces, each piece a file written after the one before (later
modification time), a piece sometimes repeating the end of the previous one. The one-file answer is that
history in one `metrics.jsonl`: the later line of a step wins.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from collector.ingest import reader
from collector.ingest.reader import Ingestor
from collector.store.db import Store

CASES = 12


def history(rng: random.Random) -> list[dict]:
    """The lines of a run of 1-3 lives: each life resumes at or before the previous one's last step."""
    lines, step = [], 0
    for life in range(rng.randint(1, 3)):
        start = 1 if life == 0 else rng.randint(max(1, step - 40), step)
        step = start + rng.randint(20, 120)
        for s in range(start, step + 1):
            data = {"train/loss": round(rng.random() + life, 6), "train/lr": 1e-4 * (life + 1)}
            if s % 25 == 0:
                data["val/loss"] = round(rng.random(), 6)
            lines.append({"step": s, "data": data})
    return lines


def pieces(rng: random.Random, lines: list[dict]) -> list[list[dict]]:
    """The lines cut into 2-3 consecutive pieces; a piece may start by repeating the end of the one before."""
    cuts = sorted(rng.sample(range(1, len(lines)), rng.randint(1, 2)))
    out, begin = [], 0
    for end in [*cuts, len(lines)]:
        overlap = rng.choice([0, 0, rng.randint(1, 10)])
        out.append(lines[max(0, begin - overlap) : end])
        begin = end
    return out


def write(path: Path, lines: list[dict], mtime: float) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    os.utime(path, (mtime, mtime))


def stored(store: Store, run: str) -> dict:
    rows = store.rows("SELECT metric, step, value FROM points WHERE run_id = ?", [run])
    series = {(m, s): v for m, s, v in rows}
    assert len(series) == len(rows), "a (metric, step) stored twice"
    return series


def ingest(tmp_path: Path, name: str, files: list[list[dict]], path: str, grow: bool) -> dict:
    root = tmp_path / name
    run = root / "r"
    run.mkdir(parents=True)
    # The first life's file is the run's `metrics.jsonl` (so the folder is one run from its first line on).
    names = ["metrics.jsonl"] + [f"metrics-resumed-{i}.jsonl" for i in range(1, len(files))]
    store = Store(tmp_path / f"{name}.duckdb")
    ingestor = Ingestor(store, [root], bulk=path == "bulk", chunk_bytes=4096 if path == "chunks" else 8 << 20)
    for i, (file_name, lines) in enumerate(zip(names, files, strict=True)):
        if grow:  # written while the collector watches: each file read as it is written, half at a time
            half = len(lines) // 2
            write(run / file_name, lines[:half], 1_000_000 + i)
            ingestor.ingest_all()
        write(run / file_name, lines, 1_000_000 + i)
        if grow:
            ingestor.ingest_all()
    ingestor.ingest_all()
    got = stored(store, "r")
    ingestor.close()
    store.close()
    return got


@pytest.mark.parametrize("path", ["incremental", "chunks", "bulk"])
def test_split_over_files_is_stored_as_one_file(tmp_path, monkeypatch, path):
    if path == "bulk":
        monkeypatch.setattr(reader, "BULK_MIN_BYTES", 1)  # DuckDB reads even these small backlogs
    rng = random.Random(f"one-value-per-step-{path}")
    for case in range(CASES):
        lines = history(rng)
        one = ingest(tmp_path, f"one{case}", [lines], path, grow=False)
        split = pieces(rng, lines)
        assert ingest(tmp_path, f"split{case}", split, path, grow=False) == one, f"case {case}"
        if path == "incremental" and case % 3 == 0:
            assert ingest(tmp_path, f"live{case}", split, path, grow=True) == one, f"case {case}, live"


def test_a_file_ending_below_an_earlier_files_last_step_does_not_let_a_later_file_append_twice(tmp_path):
    # Read in one transaction: a life to step 100, a resumed life's first file (steps 70-90), its second file
    # (91-150). The second file's steps 91-100 are at or below the first file's, so they must merge.
    def lines(steps: range, life: int) -> list[dict]:
        return [{"step": s, "data": {"train/loss": s / 1000 + life}} for s in steps]

    files = [lines(range(1, 101), 0), lines(range(70, 91), 1), lines(range(91, 151), 1)]
    one_file = {("train/loss", line["step"]): line["data"]["train/loss"] for part in files for line in part}
    assert ingest(tmp_path, "below", files, "incremental", grow=False) == one_file
