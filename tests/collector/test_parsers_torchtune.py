"""torchtune's DiskLogger file (`logs/log_<unix time>.txt`): `Step N | name:value ...` lines.

No torchtune log is among the shared real runs and none was found committed in a public repository, so the
samples are written here the way torchtune's `DiskLogger.log_dict` / `log` write them (`torchtune/training/
metric_logging.py`: `f"Step {step} | "`, then `f"{name}:{data} "` per item, then a newline), with the keys its
fine-tuning recipes log (`loss`, `lr`, `tokens_per_second_per_gpu`, the `peak_memory_*` GiB of
`training.get_memory_stats`, `grad_norm` as the tensor `clip_grad_norm_` returns).
"""

from __future__ import annotations

import math

from collector.formats import discover, torchtune_log
from collector.formats.discover import find_runs
from collector.ingest.reader import Ingestor
from collector.store import read as store_read
from collector.store.db import Store
from tests.collector.test_daemon_support import Daemon, wait_for
from tests.collector.test_discover import write
from tests.collector.test_parsers_support import (
    FuzzSample,
    assert_split_anywhere_equals_one_shot,
    comparable,
    points_as_tuples,
)


def step_line(step: int, **items: object) -> bytes:
    """One `DiskLogger.log_dict` line: each item followed by a space, as torchtune writes it."""
    return (f"Step {step} | " + "".join(f"{k}:{v} " for k, v in items.items()) + "\n").encode()


MEMORY = {"peak_memory_active": 4.51, "peak_memory_alloc": 4.51, "peak_memory_reserved": 5.25}
LOG = (
    step_line(1, loss=2.2638285160064697, lr=2e-05, tokens_per_second_per_gpu=1530.5, **MEMORY)
    + step_line(
        2, loss=1.9, lr=4e-05, tokens_per_second_per_gpu=1601.25, grad_norm="tensor(0.8120, device='cuda:0')"
    )
    + b"Step 3 | loss:nan\n"  # `DiskLogger.log`: one item, no trailing space
)


def test_records_become_points_at_their_step_with_torchtunes_names():
    result = torchtune_log.parse(LOG)
    assert comparable(points_as_tuples(result)) == [
        (1, "loss", 2.2638285160064697, None),
        (1, "lr", 2e-05, None),
        (1, "tokens_per_second_per_gpu", 1530.5, None),
        (1, "peak_memory_active", 4.51, None),
        (1, "peak_memory_alloc", 4.51, None),
        (1, "peak_memory_reserved", 5.25, None),
        (2, "loss", 1.9, None),
        (2, "lr", 4e-05, None),
        (2, "tokens_per_second_per_gpu", 1601.25, None),
        (2, "grad_norm", 0.812, None),
        (3, "loss", "NaN", None),
    ]
    assert result.bad == [] and result.consumed == len(LOG) and result.lines == 3


def test_bad_lines_are_named_by_line_and_cost_only_themselves():
    data = (
        step_line(1, loss=2.0)
        + b"Writing logs to /tmp/out/logs/log_1.txt\n"  # stray text
        + b"Step x | loss:1.0\n"  # no step
        + step_line(3, loss="abc", lr=1e-05)  # one value not a number: the other one is kept
        + b"Step 4 | loss:1.5 oops\n"  # an item that is not name:value
        + b"Step 5 | loss:\xff\n"  # not UTF-8
        + b"\n"
        + step_line(6, loss=1.25)
        + b"Step 7 | loss:1."  # written in half: waits for its newline
    )
    result = torchtune_log.parse(data, first_line=11)
    assert [(b.line, b.reason) for b in result.bad] == [
        (12, "not a torchtune `Step N | name:value` record"),
        (13, "not a torchtune `Step N | name:value` record"),
        (14, "not a number: loss:abc (the line's other values were read)"),
        (15, "not a `name:value` item: 'oops'"),
        (16, "not UTF-8 text (byte 14)"),
    ]
    assert comparable(points_as_tuples(result)) == [
        (1, "loss", 2.0, None),
        (3, "lr", 1e-05, None),
        (6, "loss", 1.25, None),
    ]
    assert result.consumed == len(data) - len(b"Step 7 | loss:1.") and result.lines == 8


def test_split_anywhere_equals_one_read():
    assert_split_anywhere_equals_one_shot(torchtune_log.parse, LOG + b"oops\n" + step_line(4, loss=1.0))


def test_sniff_knows_a_torchtune_log_from_other_text():
    assert torchtune_log.sniff(LOG)
    assert torchtune_log.sniff(b"Step 1  | loss:2.26 lr:2e-05\n")  # torchtune's docs align the bar
    assert not torchtune_log.sniff(b"step:1 - train/loss:2.5 - lr:1e-05\n")  # a verl console log
    assert not torchtune_log.sniff(b"Step 1 finished, loss 2.5\n")
    assert not torchtune_log.sniff(b"notes\n")


def test_a_torchtune_output_folder_is_read_by_a_real_ingest(tmp_path):
    """A recipe's output folder as torchtune leaves it: `logs/log_<time>.txt` (found by its content, as
    `*.txt` is also a console log's name), read into a real DuckDB file while it grows; its bad line stored in
    quarantine with the file and line, and told in the ingest's events."""
    root = tmp_path / "runs"
    logs = root / "llama3_2_1B" / "lora_single_device" / "logs"
    logs.mkdir(parents=True)
    (logs.parent / "epoch_0").mkdir()  # a checkpoint folder beside it: not a metrics file
    log = logs / "log_1732431600.txt"
    half = LOG.index(b"lr:4e-") + len(b"lr:4e-")
    log.write_bytes(LOG[:half])  # step 2 half written
    assert discover.classify(log) == "torchtune_log"
    store = Store(tmp_path / "t.duckdb")
    ingest = Ingestor(store, [root])
    try:
        ingest.ingest_all()
        [run] = [r["id"] for r in store_read.runs(store)]
        assert run == "llama3_2_1B/lora_single_device/logs"
        assert store.rows("SELECT DISTINCT step FROM points WHERE run_id = ?", [run]) == [(1,)]
        with log.open("ab") as f:  # the trainer goes on
            f.write(LOG[half:] + b"broken\n" + step_line(5, lr=1e-05))
        ingest.ingest([str(log)])
        rows = store.rows(
            "SELECT step, metric, value FROM points WHERE run_id = ? ORDER BY step, metric", [run]
        )
        got = {(s, m): v for s, m, v in rows}
        assert got[(2, "lr")] == 4e-05 and got[(2, "grad_norm")] == 0.812 and got[(5, "lr")] == 1e-05
        assert math.isnan(got[(3, "loss")]) and got[(1, "peak_memory_reserved")] == 5.25
        [bad] = store_read.quarantined(store, run)
        assert (bad["path"], bad["line"], bad["text"]) == (str(log), 4, "broken")
        assert any(e.path == str(log) and e.message.startswith("line 4: ") for e in ingest.events)
    finally:
        ingest.close()
        store.close()


def test_the_log_files_of_one_logs_folder_are_one_run_whatever_their_number(tmp_path):
    """A rerun or resume into the same output_dir opens a new `log_<time>.txt` beside the first (the
    DiskLogger names each file for the time it opened): one run, its id the folder's from the first file on.
    `.txt` files of another format named alike are still runs of their own."""
    logs = tmp_path / "out" / "logs"
    write(logs / "log_1732431600.txt", "Step 1 | loss:2.0 \n")
    assert [r.id for r in find_runs([tmp_path])] == ["out/logs"]
    write(logs / "log_1732435200.txt", "Step 1 | loss:2.1 \n")
    [run] = find_runs([tmp_path])
    assert run.id == "out/logs" and [s.path.name for s in run.metrics_sources()] == [
        "log_1732431600.txt",
        "log_1732435200.txt",
    ]
    assert discover.run_for_path(logs / "log_1732435200.txt", [tmp_path]).id == "out/logs"
    write(tmp_path / "gathered" / "log_1.txt", "step:1 - train/loss:2.5\n")  # verl console logs
    write(tmp_path / "gathered" / "log_2.txt", "step:1 - train/loss:2.7\n")
    assert [r.id for r in find_runs([tmp_path / "gathered"])] == ["log_1", "log_2"]


def test_a_resume_and_a_rerun_into_a_watched_output_folder_continue_its_run(tmp_path):
    """`collector serve` (a real process, real watchdog) watches a recipe's output folder while torchtune
    runs three times into it: the first run, a resume from its epoch checkpoint at step 4 (steps 5-6 logged
    again, then on), and a rerun from scratch. The run id is `out/logs` throughout; each life's points are
    there at their steps, and the values a later life wrote over are the run's replaced values."""
    root = tmp_path / "root"
    logs = root / "out" / "logs"
    logs.mkdir(parents=True)
    first = logs / "log_1732431600.txt"
    first.write_bytes(b"".join(step_line(s, loss=2.0 - s / 10, lr=2e-05) for s in range(1, 7)))
    daemon = Daemon(tmp_path / "rw.duckdb", [root]).start()
    seen: set[str] = set()
    try:
        client = daemon.client()

        def loss() -> list[tuple[int, float]]:
            seen.update(r["id"] for r in client.get("/api/runs"))
            found = client.get("/api/runs/out/logs/metrics", {"metric": "loss", "points": 1000})["series"]
            return [(st, round(v, 6)) for st, v in zip(found[0]["steps"], found[0]["values"], strict=True)]

        life_one = [(s, round(2.0 - s / 10, 6)) for s in range(1, 7)]
        wait_for(lambda: loss() == life_one, "the first life's steps 1-6")

        resumed = logs / "log_1732435200.txt"
        resumed.touch()  # the DiskLogger opens its file before the first step is logged
        with resumed.open("ab") as f:
            for s in range(5, 9):
                f.write(step_line(s, loss=1.0 - s / 100, lr=1e-05))
                f.flush()
        life_two = [(s, round(1.0 - s / 100, 6)) for s in range(5, 9)]
        wait_for(lambda: loss() == life_one[:4] + life_two, "the resumed life's steps 5-8 over the first's")

        rerun = logs / "log_1732438800.txt"
        rerun.write_bytes(step_line(1, loss=3.0) + step_line(2, loss=2.5))
        wait_for(lambda: loss() == [(1, 3.0), (2, 2.5), *life_one[2:4], *life_two], "the rerun's steps 1-2")

        run = client.get("/api/runs/out/logs")
        assert [(s["path"], s["bad_lines"]) for s in run["sources"]] == [
            (str(p), 0) for p in (first, resumed, rerun)
        ]
        replaced = client.get("/api/runs/out/logs/replaced", {"metric": "loss"})
        assert sorted((r["step"], round(r["value"], 6)) for r in replaced) == [
            (1, 1.9),
            (2, 1.8),
            (5, 1.5),
            (6, 1.4),
        ]
        assert {r["id"] for r in client.get("/api/runs")} == {"out/logs"}
        assert seen == {"out/logs"}
    finally:
        daemon.ensure_stopped()


# What the garbage fuzz (test_parsers_garbage) damages for this format.
FUZZ = {"torchtune_log": FuzzSample(LOG, counts_lines=True)}
