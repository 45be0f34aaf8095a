"""The checkpoint index over real checkpoint folders: real safetensors and torch files, whole and truncated."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from collector.ingest.checkpoints import safetensors_problem, scan_checkpoints


def tensors() -> dict[str, torch.Tensor]:
    return {"embed.weight": torch.arange(64.0).reshape(8, 8), "lm_head.bias": torch.zeros(8)}


def hf_export(folder: Path, tokenizer: str | None = "tokenizer.json", weights: str = "safetensors") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2", "hidden_size": 8}))
    if tokenizer:
        (folder / tokenizer).write_text("{}")
    if weights == "safetensors":
        save_file(tensors(), str(folder / "model.safetensors"))
    elif weights == "bin":
        torch.save(tensors(), folder / "pytorch_model.bin")
    return folder


def verl_checkpoint(run_dir: Path, step: int, export: bool = True) -> Path:
    folder = run_dir / f"global_step_{step}"
    folder.mkdir(parents=True)
    torch.save({"w": torch.ones(4)}, folder / "model_world_size_1_rank_0.pt")
    if export:
        hf_export(folder / "huggingface")
    return folder


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def test_verl_checkpoints_whole_and_shards_only(tmp_path):
    whole = verl_checkpoint(tmp_path, 10)
    shards_only = verl_checkpoint(tmp_path, 5, export=False)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("10\n")
    index = scan_checkpoints(tmp_path)
    assert index.latest_marker == 10
    assert [(c.step, c.kind, c.complete, c.problem) for c in index.checkpoints] == [
        (5, "verl", False, "no huggingface/ folder (model shards only)"),
        (10, "verl", True, None),
    ]
    assert index.checkpoints[0].path == shards_only
    assert index.checkpoints[1].bytes == folder_bytes(whole) > 0


def test_a_truncated_safetensors_file_makes_the_checkpoint_incomplete(tmp_path):
    folder = verl_checkpoint(tmp_path, 20)
    weights = folder / "huggingface" / "model.safetensors"
    assert safetensors_problem(weights) is None
    data = weights.read_bytes()
    weights.write_bytes(data[:-10])
    [checkpoint] = scan_checkpoints(tmp_path).checkpoints
    assert not checkpoint.complete
    assert (
        checkpoint.problem.startswith("huggingface/model.safetensors:") and "truncated" in checkpoint.problem
    )
    weights.write_bytes(data[:20])  # cut inside the header
    assert "truncated" in safetensors_problem(weights)
    weights.write_bytes(data[:4])
    assert "truncated" in safetensors_problem(weights)
    weights.write_bytes(b"\x10" + b"\x00" * 7 + b"not json at all!" + b"\x00" * 8)
    assert "not valid JSON" in safetensors_problem(weights)


def test_verl_export_without_tokenizer_or_config_is_incomplete(tmp_path):
    no_tokenizer = verl_checkpoint(tmp_path, 1, export=False)
    hf_export(no_tokenizer / "huggingface", tokenizer=None)
    no_config = verl_checkpoint(tmp_path, 2)
    (no_config / "huggingface" / "config.json").unlink()
    no_weights = verl_checkpoint(tmp_path, 3, export=False)
    hf_export(no_weights / "huggingface", weights="none")
    bin_weights = verl_checkpoint(tmp_path, 4, export=False)
    hf_export(bin_weights / "huggingface", tokenizer="tokenizer_config.json", weights="bin")
    problems = {c.step: c.problem for c in scan_checkpoints(tmp_path).checkpoints}
    assert problems[1] == "huggingface/ has no tokenizer (tokenizer.json or tokenizer_config.json)"
    assert problems[2] == "huggingface/ has no config.json"
    assert problems[3].startswith("huggingface/ has no weights")
    assert problems[4] is None


def test_verl_rl_layout_with_the_export_under_actor(tmp_path):
    folder = tmp_path / "global_step_7"
    hf_export(folder / "actor" / "huggingface")
    [checkpoint] = scan_checkpoints(tmp_path).checkpoints
    assert checkpoint.complete and checkpoint.kind == "verl"


def test_hf_checkpoints_full_lora_and_broken(tmp_path):
    hf_export(tmp_path / "checkpoint-100", tokenizer=None)
    lora = tmp_path / "checkpoint-200"
    lora.mkdir()
    (lora / "adapter_config.json").write_text(json.dumps({"r": 8}))
    save_file({"lora_A.weight": torch.ones(8, 2)}, str(lora / "adapter_model.safetensors"))
    torn_bin = hf_export(tmp_path / "checkpoint-300", tokenizer=None, weights="bin")
    data = (torn_bin / "pytorch_model.bin").read_bytes()
    (torn_bin / "pytorch_model.bin").write_bytes(data[: len(data) // 2])
    (tmp_path / "checkpoint-400").mkdir()
    (tmp_path / "checkpoint-400" / "trainer_state.json").write_text("{}")
    index = scan_checkpoints(tmp_path)
    assert index.latest_marker is None
    got = {c.step: (c.kind, c.complete, c.problem) for c in index.checkpoints}
    assert got[100] == ("hf", True, None)
    assert got[200] == ("hf", True, None)
    assert got[300] == (
        "hf",
        False,
        "checkpoint-300/pytorch_model.bin: not a complete zip archive (truncated?)",
    )
    # only the trainer's state (what people commit to git): saved by the run, its weights not here
    only_state = "only trainer_state.json (no weights nor config): the weights of this save are not here"
    assert got[400] == ("hf", False, only_state)
    assert [c.step for c in index.checkpoints if c.state_only] == [400]


def test_sharded_weights_need_every_shard_the_index_names(tmp_path):
    folder = tmp_path / "checkpoint-50"
    hf_export(folder, tokenizer=None, weights="none")
    save_file({"a": torch.ones(2)}, str(folder / "model-00001-of-00002.safetensors"))
    weight_map = {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    [checkpoint] = scan_checkpoints(tmp_path).checkpoints
    assert checkpoint.problem == (
        "checkpoint-50/model.safetensors.index.json names shards that are missing: model-00002-of-00002.safetensors"
    )
    save_file({"b": torch.ones(2)}, str(folder / "model-00002-of-00002.safetensors"))
    assert scan_checkpoints(tmp_path).checkpoints[0].complete


def test_other_folders_and_a_bad_marker_are_ignored(tmp_path):
    (tmp_path / "global_step_x").mkdir()
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "global_step_3").write_text("a file, not a folder")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("")
    assert scan_checkpoints(tmp_path).checkpoints == []
    assert scan_checkpoints(tmp_path).latest_marker is None
    assert scan_checkpoints(tmp_path / "missing").checkpoints == []


def hf_state(folder: Path, step: int, max_steps: int, first_loss: float = 2.5) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    state = {
        "global_step": step,
        "max_steps": max_steps,
        "num_train_epochs": 3,
        "train_batch_size": 2,
        "logging_steps": 10,
        "save_steps": 100,
        "log_history": [{"step": 10, "loss": first_loss}],
    }
    (folder / "trainer_state.json").write_text(json.dumps(state))


def test_verl_checkpoints_in_its_default_nested_tree_or_where_the_config_says(tmp_path):
    run = tmp_path / "run"
    nested = run / "checkpoints" / "my_project" / "exp_a"
    verl_checkpoint(nested, 10)
    verl_checkpoint(nested, 20, export=False)
    (nested / "latest_checkpointed_iteration.txt").write_text("20")
    index = scan_checkpoints(run)
    assert [(c.step, c.complete, c.path.parent) for c in index.checkpoints] == [
        (10, True, nested),
        (20, False, nested),
    ]
    assert index.latest_marker == 20
    # two experiments under checkpoints/: the one run.json names
    verl_checkpoint(run / "checkpoints" / "my_project" / "exp_b", 30)
    (run / "run.json").write_text(json.dumps({"trainer": {"experiment_name": "exp_b"}}))
    assert [c.step for c in scan_checkpoints(run).checkpoints] == [30]
    # a folder the Hydra config names, relative to the run folder
    other = tmp_path / "run2"
    verl_checkpoint(other / "ckpts", 40)
    (other / ".hydra").mkdir(parents=True)
    (other / ".hydra" / "config.yaml").write_text(
        "trainer:\n  project_name: p\n  default_local_dir: ckpts  # saves\n"
    )
    assert [c.step for c in scan_checkpoints(other).checkpoints] == [40]


def test_last_checkpoint_is_the_runs_latest_checkpoint(tmp_path):
    hf_export(tmp_path / "checkpoint-100", tokenizer=None)
    hf_state(tmp_path / "checkpoint-100", 100, 300)
    hub = hf_export(tmp_path / "last-checkpoint", tokenizer=None)
    hf_state(hub, 200, 300)
    index = scan_checkpoints(tmp_path)
    assert [(c.step, c.path.name, c.complete) for c in index.checkpoints] == [
        (100, "checkpoint-100", True),
        (200, "last-checkpoint", True),
    ]
    hf_export(tmp_path / "checkpoint-200", tokenizer=None)  # the same step saved locally too: indexed once
    hf_state(tmp_path / "checkpoint-200", 200, 300)
    assert [c.path.name for c in scan_checkpoints(tmp_path).checkpoints] == [
        "checkpoint-100",
        "checkpoint-200",
    ]


def test_checkpoints_another_run_wrote_in_the_same_output_folder_are_not_this_runs(tmp_path):
    # an output_dir reused: a 3-epoch run of 384 steps saved checkpoint-384, then a run of 640 steps
    for step in (200, 384):
        hf_export(tmp_path / f"checkpoint-{step}", tokenizer=None)
        hf_state(tmp_path / f"checkpoint-{step}", step, 384, first_loss=4.879)
    for step in (100, 640):
        hf_export(tmp_path / f"checkpoint-{step}", tokenizer=None)
        hf_state(tmp_path / f"checkpoint-{step}", step, 640, first_loss=4.904)
    (tmp_path / "trainer_state.json").write_text(
        (tmp_path / "checkpoint-640" / "trainer_state.json").read_text()
    )
    index = scan_checkpoints(tmp_path)
    assert [c.step for c in index.checkpoints] == [100, 640]
    assert [(step, why) for step, _, why in index.other_runs] == [
        (200, "written by another run (max_steps 384, this run's 640)"),
        (384, "written by another run (max_steps 384, this run's 640)"),
    ]
    # same settings, a different history: still another run's
    hf_state(tmp_path / "checkpoint-200", 200, 640, first_loss=9.0)
    assert [c.step for c in scan_checkpoints(tmp_path).checkpoints] == [100, 640]
