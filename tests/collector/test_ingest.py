"""Ingest on a real DuckDB file: partial lines, truncation, rotation, deletion, garbage, twice, bulk path, real runs."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from collector.ingest import bulk as ingest_bulk
from collector.ingest import segments
from collector.ingest.reader import Ingestor
from collector.store import read as store_read
from collector.store.db import Store


def verl_line(step: int, loss: float, grad: float = 1.0) -> str:
    return json.dumps({"step": step, "data": {"train/loss": loss, "train/grad_norm": grad}}) + "\n"


def stored(store: Store, run: str) -> dict[tuple[str, int], float]:
    rows = store.rows("SELECT metric, step, value FROM points WHERE run_id = ?", [run])
    return {(m, s): v for m, s, v in rows}


def expected_from_jsonl(path: Path) -> dict[tuple[str, int], float]:
    """What a verl JSONL file says, read independently of the parser (stdlib json: bare NaN allowed)."""
    out: dict[tuple[str, int], float] = {}
    for raw in path.read_bytes().split(b"\n"):
        try:
            rec = json.loads(raw)
        except ValueError:
            continue
        if isinstance(rec, dict) and isinstance(rec.get("step"), int):
            for k, v in rec["data"].items():
                out[(k, rec["step"])] = float(v)
    return out


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k])) for k in a)


@pytest.fixture
def env(tmp_path):
    root = tmp_path / "root"
    (root / "run1").mkdir(parents=True)
    store = Store(tmp_path / "t.duckdb")
    ing = Ingestor(store, [root])
    yield root, store, ing
    ing.close()
    store.close()


def test_partial_last_line_waits_until_complete(env):
    root, store, ing = env
    f = root / "run1" / "metrics.jsonl"
    f.write_text(verl_line(1, 3.0) + verl_line(2, 2.5) + '{"step":3,"data":{"train/lo')
    ing.ingest_all()
    assert sorted(s for _, s in stored(store, "run1")) == [1, 1, 2, 2]
    with f.open("a") as fh:
        fh.write('ss":2.0,"train/grad_norm":1.0}}\n')
    ing.ingest_all()
    assert stored(store, "run1")[("train/loss", 3)] == 2.0
    assert store_read.sources(store, "run1")[0]["bad_lines"] == 0


def test_a_last_record_without_a_newline_is_stored_and_what_is_appended_after_it_too(env):
    root, store, ing = env
    f = root / "run1" / "metrics.jsonl"
    f.write_text(verl_line(1, 3.0) + verl_line(2, 2.5).rstrip("\n"))  # the writer's file ends on a record
    ing.ingest_all()
    assert stored(store, "run1")[("train/loss", 2)] == 2.5
    with f.open("a") as fh:
        fh.write("\n" + verl_line(3, 2.0))
    ing.ingest_all()
    assert sorted(s for _, s in stored(store, "run1")) == [1, 1, 2, 2, 3, 3]
    assert store_read.sources(store, "run1")[0]["bad_lines"] == 0


def test_two_roots_of_one_name_keep_every_point_of_their_same_named_runs(tmp_path):
    # before: /a/outputs/run1 and /b/outputs/run1 both became run "outputs/run1", and b's points overwrote a's
    roots = [tmp_path / project / "outputs" for project in ("a", "b")]
    for base, root in zip((1.0, 5.0), roots, strict=True):
        (root / "run1").mkdir(parents=True)
        (root / "run1" / "metrics.jsonl").write_text("".join(verl_line(s, base / s) for s in range(1, 31)))
    store = Store(tmp_path / "t.duckdb")
    ing = Ingestor(store, roots)
    try:
        ing.ingest_all()
        assert stored(store, "a/outputs/run1")[("train/loss", 2)] == 0.5
        assert stored(store, "b/outputs/run1")[("train/loss", 2)] == 2.5
        assert store.rows("SELECT count(*) FROM points")[0][0] == 2 * 30 * 2
    finally:
        ing.close()
        store.close()


def test_ingest_twice_adds_nothing(env):
    root, store, ing = env
    (root / "run1" / "metrics.jsonl").write_text("".join(verl_line(i, 1.0 / i) for i in range(1, 500)))
    ing.ingest_all()
    before = store.rows("SELECT count(*) FROM points")[0][0]
    ing.ingest_all()
    again = Ingestor(store, [root])  # a new process would start from the stored offsets
    again.ingest_all()
    again.close()
    assert store.rows("SELECT count(*) FROM points")[0][0] == before == 998


def test_truncation_starts_a_new_segment_and_keeps_the_old_life(env):
    root, store, ing = env
    f = root / "run1" / "metrics.jsonl"
    f.write_text("".join(verl_line(i, 10.0 - i) for i in range(1, 11)))
    ing.ingest_all()
    # verl's file logger truncates on resume from the step-6 checkpoint and writes 7.. again
    f.write_text("".join(verl_line(i, 100.0 + i) for i in range(7, 9)))
    ing.ingest_all()
    got = stored(store, "run1")
    assert got[("train/loss", 6)] == 4.0  # before the crash: kept
    assert got[("train/loss", 7)] == 107.0 and got[("train/loss", 8)] == 108.0  # written again: replaced
    assert got[("train/loss", 10)] == 0.0  # not yet rewritten: still there
    src = store_read.sources(store, "run1")[0]
    assert src["segment"] == 1 and src["lines"] == 2
    old = {
        (r["step"], r["value"], r["segment"]) for r in store_read.replaced_points(store, "run1", "train/loss")
    }
    assert old == {(7, 3.0, 0), (8, 2.0, 0)}
    assert any("truncated" in e.message for e in ing.events)


def test_rewritten_in_place_to_a_larger_size_is_noticed(env):
    root, store, ing = env
    f = root / "run1" / "metrics.jsonl"
    f.write_text("".join(verl_line(i, 1.0) for i in range(1, 4)))
    ing.ingest_all()
    f.write_text("".join(verl_line(i, 2.0) for i in range(1, 9)))  # truncated and rewritten between two looks
    ing.ingest_all()
    got = stored(store, "run1")
    assert [got[("train/loss", i)] for i in range(1, 9)] == [2.0] * 8
    assert store_read.sources(store, "run1")[0]["segment"] == 1


def test_rotation_reads_the_rest_of_the_old_file_then_the_new_one(env):
    root, store, ing = env
    f = root / "run1" / "metrics.jsonl"
    f.write_text("".join(verl_line(i, 1.0) for i in range(1, 4)))
    ing.ingest_all()
    with f.open("a") as fh:
        fh.write(verl_line(4, 1.0) + verl_line(5, 1.0))  # written just before the rotation, not read yet
    os.rename(f, root / "run1" / "metrics.jsonl.1")
    f.write_text("".join(verl_line(i, 2.0) for i in range(6, 9)))
    ing.moved(str(f), str(root / "run1" / "metrics.jsonl.1"))
    ing.ingest_all()
    got = stored(store, "run1")
    assert sorted(s for m, s in got if m == "train/loss") == list(range(1, 9))
    assert got[("train/loss", 5)] == 1.0 and got[("train/loss", 6)] == 2.0
    assert store_read.sources(store, "run1")[0]["segment"] == 1


def test_deleted_file_keeps_its_points(env):
    root, store, ing = env
    f = root / "run1" / "metrics.jsonl"
    f.write_text("".join(verl_line(i, 1.0) for i in range(1, 6)))
    ing.ingest_all()
    f.unlink()
    ing.ingest([str(f)])
    assert len(stored(store, "run1")) == 10
    assert store_read.sources(store, "run1")[0]["state"] == "deleted"
    f.write_text(verl_line(9, 9.0))  # it comes back: a new life
    ing.ingest([str(f)])
    assert stored(store, "run1")[("train/loss", 9)] == 9.0 and len(stored(store, "run1")) == 12


def test_garbage_and_non_utf8_are_quarantined_with_line_numbers(env):
    root, store, ing = env
    f = root / "run1" / "metrics.jsonl"
    f.write_bytes(
        verl_line(1, 1.0).encode()
        + b"this is not json\n"
        + b'{"step":2,"data":{"train/loss":\xff\xfe}}\n'
        + verl_line(3, float("nan")).replace("NaN", "NaN").encode()
        + b'{"no_step":1}\n'
        + verl_line(4, 0.5).encode()
    )
    ing.ingest_all()
    got = stored(store, "run1")
    assert sorted(s for m, s in got if m == "train/loss") == [1, 3, 4]
    assert math.isnan(got[("train/loss", 3)])
    bad = store_read.quarantined(store, "run1")
    assert [b["line"] for b in bad] == [2, 3, 5]
    assert all(b["path"] == str(f) and b["reason"] for b in bad)
    assert store_read.sources(store, "run1")[0]["bad_lines"] == 3
    assert any("line 2" in e.message for e in ing.events)


def big_file(path: Path, steps: int, bad_at: int | None = None) -> None:
    with path.open("w") as f:
        for i in range(1, steps + 1):
            if i == bad_at:
                f.write("{broken\n")
                continue
            loss = float("nan") if i % 997 == 0 else 5.0 / i
            f.write(
                json.dumps({"step": i, "data": {"train/loss": loss, "train/lr": 1e-4, "x": i * 0.5}}) + "\n"
            )


@pytest.mark.parametrize("bad_at", [None, 15_000])
def test_bulk_path_matches_the_file_and_quarantines_bad_lines(tmp_path, bad_at):
    root = tmp_path / "root"
    (root / "r").mkdir(parents=True)
    f = root / "r" / "metrics.jsonl"
    big_file(f, 40_000, bad_at)  # ~3 MiB: several 1 MiB chunks through DuckDB's reader
    store = Store(tmp_path / "t.duckdb")
    ing = Ingestor(store, [root], chunk_bytes=1 << 20)
    ing.ingest_all()
    assert same(stored(store, "r"), expected_from_jsonl(f))
    src = store_read.sources(store, "r")[0]
    assert src["offset"] == f.stat().st_size and src["lines"] == 40_000
    assert [b["line"] for b in store_read.quarantined(store, "r")] == ([bad_at] if bad_at else [])
    stats = {s["metric"]: s["points"] for s in store_read.metric_stats(store, "r")}
    assert stats == {
        "train/loss": 40_000 - bool(bad_at),
        "train/lr": 40_000 - bool(bad_at),
        "x": 40_000 - bool(bad_at),
    }
    ing.close()
    store.close()


def test_bulk_and_python_paths_store_the_same(tmp_path):
    root = tmp_path / "root"
    (root / "r").mkdir(parents=True)
    big_file(root / "r" / "metrics.jsonl", 20_000)
    results = []
    for bulk in (True, False):
        store = Store(tmp_path / f"{bulk}.duckdb")
        ing = Ingestor(store, [root], bulk=bulk, chunk_bytes=1 << 20)
        ing.ingest_all()
        results.append(stored(store, "r"))
        ing.close()
        store.close()
    assert same(results[0], results[1])


def hf_expected(path: Path) -> dict[tuple[str, int], float]:
    """Every numeric value of every log_history entry at its step, the last write of a (metric, step) winning."""
    state = json.loads(path.read_text())
    out: dict[tuple[str, int], float] = {}
    for entry in state["log_history"]:
        for k, v in entry.items():
            if k != "step" and isinstance(v, int | float):
                out[(k, entry["step"])] = float(v)
    return out


def test_every_real_run_ingests_with_its_points_counted_exactly(tmp_path, real_runs):
    files = sorted(real_runs.glob("*.json"))
    assert len(files) >= 10
    store = Store(tmp_path / "real.duckdb")
    ing = Ingestor(store, [real_runs])
    ing.ingest_all()
    for f in files:
        run = f.stem
        want = hf_expected(f)
        got = stored(store, run)
        assert len(got) == len(want), f"{f.name}: stored {len(got)} points, the file has {len(want)}"
        assert same(got, want), f.name
        stats = sum(s["points"] for s in store_read.metric_stats(store, run))
        assert stats == len(want)
    # A (metric, step) logged twice in one history (HF logs `epoch` in train and eval entries) keeps the
    # last value; the earlier one is kept aside. Reading the files again adds and replaces nothing.
    counts = store.rows("SELECT (SELECT count(*) FROM points), (SELECT count(*) FROM points_replaced)")
    ing2 = Ingestor(store, [real_runs])
    for s in ing2.sources.values():
        s.size = s.mtime = 0  # as if every file changed
    ing2.ingest_all()
    ing2.close()
    assert (
        store.rows("SELECT (SELECT count(*) FROM points), (SELECT count(*) FROM points_replaced)") == counts
    )
    ing.close()
    store.close()


def test_bulk_path_learns_new_metrics_and_reads_odd_records_like_the_parser(tmp_path):
    root = tmp_path / "root"
    (root / "r").mkdir(parents=True)
    f = root / "r" / "metrics.jsonl"
    with f.open("w") as out:
        for step in range(1, 30_001):
            out.write(json.dumps({"step": step, "data": {"train/loss": 1.0 / step, "train/lr": 1e-4}}) + "\n")
            if step % 5000 == 0:  # validation: a separate record at the same step, a metric not seen before
                out.write(json.dumps({"step": step, "data": {"val/loss": 2.0 / step}}) + "\n")
            if step == 12_345:
                out.write('{"step":12345,"data":{"train/grad_norm":null,"train/acc":0.5},"extra":1}\n')
    store = Store(tmp_path / "t.duckdb")
    ing = Ingestor(store, [root], bulk_bytes=1 << 20)
    ing.ingest_all()
    got = stored(store, "r")
    assert [got[("val/loss", s)] for s in range(5000, 30_001, 5000)] == [
        2.0 / s for s in range(5000, 30_001, 5000)
    ]
    # the parser reads a null as NaN (orjson writes NaN as null): the chunk holding it went through Python
    assert got[("train/acc", 12_345)] == 0.5 and math.isnan(got[("train/grad_norm", 12_345)])
    assert len(got) == 2 * 30_000 + 6 + 2
    assert store.rows("SELECT count(*) FROM points_replaced")[0][0] == 0
    assert store_read.sources(store, "r")[0]["lines"] == 30_000 + 6 + 1
    ing.close()
    store.close()


def test_a_whole_file_read_in_place_learns_a_metric_first_logged_past_its_head(tmp_path):
    """DuckDB reads a complete file in place, typed by the metric names of its first 4 MiB; a metric first
    logged later makes the count check fail, and the read is done again with every name learned."""
    root = tmp_path / "root"
    (root / "r").mkdir(parents=True)
    f = root / "r" / "metrics.jsonl"
    steps = 60_000  # ~6 MiB
    with f.open("w") as out:
        for step in range(1, steps + 1):
            data = {"train/loss": 1.0 / step, "train/lr": 1e-4, "train/grad_norm": 0.5}
            if step > 50_000:
                data["actor/entropy"] = 2.0 / step  # first seen ~5 MiB in
            out.write(json.dumps({"step": step, "data": data}) + "\n")
    assert f.stat().st_size > 5 << 20
    store = Store(tmp_path / "t.duckdb")
    ing = Ingestor(store, [root])
    ing.ingest_all()
    assert same(stored(store, "r"), expected_from_jsonl(f))
    stats = {s["metric"]: s["points"] for s in store_read.metric_stats(store, "r")}
    assert stats == {
        "train/loss": steps,
        "train/lr": steps,
        "train/grad_norm": steps,
        "actor/entropy": 10_000,
    }
    assert store_read.sources(store, "r")[0]["lines"] == steps
    ing.close()
    store.close()


# 3,000 steps go through the Python parser, 30,000 (over 1 MiB) through DuckDB's bulk read; dense steps are
# checked for repeats with bits, sparse ones by hashing.
@pytest.mark.parametrize("steps", [3000, 30_000])
@pytest.mark.parametrize("spacing", [1, 10**9])
def test_a_resumed_file_keeps_the_last_write_of_a_repeated_step(tmp_path, spacing, steps):
    root = tmp_path / "root"
    (root / "r").mkdir(parents=True)
    f = root / "r" / "metrics.jsonl"
    # Crashed at the last step, resumed a third earlier and appended to the same file: the last third of
    # the steps twice, with the second life's values.
    resumed = steps * 2 // 3
    lives = [(i, 1.0 / i) for i in range(1, steps + 1)] + [
        (i, 2.0 / i) for i in range(resumed + 1, steps + 1)
    ]
    with f.open("w") as out:
        for i, loss in lives:
            out.write(json.dumps({"step": i * spacing, "data": {"train/loss": loss, "n": i}}) + "\n")
    store = Store(tmp_path / "t.duckdb")
    ing = Ingestor(store, [root])
    ing.ingest_all()
    got = stored(store, "r")
    assert same(got, expected_from_jsonl(f)) and got[("train/loss", steps * spacing)] == 2.0 / steps
    assert store.rows("SELECT count(*) FROM points WHERE run_id = 'r'")[0][0] == 2 * steps  # no step twice
    points = {s["metric"]: s["points"] for s in store_read.metric_stats(store, "r")}
    assert points == {"train/loss": steps, "n": steps}
    assert len(store_read.replaced_points(store, "r", "train/loss")) == steps - resumed
    ing.close()
    store.close()


@pytest.mark.parametrize("piece", [1, 2, 3, 7, 64, 4096])
def test_the_byte_count_of_a_backlog_does_not_depend_on_where_its_pieces_end(tmp_path, monkeypatch, piece):
    """Lines and `":` are counted piece by piece (numpy on a reused buffer); a `":` or a line cut in two by
    a piece boundary counts once, and bytes after the last newline are left out."""
    monkeypatch.setattr(ingest_bulk, "PIECE_BYTES", piece)
    f = tmp_path / "m.jsonl"
    body = b"".join(
        json.dumps({"step": i, "data": {"a": i / 3, "b:c": 1.0, 'q"': 2}}).encode() + b"\n" for i in range(40)
    )
    f.write_bytes(body + b'{"step": 40, "data": {"a":')  # a partial last line
    store = Store(tmp_path / "t.duckdb")
    ing = ingest_bulk.BulkReader(store, str(tmp_path))
    for copy in (False, True):
        chunk = ing._copy_complete_lines(str(f), 0, f.stat().st_size, copy)
        assert (chunk.lines, chunk.colons, chunk.end) == (40, body.count(b'":'), len(body))
        assert chunk.tail == body[-segments.SIG_BYTES :]
        if copy:
            assert Path(chunk.path).read_bytes() == body
    store.close()


@pytest.mark.parametrize("bad_at", [None, 17_000])
def test_a_backlog_read_in_pieces_copied_ahead_matches_the_file(tmp_path, bad_at):
    """A backlog that is not all complete lines is read in `bulk_bytes` pieces, the next one copied to the
    scratch folder while DuckDB reads the current one; a bad line sends its piece through the parser."""
    root = tmp_path / "root"
    (root / "r").mkdir(parents=True)
    f = root / "r" / "metrics.jsonl"
    big_file(f, 40_000, bad_at)  # ~3 MiB: a dozen pieces of 256 KiB
    with f.open("a") as out:
        out.write('{"step": 40001, "data": {"train/lo')  # a partial last line: no reading in place
    store = Store(tmp_path / "t.duckdb")
    ing = Ingestor(store, [root], bulk_bytes=256 << 10)
    ing.ingest_all()
    assert same(stored(store, "r"), expected_from_jsonl(f))
    src = store_read.sources(store, "r")[0]
    assert src["offset"] == f.read_bytes().rindex(b"\n") + 1 and src["lines"] == 40_000
    assert [b["line"] for b in store_read.quarantined(store, "r")] == ([bad_at] if bad_at else [])
    assert os.listdir(ing.bulk_reader.scratch) == []  # every piece removed once read
    ing.close()
    assert not Path(f"{tmp_path / 't.duckdb'}.ingest").exists()
    store.close()


def test_a_scratch_folder_left_by_a_killed_collector_is_removed(tmp_path):
    store = Store(tmp_path / "t.duckdb")
    left = Path(f"{tmp_path / 't.duckdb'}.ingest") / "pid-999999999-abc"  # no such process
    left.mkdir(parents=True)
    (left / "3-0.jsonl").write_bytes(b"x" * 1000)
    ing = Ingestor(store, [tmp_path])
    assert not left.exists() and Path(ing.bulk_reader.scratch).is_dir()
    ing.close()
    store.close()
