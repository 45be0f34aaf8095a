"""A live HF Trainer run writes its TensorBoard file (`runs/<date>/events.out.tfevents.*`) and its logs/ console
before its first checkpoint: until `checkpoint-N/trainer_state.json` appears each is read as a run of its own.
When the checkpoint comes, the file becomes the output folder's (read again as its `hf_tensorboard`) or a copy
it does not read (the console): its points leave the early run, and that run, left with no file and no point,
is removed, so no ghost run stays listed frozen at its last step. Real `ingest` subprocesses, a real `serve`
with its watchdog, a real DuckDB file; the folders are written in the HF Trainer's shapes as it goes."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from collector.store.db import Store
from tests.collector.test_daemon_support import Daemon, cli, cli_json
from tests.waiting import wait_for

LIFE = "Nov26_20-00-00_host"
STEPS = range(10, 250, 10)


def loss(step: int) -> float:
    return round(2.0 - step / 1000, 4)


def tensorboard(out: Path) -> Path:
    """The Trainer's live TensorBoard file (`report_to=tensorboard`), 24 logged steps so far."""
    writer = EventFileWriter(str(out / "runs" / LIFE))
    for step in STEPS:
        value = summary_pb2.Summary.Value(tag="train/loss", simple_value=loss(step))
        writer.add_event(
            event_pb2.Event(step=step, wall_time=time.time(), summary=summary_pb2.Summary(value=[value]))
        )
    writer.close()
    [path] = (out / "runs" / LIFE).glob("events.out.tfevents.*")
    return path


def console(out: Path, name: str = "logs/training.log") -> Path:
    """The run's console, teed to `logs/training.log`: the Trainer's printed log dicts."""
    path = out / name
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        f"{{'loss': {loss(s)}, 'grad_norm': 1.0, 'learning_rate': 1e-05, 'epoch': {s / 1000}}}\n"
        for s in STEPS
    ]
    path.write_text("".join(lines))
    return path


def first_checkpoint(out: Path) -> None:
    """checkpoint-240: its trainer_state.json holds the same 24 logged steps."""
    history = [{"step": s, "loss": loss(s), "learning_rate": 1e-5, "epoch": s / 1000} for s in STEPS]
    state = {
        "global_step": 240,
        "max_steps": 1000,
        "logging_steps": 10,
        "save_steps": 240,
        "log_history": history,
    }
    folder = out / "checkpoint-240"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "trainer_state.json").write_text(json.dumps(state))


def stored(db: Path) -> dict:
    """What the file holds per run: its points, sources and alerts (the early run's rows must all be gone)."""
    store = Store(db)
    try:
        return {
            "runs": [r for (r,) in store.rows("SELECT id FROM runs ORDER BY id")],
            "points": store.rows("SELECT run_id, metric, count(*) FROM points GROUP BY ALL ORDER BY ALL"),
            "sources": store.rows("SELECT run_id, path, format FROM sources ORDER BY path"),
            "alerts": store.rows("SELECT DISTINCT run_id FROM alerts ORDER BY 1"),
            "summaries": store.rows(
                "SELECT DISTINCT run_id FROM metric_stats UNION SELECT run_id FROM series"
            ),
        }
    finally:
        store.close()


def ingested_runs(db: Path, root: Path) -> list[str]:
    cli_json(db, "ingest", str(root))
    return [r["id"] for r in cli_json(db, "runs")]


def test_a_tensorboard_file_read_before_the_first_checkpoint_moves_to_the_run_and_no_ghost_stays(tmp_path):
    root, db = tmp_path / "root", tmp_path / "rw.duckdb"
    out = root / "outputs"
    events = tensorboard(out)
    assert ingested_runs(db, root) == [f"outputs/runs/{LIFE}"]  # no state yet: the file is a run by itself
    first_checkpoint(out)
    done = cli(db, "ingest", str(root))
    assert f"{events}: belongs to run outputs: its points left run outputs/runs/{LIFE}" in done.stderr
    assert f"run outputs/runs/{LIFE} had no other file and no point left: removed" in done.stderr
    after = stored(db)
    assert after["runs"] == ["outputs"] and [r["id"] for r in cli_json(db, "runs")] == ["outputs"]
    assert {run for run, *_ in after["points"]} == {"outputs"}
    assert {run for (run,) in after["summaries"]} == {"outputs"}
    assert (("outputs", str(events), "hf_tensorboard")) in after["sources"]
    assert cli_json(db, "ingest", str(root))["points_added"] == 0 and stored(db) == after  # twice: the same


def test_a_console_read_before_the_first_checkpoint_leaves_its_early_run_which_is_removed(tmp_path):
    root, db = tmp_path / "root", tmp_path / "rw.duckdb"
    out = root / "outputs"
    log = console(out)
    assert ingested_runs(db, root) == ["outputs/logs"]
    first_checkpoint(out)
    done = cli(db, "ingest", str(root))
    assert (
        f"{log}: is a copy run outputs does not read: its points left run outputs/logs, read no more"
        in done.stderr
    )
    after = stored(db)
    assert after["runs"] == ["outputs"] and [r["id"] for r in cli_json(db, "runs")] == ["outputs"]
    assert {run for run, *_ in after["points"]} == {"outputs"} and after["sources"] == [
        ("outputs", str(out / "checkpoint-240" / "trainer_state.json"), "hf_trainer_state")
    ]
    # still listed, as every copy not read is, in its run's files not read: not lost from sight
    assert [(f["path"], f["reason"][:40]) for f in cli_json(db, "run", "outputs")["skipped_files"]] == [
        (str(log), "a hf_console copy of the metrics in trai")
    ]
    assert cli_json(db, "ingest", str(root))["points_added"] == 0 and stored(db) == after


def test_a_console_beside_the_states_read_before_them_leaves_their_run_as_a_fresh_reading_would(tmp_path):
    """`train.log` in the output folder itself: before the checkpoint it is the run's only metrics file (its
    steps counted, 1 to 24); after, a copy the run does not read. Its points leave the run, so the loss is the
    states' 24 points at steps 10-240, as a first reading of the folder finds, not 46 at steps 1-240."""
    root, db = tmp_path / "root", tmp_path / "rw.duckdb"
    out = root / "outputs"
    log = console(out, "train.log")
    assert ingested_runs(db, root) == ["outputs"]
    first_checkpoint(out)
    done = cli(db, "ingest", str(root))
    assert (
        f"{log}: is a copy run outputs does not read: its points left run outputs, read no more"
        in done.stderr
    )
    after = stored(db)
    fresh = tmp_path / "fresh.duckdb"
    cli_json(fresh, "ingest", str(root))
    assert stored(fresh)["points"] == after["points"] == [
        ("outputs", "epoch", 24), ("outputs", "learning_rate", 24), ("outputs", "loss", 24)
    ]  # fmt: skip


def test_a_ghost_run_an_earlier_collector_left_is_taken_out_at_the_next_start(tmp_path):
    """Earlier collectors moved the TensorBoard file into `outputs` (its source row, as `hf_tensorboard`, read
    again from its start) but left its 24 points in the early run. Written here as they left it; the next
    `ingest` takes them out and removes the run, and says so."""
    root, db = tmp_path / "root", tmp_path / "rw.duckdb"
    out = root / "outputs"
    events = tensorboard(out)
    assert ingested_runs(db, root) == [f"outputs/runs/{LIFE}"]
    first_checkpoint(out)
    store = Store(db)
    try:
        with store.transaction() as cur:  # what `place_source` wrote when the format changed with the run
            cur.execute(
                """UPDATE sources SET run_id = 'outputs', format = 'hf_tensorboard', segment = segment + 1,
                   byte_offset = 0, size = 0, inode = 0 WHERE path = ?""",
                [str(events)],
            )
    finally:
        store.close()
    done = cli(db, "ingest", str(root))
    assert (
        f"{events}: is read into run outputs: its points left run outputs/runs/{LIFE} (left there"
        in done.stderr
    )
    after = stored(db)
    assert after["runs"] == ["outputs"] and {run for run, *_ in after["points"]} == {"outputs"}
    fresh = tmp_path / "fresh.duckdb"
    cli_json(fresh, "ingest", str(root))
    assert stored(fresh)["points"] == after["points"]


def test_a_live_collector_drops_both_early_runs_when_the_checkpoint_comes_and_a_restart_agrees(tmp_path):
    root, db = tmp_path / "root", tmp_path / "rw.duckdb"
    out = root / "outputs"
    root.mkdir()
    daemon = Daemon(db, [root]).start()
    try:
        client = daemon.client()
        tensorboard(out)
        console(out)
        early = {f"outputs/runs/{LIFE}", "outputs/logs"}
        wait_for(lambda: {r["id"] for r in client.get("/api/runs")} == early, "the two early runs")
        first_checkpoint(out)
        wait_for(lambda: [r["id"] for r in client.get("/api/runs")] == ["outputs"], "the early runs gone")
        assert client.get("/api/alerts") == [] or all(
            a["run"] == "outputs" for a in client.get("/api/alerts")
        )
    finally:
        assert daemon.stop() == 0
    told = daemon.log.read_text()
    assert (
        f"its points left run outputs/runs/{LIFE}, read again; run outputs/runs/{LIFE} had no other" in told
    )
    assert "its points left run outputs/logs, read no more; run outputs/logs had no other" in told
    live = stored(db)
    assert live["runs"] == ["outputs"] and live["alerts"] in ([], [("outputs",)])
    # a restart (`serve --once` on a copy) and a fresh `ingest`, twice, say the same
    again = tmp_path / "again.duckdb"
    shutil.copy(db, again)
    cli(again, "serve", "--once", str(root))
    fresh = tmp_path / "fresh.duckdb"
    cli_json(fresh, "ingest", str(root))
    cli_json(fresh, "ingest", str(root))
    for other in (stored(again), stored(fresh)):
        assert (other["runs"], other["points"], other["summaries"]) == (
            live["runs"],
            live["points"],
            live["summaries"],
        )
        assert [(r, Path(p).name, f) for r, p, f in other["sources"]] == [
            (r, Path(p).name, f) for r, p, f in live["sources"]
        ]
