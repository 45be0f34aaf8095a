"""torchtune's console output (`tune run ... > train.log 2>&1` with `metric_logger` set to its StdoutLogger).

No torchtune console log is among the shared real runs, so the sample is written here the way a recipe prints:
its resolved config, `INFO:torchtune.utils._logging:` lines (stderr), tqdm's bar (`epoch|step|Loss: ...`,
redrawn with carriage returns, on stderr, so a record can follow it on the same line), and the StdoutLogger's
records (`print(f"Step {step} | ", end="")`, then `f"{name}:{data} "` per item, then a newline).
"""

from __future__ import annotations

from collector.formats import discover, torchtune_console, torchtune_log
from collector.ingest.reader import Ingestor
from collector.store import read as store_read
from collector.store.db import Store
from tests.collector.test_discover import write
from tests.collector.test_parsers_support import (
    FuzzSample,
    assert_split_anywhere_equals_one_shot,
    comparable,
    points_as_tuples,
)
from tests.collector.test_parsers_torchtune import step_line

CONSOLE = (
    b"INFO:torchtune.utils._logging:Running FullFinetuneRecipeSingleDevice with resolved config:\n"
    b"\n"
    b"batch_size: 2\n"
    b"log_every_n_steps: 1\n"
    b"metric_logger:\n"
    b"  _component_: torchtune.training.metric_logging.StdoutLogger\n"
    b"output_dir: /tmp/torchtune/llama3_2_1B/full_single_device\n"
    b"\n"
    b"INFO:torchtune.utils._logging:Memory stats after model init:\n"
    b"\tGPU peak memory allocation: 2.34 GiB\n"
    b"INFO:torchtune.utils._logging:Dataset and Sampler are initialized.\n"
    b"  0%|          | 0/3 [00:00<?, ?it/s]\r1|1|Loss: 2.2638:  33%|###3      | 1/3 [00:01<00:02,  1.41s/it]"
    + step_line(1, loss=2.2638, lr=2e-05, tokens_per_second_per_gpu=1530.5)
    + b"\r1|2|Loss: 1.9:  67%|######6   | 2/3 [00:02<00:01,  1.20s/it]"
    + step_line(2, loss=1.9, lr=2e-05, grad_norm="tensor(0.8120, device='cuda:0')")
    + b"\x1b[32m"
    + step_line(3, loss=1.75)  # a terminal's colour codes around a record
    + b"1|3|Loss: 1.75: 100%|##########| 3/3 [00:03<00:00,  1.10s/it]\n"
    + b"INFO:torchtune.utils._logging:Model checkpoint of size 2.30 GiB saved to /tmp/out/epoch_0/model.safetensors\n"
)


def test_records_among_a_recipes_output_become_points_and_nothing_else_is_bad():
    result = torchtune_console.parse(CONSOLE)
    assert comparable(points_as_tuples(result)) == [
        (1, "loss", 2.2638, None),
        (1, "lr", 2e-05, None),
        (1, "tokens_per_second_per_gpu", 1530.5, None),
        (2, "loss", 1.9, None),
        (2, "lr", 2e-05, None),
        (2, "grad_norm", 0.812, None),
        (3, "loss", 1.75, None),
    ]
    assert result.bad == [] and result.consumed == len(CONSOLE) and result.lines == CONSOLE.count(b"\n")


def test_only_damaged_records_are_bad_lines_with_their_line_number():
    data = (
        b"Step 3 | warming up\n"  # a script's own text: not a record (no name:value item)
        + b"Resuming from Step 2 of 10\n"
        + step_line(4, loss="abc", lr=1e-05)  # one value not a number: the other one is kept
        + b"Step 5 | loss:1.5 oops\n"  # text after the items
        + b"Step 6 | loss:\xff\n"  # a record that is not UTF-8
        + b"loading \xff weights\n"  # other output that is not UTF-8: ignored like any other line
        + b"Step 99999999999999999999 | loss:1.0\n"
        + step_line(7, loss=1.25)
        + b"Step 8 | loss:1."  # written in half: waits for its newline
    )
    result = torchtune_console.parse(data, first_line=21)
    assert [(b.line, b.reason) for b in result.bad] == [
        (23, "not a number: loss:abc (the line's other values were read)"),
        (24, "not a `name:value` item: 'oops'"),
        (25, "not UTF-8 text (byte 14)"),
        (27, "step 99999999999999999999 is beyond the 64-bit range"),
    ]
    assert comparable(points_as_tuples(result)) == [(4, "lr", 1e-05, None), (7, "loss", 1.25, None)]
    assert result.consumed == len(data) - len(b"Step 8 | loss:1.") and result.lines == 8


def test_split_anywhere_equals_one_read():
    assert_split_anywhere_equals_one_shot(torchtune_console.parse, CONSOLE[-700:] + b"Step 9 | x\xff:1\n")


def test_a_console_log_is_told_from_the_diskloggers_file_and_from_other_console_logs(tmp_path):
    # the DiskLogger's file starts with a record; the console output with the recipe's own text
    assert torchtune_log.sniff(step_line(1, loss=2.0)) and not torchtune_log.sniff(CONSOLE)
    assert torchtune_console.sniff(CONSOLE)
    assert discover.classify(write(tmp_path / "train.log", CONSOLE.decode())) == "torchtune_console"
    assert discover.classify(write(tmp_path / "train.txt", CONSOLE.decode())) == "torchtune_console"
    assert discover.classify(write(tmp_path / "log_1732431600.txt", step_line(1, loss=2.0).decode())) == (
        "torchtune_log"
    )
    verl = "step:1 - train/loss:2.5 - train/lr:1e-05\n"
    assert discover.classify(write(tmp_path / "verl.log", verl)) == "console"
    # a DiskLogger-configured run's console holds no records: still a plain console log
    no_records = CONSOLE.decode().split("  0%")[0] + "Writing logs to /tmp/out/logs/log_1.txt\n"
    assert discover.classify(write(tmp_path / "disk.log", no_records)) == "console"


def test_a_console_log_is_read_by_a_real_ingest_while_it_grows(tmp_path):
    root = tmp_path / "runs"
    log = root / "full_single_device" / "train.log"
    half = CONSOLE.index(b"Step 2 | loss:1.9") + len(b"Step 2 | loss:1.9")
    write(log, CONSOLE[:half].decode())
    store = Store(tmp_path / "t.duckdb")
    ingest = Ingestor(store, [root])
    try:
        ingest.ingest_all()
        [run] = [r["id"] for r in store_read.runs(store)]
        assert run == "full_single_device"
        assert store.rows("SELECT DISTINCT step FROM points WHERE run_id = ?", [run]) == [(1,)]
        with log.open("ab") as f:  # the recipe goes on
            f.write(CONSOLE[half:] + step_line(4, loss="oops"))
        ingest.ingest([str(log)])
        rows = store.rows("SELECT step, metric, value FROM points WHERE run_id = ? ORDER BY ALL", [run])
        assert [(s, m) for s, m, _ in rows if m == "loss"] == [(1, "loss"), (2, "loss"), (3, "loss")]
        [bad] = store_read.quarantined(store, run)
        line = CONSOLE.count(b"\n") + 1
        assert (bad["path"], bad["line"], bad["text"]) == (str(log), line, "Step 4 | loss:oops ")
    finally:
        ingest.close()
        store.close()


# What the garbage fuzz (test_parsers_garbage) damages for this format: other text is ignored by design.
FUZZ = {"torchtune_console": FuzzSample(CONSOLE, quiet=True, counts_lines=True)}
