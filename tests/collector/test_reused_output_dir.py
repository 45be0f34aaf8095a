"""One HF `output_dir` reused by several runs is split into its runs, each with its own points and checkpoints;
a resume (from the last checkpoint, or rewound to an earlier one) stays one run. Ingested by
`python -m collector ingest` (a real subprocess) into a real DuckDB file, read back through the API's views.
The folders are written here in the HF Trainer's shapes (trainer_state.json, checkpoint-N/, runs/*/ events)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from collector.api import runs as api_runs
from collector.formats import hf_lineage
from collector.runs.service import RunService
from collector.store.db import Store
from tests.collector.test_daemon_support import cli_json

T0 = 1_760_000_000  # the first run's start (seconds since the epoch)


def history(steps: range, loss0: float, max_steps: int, *, bend: int | None = None) -> list[dict]:
    """HF log_history entries at `steps`; after step `bend` the losses differ (a rewound resume's new life)."""
    out = []
    for s in steps:
        loss = loss0 - s / 1000 - (0.5 if bend is not None and s > bend else 0.0)
        out.append({"step": s, "loss": round(loss, 6), "learning_rate": 1e-5, "epoch": s / max_steps})
    return out


def state(entries: list[dict], max_steps: int, batch: int = 2) -> str:
    return json.dumps(
        {
            "global_step": entries[-1]["step"],
            "max_steps": max_steps,
            "logging_steps": 10,
            "save_steps": 50,
            "train_batch_size": batch,
            "num_train_epochs": 3,
            "log_history": entries,
            "trial_name": None,
        },
        indent=2,
        sort_keys=True,
    )


def save(out: Path, name: str, text: str, when: float) -> None:
    """A state file (`trainer_state.json` or `checkpoint-N/trainer_state.json`, with weights) written at `when`."""
    path = out / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if path.parent != out:
        (path.parent / "config.json").write_text("{}")
        (path.parent / "pytorch_model.bin").write_bytes(
            b"not a zip"
        )  # an incomplete checkpoint is indexed too
    os.utime(path, (when, when))


def life(out: Path, started: int, losses: dict[int, float], when: float) -> Path:
    """An HF TensorBoard life under `runs/`, its file named for when it started (`tfevents.<time>.`)."""
    folder = out / "runs" / f"life-{started}"
    writer = EventFileWriter(str(folder))
    for step, value in losses.items():
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="train/loss", simple_value=value)])
        writer.add_event(event_pb2.Event(step=step, wall_time=float(started + step), summary=summary))
    writer.close()
    [written] = folder.glob("events.out.tfevents.*")
    named = folder / f"events.out.tfevents.{started}.host.1.0"
    written.rename(named)
    os.utime(named, (when, when))
    return named


def runs_and_points(db: Path, out: Path) -> dict[str, dict]:
    store = Store(db)
    try:
        found = {}
        for run_id in sorted(r["id"] for r in api_runs.runs(RunService(store))):
            detail = api_runs.run(RunService(store), run_id)
            steps = store.rows(
                "SELECT step, value FROM points WHERE run_id = ? AND metric = 'loss' ORDER BY step", [run_id]
            )
            advice = RunService(store).advice(run_id)
            found[run_id] = {
                "loss": steps,
                # the folders seen (these fixtures hold only trainer_state.json, so advice also infers saves)
                "checkpoints": [c["step"] for c in advice["checkpoints"] if not c["inferred"]],
                "deletable": advice["deletable"],
                "sources": sorted(Path(s["path"]).relative_to(out).as_posix() for s in detail["sources"]),
            }
        return found
    finally:
        store.close()


def seen_steps(advice: dict) -> list[int]:
    """The checkpoint folders seen (these fixtures hold only trainer_state.json, so advice also infers saves)."""
    return [c["step"] for c in advice["checkpoints"] if not c["inferred"]]


def two_runs(out: Path) -> None:
    """Run A (200 steps, batch 2) then run B (100 steps so far, batch 4) in one output folder; B's
    checkpoint-100 overwrote A's."""
    a = history(range(10, 201, 10), 2.0, 200)
    save(out, "checkpoint-50/trainer_state.json", state(a[:5], 200), T0 + 50)
    save(out, "checkpoint-150/trainer_state.json", state(a[:15], 200), T0 + 150)
    save(out, "checkpoint-200/trainer_state.json", state(a, 200), T0 + 200)
    save(out, "trainer_state.json", state(a, 200), T0 + 201)
    life(out, T0, {e["step"]: e["loss"] for e in a}, T0 + 201)
    b = history(range(10, 101, 10), 3.0, 300)
    save(out, "checkpoint-100/trainer_state.json", state(b, 300, batch=4), T0 + 1100)
    life(out, T0 + 1000, {e["step"]: e["loss"] for e in b}, T0 + 1100)


def test_a_reused_output_folder_is_two_runs_with_their_own_points_and_checkpoints(tmp_path):
    out = tmp_path / "root" / "out"
    two_runs(out)
    db = tmp_path / "rw.duckdb"
    assert cli_json(db, "ingest", str(tmp_path / "root"))["runs"] == ["out", "out/run-to-200"]
    found = runs_and_points(db, out)
    current, earlier = found["out"], found["out/run-to-200"]
    assert [s for s, _ in current["loss"]] == list(range(10, 101, 10))
    assert current["loss"][0][1] == 3.0 - 0.01
    assert current["checkpoints"] == [100]
    assert [s for s, _ in earlier["loss"]] == list(range(10, 201, 10))
    assert earlier["loss"][0][1] == 2.0 - 0.01
    assert earlier["checkpoints"] == [50, 150, 200]  # its checkpoint-100 was overwritten by the other run
    assert 100 not in earlier["deletable"] and not set(current["deletable"]) & {50, 150, 200}
    assert current["sources"] == [
        "checkpoint-100/trainer_state.json",
        f"runs/life-{T0 + 1000}/events.out.tfevents.{T0 + 1000}.host.1.0",
    ]
    assert earlier["sources"] == [f"runs/life-{T0}/events.out.tfevents.{T0}.host.1.0", "trainer_state.json"]


def test_the_split_moves_points_already_stored_for_the_folder(tmp_path):
    # Run A is read while it is the folder's only run; then run B saves into the same folder.
    out = tmp_path / "root" / "out"
    a = history(range(10, 201, 10), 2.0, 200)
    save(out, "checkpoint-200/trainer_state.json", state(a, 200), T0 + 200)
    save(out, "trainer_state.json", state(a, 200), T0 + 201)
    db = tmp_path / "rw.duckdb"
    assert cli_json(db, "ingest", str(tmp_path / "root"))["runs"] == ["out"]
    assert len(runs_and_points(db, out)["out"]["loss"]) == 20
    b = history(range(10, 101, 10), 3.0, 300)
    save(out, "checkpoint-100/trainer_state.json", state(b, 300, batch=4), T0 + 1100)
    assert cli_json(db, "ingest", str(tmp_path / "root"))["runs"] == ["out", "out/run-to-200"]
    found = runs_and_points(db, out)
    assert found["out"]["loss"] == [(e["step"], e["loss"]) for e in b]  # none of A's steps 110-200 stayed
    assert found["out/run-to-200"]["loss"] == [(e["step"], e["loss"]) for e in a]
    assert (found["out"]["checkpoints"], found["out/run-to-200"]["checkpoints"]) == ([100], [200])


def test_a_resume_stays_one_run_whether_it_goes_on_or_rewinds(tmp_path):
    out = tmp_path / "root" / "out"
    a = history(range(10, 201, 10), 2.0, 300)
    save(out, "checkpoint-100/trainer_state.json", state(a[:10], 300), T0 + 100)
    save(out, "checkpoint-200/trainer_state.json", state(a, 300), T0 + 200)
    life(out, T0, {e["step"]: e["loss"] for e in a}, T0 + 200)
    # resumed from checkpoint-100 (rewound): its new life writes steps 110.. again, with other values
    resumed = history(range(10, 151, 10), 2.0, 300, bend=100)
    save(out, "checkpoint-150/trainer_state.json", state(resumed, 300), T0 + 1150)
    life(out, T0 + 1000, {e["step"]: e["loss"] for e in resumed[10:]}, T0 + 1150)
    # and resumed again from checkpoint-150, still running (no save yet): goes on at 160
    life(out, T0 + 2000, {160: 1.3, 170: 1.29}, T0 + 2100)
    db = tmp_path / "rw.duckdb"
    assert cli_json(db, "ingest", str(tmp_path / "root"))["runs"] == ["out"]
    found = runs_and_points(db, out)["out"]
    assert found["checkpoints"] == [100, 150, 200]
    assert [s for s, _ in found["loss"]] == list(range(10, 201, 10))
    assert dict(found["loss"])[120] == resumed[11]["loss"]  # the rewound life's value is the one kept


def test_a_new_run_that_has_saved_nothing_yet_is_the_folders_current_run(tmp_path):
    out = tmp_path / "root" / "out"
    a = history(range(10, 201, 10), 2.0, 200)
    save(out, "checkpoint-200/trainer_state.json", state(a, 200), T0 + 200)
    life(out, T0, {e["step"]: e["loss"] for e in a}, T0 + 200)
    # a rerun from scratch into the same folder: its TensorBoard life starts over at step 10
    life(out, T0 + 1000, {10: 2.9, 20: 2.8, 30: 2.7}, T0 + 1030)
    db = tmp_path / "rw.duckdb"
    assert cli_json(db, "ingest", str(tmp_path / "root"))["runs"] == ["out", "out/run-to-200"]
    found = runs_and_points(db, out)
    assert found["out"]["loss"] == [
        (10, pytest.approx(2.9)),
        (20, pytest.approx(2.8)),
        (30, pytest.approx(2.7)),
    ]
    assert found["out"]["checkpoints"] == [] and found["out/run-to-200"]["checkpoints"] == [200]
    assert len(found["out/run-to-200"]["loss"]) == 20


def test_lineages_of_the_real_reused_folders_in_the_corpus():
    # huloujun/GreenBuilding-QA-LLM outputs/ held checkpoint-384 (3 epochs, batch 2) and checkpoint-640
    # (5 epochs, batch 1); SeanGormann/llm_recovery's root held checkpoint-200 (333 steps) and checkpoint-1000
    # (1333 steps): each pair is two runs.
    from tests.conftest import SHARED

    files = SHARED / "real-runs-wild" / "files"
    for a, b in (
        (
            "huloujun__GreenBuilding-QA-LLM__outputs-checkpoint-384",
            "huloujun__GreenBuilding-QA-LLM__outputs-checkpoint-640",
        ),
        ("SeanGormann__llm_recovery__checkpoint-200", "SeanGormann__llm_recovery__checkpoint-1000"),
    ):
        states = [files / f"{a}-trainer_state.json", files / f"{b}-trainer_state.json"]
        found = hf_lineage.lineages(states, [])
        assert sorted(g.last_step for g in found) == sorted(
            hf_lineage.state_facts(p)["global_step"] for p in states
        )
    # a run's mid-run checkpoint and its final state are one run (syGOAT/Mistral-v0.2-Translator-bf16)
    states = [
        files / "syGOAT__Mistral-v0.2-Translator-bf16__checkpoint-4000-trainer_state.json",
        files / "syGOAT__Mistral-v0.2-Translator-bf16__trainer_state.json",
    ]
    assert len(hf_lineage.lineages(states, [])) == 1


def test_a_live_collector_splits_the_folder_when_a_new_run_saves_into_it(tmp_path):
    # `collector serve` (a real process, real watchdog) reads run A as the folder's run; then run B writes
    # its TensorBoard life and saves its first checkpoint into the same folder while the collector watches.
    from tests.collector.test_daemon_support import Daemon, wait_for

    root = tmp_path / "root"
    out = root / "out"
    a = history(range(10, 201, 10), 2.0, 200)
    save(out, "checkpoint-200/trainer_state.json", state(a, 200), T0 + 200)
    save(out, "trainer_state.json", state(a, 200), T0 + 201)
    daemon = Daemon(tmp_path / "rw.duckdb", [root]).start()
    try:
        client = daemon.client()

        def loss(run: str) -> list:
            found = client.get(f"/api/runs/{run}/metrics", {"metric": "loss", "points": 1000})["series"]
            return list(zip(found[0]["steps"], found[0]["values"], strict=True)) if found else []

        wait_for(lambda: len(loss("out")) == 20, "run A's 20 points under out")
        b = history(range(10, 101, 10), 3.0, 300)
        life(out, int(T0 + 1000), {e["step"]: e["loss"] for e in b[:3]}, T0 + 1030)
        save(out, "checkpoint-100/trainer_state.json", state(b, 300, batch=4), T0 + 1100)
        wait_for(lambda: {r["id"] for r in client.get("/api/runs")} == {"out", "out/run-to-200"}, "the split")
        wait_for(
            lambda: loss("out") == [(e["step"], e["loss"]) for e in b], "out holding run B's points only"
        )
        assert loss("out/run-to-200") == [(e["step"], e["loss"]) for e in a]
        wait_for(
            lambda: seen_steps(client.get("/api/runs/out/checkpoints")) == [100],
            "out's own checkpoint",
        )
        wait_for(
            lambda: seen_steps(client.get("/api/runs/out/run-to-200/checkpoints")) == [200],
            "the earlier run's own checkpoint (its checkpoint-100 was overwritten by run B)",
        )
    finally:
        daemon.ensure_stopped()


def test_the_real_reused_outputs_folder_ingests_as_two_runs(tmp_path):
    # huloujun/GreenBuilding-QA-LLM's outputs/ as it was when both runs had saved there: checkpoint-384
    # (3 epochs, batch 2, 38 loss points) and checkpoint-640 (5 epochs, batch 1, 64 loss points), their states
    # read from ../shared at test time; the 640-step run wrote last.
    from tests.conftest import SHARED

    files = SHARED / "real-runs-wild" / "files"
    out = tmp_path / "root" / "outputs"
    for step, when in ((384, T0), (640, T0 + 1000)):
        text = (
            files / f"huloujun__GreenBuilding-QA-LLM__outputs-checkpoint-{step}-trainer_state.json"
        ).read_text()
        save(out, f"checkpoint-{step}/trainer_state.json", text, when)
    db = tmp_path / "rw.duckdb"
    assert cli_json(db, "ingest", str(tmp_path / "root"))["runs"] == ["outputs", "outputs/run-to-384"]
    found = runs_and_points(db, out)
    assert (len(found["outputs"]["loss"]), found["outputs"]["loss"][-1][0]) == (64, 640)
    assert (len(found["outputs/run-to-384"]["loss"]), found["outputs/run-to-384"]["loss"][-1][0]) == (38, 380)
    assert (found["outputs"]["checkpoints"], found["outputs/run-to-384"]["checkpoints"]) == ([640], [384])


def test_a_cloned_output_folder_is_read_by_step_not_by_the_order_the_clone_wrote_it(tmp_path):
    """A folder checked out from git (or copied) is written in seconds, in name order: checkpoint-900 after
    checkpoint-1876. Before, the newest file by time was taken for each run's history and the folder's current
    run, so runwatch read 900 of 1876 steps and kept the wrong checkpoints. The shapes are those of two public
    repositories that commit their `outputs/` trees: yevvonlim/CAS4133-hw2 (commit
    057e0ff..., one run, checkpoint-100 ... checkpoint-1876) and arthuribias-coder/tech-challenge-finetune
    (commit b176d62..., two runs of max_steps 2250 and 4500 saving every 50 and 100 into one folder)."""
    one = tmp_path / "one" / "outputs"
    a = history(range(10, 1881, 10), 2.0, 1880)
    for i, stop in enumerate(sorted((100, 900, 1880, 1000, 1800), key=str)):  # name order, as git writes
        save(one, f"checkpoint-{stop}/trainer_state.json", state(a[: stop // 10], 1880), T0 + i * 0.01)
    db = tmp_path / "one.duckdb"
    assert cli_json(db, "ingest", str(tmp_path / "one"))["runs"] == ["outputs"]
    found = runs_and_points(db, one)["outputs"]
    assert found["loss"][-1][0] == 1880 and len(found["loss"]) == 188
    assert found["checkpoints"] == [100, 900, 1000, 1800, 1880]

    two = tmp_path / "two" / "outputs"
    b = history(range(10, 451, 10), 3.0, 450)  # the longer run (max_steps 450, saves every 50)
    c = history(range(10, 226, 5), 3.5, 225)  # the shorter one, logging every 5
    saves = [(f"checkpoint-{s}", state(b[: s // 10], 450)) for s in (50, 100, 200, 300, 450)]
    saves += [(f"checkpoint-{s}", state(c[: s // 5], 225, batch=4)) for s in (25, 75, 150, 225)]
    for i, (name, text) in enumerate(sorted(saves, key=lambda n: n[0])):
        save(two, f"{name}/trainer_state.json", text, T0 + i * 0.01)
    db = tmp_path / "two.duckdb"
    assert cli_json(db, "ingest", str(tmp_path / "two"))["runs"] == ["outputs", "outputs/run-to-225"]
    found = runs_and_points(db, two)
    assert found["outputs"]["loss"][-1][0] == 450 and found["outputs/run-to-225"]["loss"][-1][0] == 225
    assert found["outputs"]["checkpoints"] == [50, 100, 200, 300, 450]
    assert found["outputs/run-to-225"]["checkpoints"] == [25, 75, 150, 225]
