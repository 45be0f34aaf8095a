"""Run discovery over real folders: which folders and files are runs, their ids, formats and source roles."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from collector.formats import unread
from collector.formats.discover import classify, find_runs, run_for_path


def write(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def roles(run) -> dict[str, tuple[str, str]]:
    return {s.path.relative_to(run.dir).as_posix(): (s.format, s.role) for s in run.sources}


HF_STATE = json.dumps({"global_step": 10, "log_history": [{"step": 10, "loss": 1.0}]})


def test_classify_by_name_and_by_a_peek_at_the_content(tmp_path):
    assert classify(write(tmp_path / "metrics.jsonl")) == "jsonl"
    assert classify(write(tmp_path / "status.json", "{}")) == "status"
    assert classify(write(tmp_path / "run.json", "{}")) == "run_config"
    assert classify(write(tmp_path / "trainer_state.json", HF_STATE)) == "hf_trainer_state"
    assert classify(write(tmp_path / "renamed.json", HF_STATE)) == "hf_trainer_state"
    assert classify(write(tmp_path / "config.json", '{"hidden_size": 64}')) is None
    assert classify(write(tmp_path / "events.out.tfevents.1.host")) == "tensorboard"
    assert classify(write(tmp_path / "train.log")) == "console"
    assert classify(write(tmp_path / "job.out")) == "console"
    assert classify(write(tmp_path / "stdout.txt", "loading\nstep:1 - train/loss:2.0\n")) == "console"
    assert classify(write(tmp_path / "requirements.txt", "torch==2.13.0\n")) is None
    assert classify(write(tmp_path / "latest_checkpointed_iteration.txt", "5")) == "checkpoint_marker"
    assert classify(write(tmp_path / "training_history.csv", "step,train/loss\n1,2\n")) == "csv"
    assert classify(write(tmp_path / "epochs.csv", "epoch,acc\n1,0.5\n")) == "csv"
    assert classify(write(tmp_path / "table.csv", "name,size\na,1\n")) is None
    assert classify(tmp_path / "missing.csv") is None
    assert classify(write(tmp_path / "model.safetensors")) is None


def test_runwatch_run_folder_prefers_jsonl_and_ignores_its_duplicate_views(tmp_path):
    run_dir = tmp_path / "sft" / "run-a"
    write(run_dir / "metrics.jsonl", '{"step":1,"data":{"a":1}}\n')
    write(run_dir / "training_history.csv", "step,a\n1,1\n")
    write(run_dir / "validation_history.csv", "step,val/loss\n1,1\n")
    write(run_dir / "train.log", "step:1 - a:1\n")
    write(run_dir / "status.json", "{}")
    write(run_dir / "run.json", "{}")
    write(run_dir / "latest_checkpointed_iteration.txt", "1")
    write(run_dir / "global_step_1" / "huggingface" / "metrics.jsonl", "")
    write(run_dir / "wandb" / "run" / "metrics.jsonl", "")
    [run] = find_runs([tmp_path])
    assert (run.id, run.dir, run.root, run.format) == ("sft/run-a", run_dir, tmp_path, "jsonl")
    assert roles(run) == {
        "metrics.jsonl": ("jsonl", "metrics"),
        "training_history.csv": ("csv", "ignored"),
        "validation_history.csv": ("csv", "ignored"),
        "train.log": ("console", "ignored"),
        "status.json": ("status", "meta"),
        "run.json": ("run_config", "meta"),
        "latest_checkpointed_iteration.txt": ("checkpoint_marker", "meta"),
    }


def test_precedence_between_metrics_formats(tmp_path):
    write(tmp_path / "tb" / "events.out.tfevents.1.h")
    write(tmp_path / "tb" / "trainer_state.json", HF_STATE)
    write(tmp_path / "hf" / "trainer_state.json", HF_STATE)
    write(tmp_path / "hf" / "history.csv", "epoch,loss\n1,1\n")
    write(tmp_path / "csv" / "training_history.csv", "step,loss\n1,1\n")
    write(tmp_path / "csv" / "validation_history.csv", "step,val/loss\n1,1\n")
    write(tmp_path / "csv" / "console.log")
    write(tmp_path / "log" / "console.log")
    runs = {r.id: r for r in find_runs([tmp_path])}
    assert sorted(runs) == ["csv", "hf", "log", "tb"]
    # Every metrics file of a run is read (the store keeps one value per step), copies aside.
    assert roles(runs["tb"]) == {
        "events.out.tfevents.1.h": ("tensorboard", "metrics"),
        "trainer_state.json": ("hf_trainer_state", "metrics"),
    }
    assert runs["tb"].format == "hf_trainer_state"
    assert roles(runs["hf"])["history.csv"] == ("csv", "ignored")
    assert roles(runs["csv"]) == {
        "training_history.csv": ("csv", "metrics"),
        "validation_history.csv": ("csv", "metrics"),
        "console.log": ("console", "ignored"),
    }
    assert runs["log"].format == "console"


def test_a_folder_with_only_a_status_file_is_a_run_and_one_with_nothing_readable_is_not(tmp_path):
    write(tmp_path / "starting" / "status.json", "{}")
    write(tmp_path / "other" / "notes.md", "hi")
    write(tmp_path / "ckpt-only" / "latest_checkpointed_iteration.txt", "3")
    [run] = find_runs([tmp_path])
    assert (run.id, run.format) == ("starting", "status")


def test_files_that_are_runs_by_themselves(tmp_path):
    write(tmp_path / "a__root.json", HF_STATE)
    write(tmp_path / "sub" / "b__ckpt.json", HF_STATE)
    write(tmp_path / "proj" / "exp1.jsonl", "")
    write(tmp_path / "proj" / "exp2.jsonl", "")
    runs = {r.id: r for r in find_runs([tmp_path])}
    assert sorted(runs) == ["a__root", "proj/exp1", "proj/exp2", "sub/b__ckpt"]
    assert runs["proj/exp1"].sources[0].path == tmp_path / "proj" / "exp1.jsonl"
    assert runs["a__root"].format == "hf_trainer_state"
    assert runs["a__root"].path == tmp_path / "a__root.json"  # a run that is one file: that file
    assert runs["proj/exp1"].path == tmp_path / "proj" / "exp1.jsonl"
    # Given the file itself as the root, the id is its stem.
    [alone] = find_runs([tmp_path / "sub" / "b__ckpt.json"])
    assert alone.id == "b__ckpt" and alone.path == tmp_path / "sub" / "b__ckpt.json"
    assert (
        run_for_path(tmp_path / "sub" / "b__ckpt.json", [tmp_path / "sub" / "b__ckpt.json"]).id == "b__ckpt"
    )


def test_verl_project_folder_ids_stay_put_when_experiments_are_added(tmp_path):
    write(tmp_path / "proj" / "exp1.jsonl")
    assert [r.id for r in find_runs([tmp_path])] == ["proj/exp1"]
    write(tmp_path / "proj" / "exp2.jsonl")
    assert [r.id for r in find_runs([tmp_path])] == ["proj/exp1", "proj/exp2"]
    assert run_for_path(tmp_path / "proj" / "exp2.jsonl", [tmp_path]).id == "proj/exp2"
    # A folder with a log beside its JSONL is one run folder: the JSONL wins, the log is its duplicate view.
    write(tmp_path / "custom" / "train.jsonl")
    write(tmp_path / "custom" / "train.log")
    runs = {r.id: r for r in find_runs([tmp_path])}
    assert roles(runs["custom"]) == {"train.jsonl": ("jsonl", "metrics"), "train.log": ("console", "ignored")}


def test_the_root_itself_as_a_run_uses_its_folder_name(tmp_path):
    root = tmp_path / "my-run"
    write(root / "metrics.jsonl")
    [run] = find_runs([root])
    assert (run.id, run.dir) == ("my-run", root)


def test_colliding_ids_from_several_roots_get_the_root_name(tmp_path):
    write(tmp_path / "alpha" / "run1" / "metrics.jsonl")
    write(tmp_path / "beta" / "run1" / "metrics.jsonl")
    write(tmp_path / "beta" / "run2" / "metrics.jsonl")
    roots = [tmp_path / "alpha", tmp_path / "beta"]
    assert [r.id for r in find_runs(roots)] == ["alpha/run1", "beta/run1", "run2"]
    assert run_for_path(tmp_path / "beta" / "run1" / "metrics.jsonl", roots).id == "beta/run1"
    assert run_for_path(tmp_path / "beta" / "run2" / "metrics.jsonl", roots).id == "run2"


def test_roots_of_one_name_keep_their_same_named_runs_apart(tmp_path):
    # `serve ~/projA/outputs ~/projB/outputs` (or two `metrics.jsonl` given as roots): the roots' names alone
    # are equal, so the prefix takes their parent folders; both paths give the same ids
    for project in ("projA", "projB"):
        write(tmp_path / project / "outputs" / "run1" / "metrics.jsonl")
        write(tmp_path / project / "logs" / "metrics.jsonl")
    write(tmp_path / "projB" / "outputs" / "run2" / "metrics.jsonl")
    roots = [tmp_path / "projA" / "outputs", tmp_path / "projB" / "outputs"]
    assert [r.id for r in find_runs(roots)] == ["projA/outputs/run1", "projB/outputs/run1", "run2"]
    assert run_for_path(roots[0] / "run1" / "metrics.jsonl", roots).id == "projA/outputs/run1"
    assert run_for_path(roots[1] / "run2" / "metrics.jsonl", roots).id == "run2"
    files = [tmp_path / project / "logs" / "metrics.jsonl" for project in ("projA", "projB")]
    assert [(r.id, r.file) for r in find_runs(files)] == [
        ("projA/logs/metrics/metrics", files[0]),
        ("projB/logs/metrics/metrics", files[1]),
    ]
    assert run_for_path(files[1], files).id == "projB/logs/metrics/metrics"


def test_hf_output_folder_reads_the_newest_checkpoint_state_until_a_top_level_one_exists(tmp_path):
    out = tmp_path / "output"
    for n in (50, 100, 150):
        write(out / f"checkpoint-{n}" / "trainer_state.json", HF_STATE)
    write(out / "checkpoint-200" / "config.json", "{}")  # being written: no state yet
    [run] = find_runs([tmp_path])
    assert run.id == "output"
    assert [s.path for s in run.metrics_sources()] == [out / "checkpoint-150" / "trainer_state.json"]
    # A newer checkpoint moves the source to its file: the same run, a new path.
    newer = write(out / "checkpoint-200" / "trainer_state.json", HF_STATE)
    moved = run_for_path(newer, [tmp_path])
    assert moved.id == "output"
    assert [s.path for s in moved.metrics_sources()] == [newer]
    # An older checkpoint's change still belongs to the run (its checkpoint index may change).
    assert run_for_path(out / "checkpoint-50" / "trainer_state.json", [tmp_path]).id == "output"
    write(out / "trainer_state.json", HF_STATE)
    [run] = find_runs([tmp_path])
    assert [s.path for s in run.metrics_sources()] == [out / "trainer_state.json"]


def test_hf_tensorboard_logging_is_read_into_the_output_folder_run(tmp_path):
    out = tmp_path / "output"
    write(out / "checkpoint-10" / "trainer_state.json", HF_STATE)
    events = write(out / "runs" / "Nov22_10-00-00_host" / "events.out.tfevents.1.host")
    write(tmp_path / "tb-only" / "runs" / "x" / "events.out.tfevents.2.host")  # not under an HF output
    runs = {r.id: r for r in find_runs([tmp_path])}
    assert sorted(runs) == ["output", "tb-only/runs/x"]
    assert roles(runs["output"]) == {
        "checkpoint-10/trainer_state.json": ("hf_trainer_state", "metrics"),
        "runs/Nov22_10-00-00_host/events.out.tfevents.1.host": ("hf_tensorboard", "metrics"),
    }
    assert run_for_path(events, [tmp_path]).id == "output"
    tb_only = tmp_path / "tb-only" / "runs" / "x" / "events.out.tfevents.2.host"
    assert run_for_path(tb_only, [tmp_path]).id == "tb-only/runs/x"


def test_a_logs_folder_of_console_logs_in_an_hf_output_folder_is_that_runs_console_not_a_run(tmp_path):
    # yevvonlim/CAS4133-hw2's outputs/: 19 checkpoint states and logs/training.log, one banner line
    # ("=== STARTING OPTIMIZED SFT AND DPO RUN ===") that was an EMPTY run of its own, `outputs/logs`.
    out = tmp_path / "outputs"
    write(out / "checkpoint-100" / "trainer_state.json", HF_STATE)
    banner = write(out / "logs" / "training.log", "=== STARTING OPTIMIZED SFT AND DPO RUN ===\n")
    [run] = find_runs([tmp_path])
    assert run.id == "outputs"
    assert roles(run) == {
        "checkpoint-100/trainer_state.json": ("hf_trainer_state", "metrics"),
        "logs/training.log": ("console", "ignored"),
    }
    assert [(p, unread.is_copy(why)) for p, why in run.skipped] == [(banner, True)]  # listed, with why
    assert run_for_path(banner, [tmp_path]).id == "outputs"
    # a logs/ folder holding anything but console logs is what it looks like by itself, as before
    write(out / "logs" / "metrics.jsonl", '{"step": 1, "loss": 1.0}\n')
    assert sorted(r.id for r in find_runs([tmp_path])) == ["outputs", "outputs/logs"]
    assert run_for_path(banner, [tmp_path]).id == "outputs/logs"
    # and a logs/ folder of consoles beside no HF state is a run of its own
    alone = write(tmp_path / "verl" / "logs" / "train.log", "step:1 - loss:1.0\n")
    assert run_for_path(alone, [tmp_path]).id == "verl/logs"


def test_run_for_path_maps_changed_files_to_their_run(tmp_path):
    run_dir = tmp_path / "r"
    metrics = write(run_dir / "metrics.jsonl")
    status = write(run_dir / "status.json", "{}")
    shard = write(run_dir / "global_step_5" / "model_world_size_1_rank_0.pt")
    hf_config = write(run_dir / "global_step_5" / "huggingface" / "config.json", "{}")
    marker = write(run_dir / "latest_checkpointed_iteration.txt", "5")
    roots = [tmp_path]
    assert run_for_path(metrics, roots).id == "r"
    assert run_for_path(status, roots).id == "r"
    assert run_for_path(marker, roots).id == "r"
    assert run_for_path(shard, roots).id == "r"
    assert run_for_path(hf_config, roots).id == "r"
    assert run_for_path(run_dir / "global_step_5", roots).id == "r"
    assert run_for_path(run_dir / "global_step_9", roots).id == "r"  # a checkpoint folder just deleted
    assert run_for_path(write(run_dir / "status.json.tmp", "{}"), roots) is None
    assert run_for_path(write(run_dir / "wandb" / "x.log"), roots) is None
    assert run_for_path(tmp_path.parent / "elsewhere.jsonl", roots) is None


def test_find_runs_over_the_real_runs_folder(real_runs):
    runs = find_runs([real_runs])
    names = sorted(p.stem for p in real_runs.glob("*.json"))
    assert [r.id for r in runs] == names
    assert {r.format for r in runs} == {"hf_trainer_state"}
    assert all(len(r.sources) == 1 and r.sources[0].role == "metrics" for r in runs)


@pytest.mark.parametrize("seed", range(6))
def test_run_for_path_agrees_with_find_runs_on_generated_trees(tmp_path, seed):
    rng = random.Random(seed)
    names = ["metrics.jsonl", "train.log", "status.json", "run.json", "training_history.csv", "exp.jsonl"]
    names += [
        "events.out.tfevents.1.h",
        "trainer_state.json",
        "renamed.json",
        "latest_checkpointed_iteration.txt",
    ]
    contents = {".json": HF_STATE, ".csv": "step,loss\n1,1\n"}
    roots = [tmp_path / "a", tmp_path / "b" / "a2"]
    for _ in range(60):
        root = rng.choice(roots)
        parts = ["x", "y", "runs", "runs", "checkpoint-3", "logs"]
        folder = root.joinpath(*rng.sample(parts, rng.randint(0, 3)))
        name = rng.choice(names)
        text = "{}" if name in ("status.json", "run.json") else contents.get(Path(name).suffix, "")
        write(folder / name, text)
    runs = find_runs(roots)
    assert len({r.id for r in runs}) == len(runs), "run ids must be unique"
    for run in runs:
        for source in run.sources:
            found = run_for_path(source.path, roots)
            assert found is not None and found.id == run.id, (source.path, run.id, found and found.id)
    # And a file no run reads maps to no run.
    known = {s.path for r in runs for s in r.sources}
    for path in (p for root in roots for p in root.rglob("*") if p.is_file() and p not in known):
        found = run_for_path(path, roots)
        in_checkpoint = any(part.startswith("checkpoint-") for part in path.relative_to(tmp_path).parts)
        assert found is None or in_checkpoint, (path, found and found.id)


def test_symlinks_that_leave_the_root_are_not_followed(tmp_path):
    outside = tmp_path / "outside"
    secret = write(outside / "secret.jsonl", '{"step":1,"data":{"loss":1}}\n')
    write(outside / "folder" / "metrics.jsonl", '{"step":1,"data":{"loss":1}}\n')
    root = tmp_path / "root"
    real = write(root / "a" / "metrics.jsonl", '{"step":1,"data":{"loss":1}}\n')
    (root / "a" / "status.json").symlink_to(outside / "secret.jsonl")
    (root / "b").mkdir()
    (root / "b" / "leak.jsonl").symlink_to(secret)  # a file link out of the root
    (root / "c").symlink_to(outside / "folder", target_is_directory=True)  # a folder link out
    (root / "d").mkdir()
    (root / "d" / "same.jsonl").symlink_to(real)  # a link that stays inside is fine

    runs = {run.id: run for run in find_runs([root])}
    assert {r for r, run in runs.items() if run.sources} == {"a", "d/same"}
    # the file link out of the root is named on its folder's run, with the reason, and not read
    assert not runs["b"].sources and [p.name for p, _ in runs["b"].skipped] == ["leak.jsonl"]
    sources = [s.path for run in runs.values() for s in run.sources]
    assert all(p.resolve().is_relative_to(root.resolve()) for p in sources)
    assert root / "a" / "status.json" not in sources
    assert run_for_path(root / "b" / "leak.jsonl", [root]) is None
    assert run_for_path(root / "c" / "metrics.jsonl", [root]) is None


def test_a_rotated_log_is_an_earlier_life_of_its_run(tmp_path):
    """`metrics.jsonl.1` (logrotate's name, or a trainer's own rotation) is read with its run, never dropped;
    in a verl project folder `<experiment>.jsonl.1` joins `<experiment>.jsonl`; a rotated whole document
    (`trainer_state.json.1`) or an unknown `x.1` is not a log and is listed, not read."""
    run = tmp_path / "exp"
    write(run / "metrics.jsonl", '{"step": 3, "data": {"loss": 1}}\n')
    write(run / "metrics.jsonl.1", '{"step": 2, "data": {"loss": 1}}\n')
    write(run / "metrics.jsonl.2", '{"step": 1, "data": {"loss": 1}}\n')
    write(run / "trainer_state.json.1", "{}")
    project = tmp_path / "proj"
    write(project / "sft.jsonl", '{"step": 2, "data": {"loss": 1}}\n')
    write(project / "sft.jsonl.1", '{"step": 1, "data": {"loss": 1}}\n')
    runs = {r.id: r for r in find_runs([tmp_path])}
    assert set(runs) == {"exp", "proj/sft"}
    assert {s.path.name for s in runs["exp"].metrics_sources()} == {
        "metrics.jsonl",
        "metrics.jsonl.1",
        "metrics.jsonl.2",
    }
    assert {s.path.name for s in runs["proj/sft"].metrics_sources()} == {"sft.jsonl", "sft.jsonl.1"}
    assert runs["proj/sft"].path == project / "sft.jsonl"
    assert classify(run / "trainer_state.json.1") is None
    assert "trainer_state.json.1" in {p.name for p, _ in runs["exp"].skipped}


def test_a_link_to_a_file_outside_the_root_is_listed_not_read(tmp_path):
    """runwatch reads only what it was given; a link out of the root is named on its run with the reason."""
    outside = write(tmp_path / "elsewhere" / "trainer_state.json", '{"log_history": []}')
    run = tmp_path / "root" / "exp"
    run.mkdir(parents=True)
    (run / "trainer_state.json").symlink_to(outside)
    [found] = find_runs([tmp_path / "root"])
    assert found.id == "exp" and not found.metrics_sources()
    assert [(p.name, why) for p, why in found.skipped] == [
        (
            "trainer_state.json",
            "a link to a file outside the watched roots: not read (add its folder as a root)",
        )
    ]


def test_a_fifo_or_a_folder_link_in_a_run_is_listed_not_read(tmp_path):
    """Nothing is skipped in silence: a FIFO (never opened: a read would block), a broken link and a link to
    a folder (never followed) in a run folder are named on the run with the reason."""
    run = tmp_path / "root" / "exp"
    write(run / "metrics.jsonl", '{"step": 1, "data": {"loss": 1}}\n')
    os.mkfifo(run / "pipe.jsonl")
    (run / "gone.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    (tmp_path / "elsewhere").mkdir()
    (run / "more").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (found,) = find_runs([tmp_path / "root"])
    assert [s.path.name for s in found.sources] == ["metrics.jsonl"]
    skipped = {p.name: why for p, why in found.skipped}
    assert skipped == {
        "gone.jsonl": unread.NOT_A_FILE_REASON,
        "more": unread.LINKED_FOLDER_REASON,
        "pipe.jsonl": unread.NOT_A_FILE_REASON,
    }
