"""MLflow's file store: metric files (`timestamp value step` lines, name from the path), params and tags."""

from __future__ import annotations

import math

from collector.formats import mlflow_entry, mlflow_metric
from tests.collector.test_parsers_support import FuzzSample, comparable, points_as_tuples

RUN = "/data/mlruns/0/4f1c2e/"
LINES = b"1732431600000 2.5 0\n1732431601000 2.25 1\n1732431602500 nan 2\n1732431603000 -inf 3\n"


def test_metric_lines_become_points_named_by_the_path():
    result = mlflow_metric.parse(LINES, path=RUN + "metrics/train/loss")
    assert comparable(points_as_tuples(result)) == [
        (0, "train/loss", 2.5, 1732431600.0),
        (1, "train/loss", 2.25, 1732431601.0),
        (2, "train/loss", "NaN", 1732431602.5),
        (3, "train/loss", -math.inf, 1732431603.0),
    ]
    assert result.bad == [] and result.consumed == len(LINES) and result.lines == 4


def test_a_bad_line_costs_itself_and_a_partial_line_waits():
    data = b"1732431600000 2.5 0\nhello world\n1732431601000 x 1\n1732431602000 1.5 2\n1732431603000 1."
    result = mlflow_metric.parse(data, 10, path=RUN + "metrics/loss")
    assert [(b.line, b.reason) for b in result.bad] == [
        (11, "not a `timestamp value step` line"),
        (12, "not a `timestamp value step` line"),
    ]
    assert [(s, v) for s, _, v, _ in points_as_tuples(result)] == [(0, 2.5), (2, 1.5)]
    assert result.consumed == data.rindex(b"\n") + 1


def test_split_anywhere_equals_one_read():
    path = RUN + "metrics/loss"
    whole = comparable(points_as_tuples(mlflow_metric.parse(LINES, path=path)))
    for cut in range(len(LINES) + 1):
        first = mlflow_metric.parse(LINES[:cut], path=path)
        second = mlflow_metric.parse(LINES[first.consumed :], 1 + first.lines, path=path)
        assert comparable(points_as_tuples(first) + points_as_tuples(second)) == whole


def test_sniff_and_names():
    assert mlflow_metric.sniff(LINES)
    assert not mlflow_metric.sniff(b"loss,step\n1.0,1\n")
    assert mlflow_metric.name_under("/x/mlruns/1/abc/metrics/eval/acc", "metrics") == "eval/acc"
    assert mlflow_metric.name_under("/x/other/loss", "metrics") is None


def test_params_and_tags_are_configuration():
    param = mlflow_entry.parse(b"0.0001", path=RUN + "params/learning_rate")
    tag = mlflow_entry.parse(b"sft-7b\n", path=RUN + "tags/mlflow.runName")
    assert param.info == {"params": {"learning_rate": "0.0001"}} and len(param.points) == 0
    assert tag.info == {"tags": {"mlflow.runName": "sft-7b"}}
    assert mlflow_entry.entry_info(param.info).config_part == {"params.learning_rate": "0.0001"}
    assert (
        mlflow_entry.parse(b"\xff\xfe", path=RUN + "params/x").bad[0].reason.startswith("param x: non-UTF-8")
    )


# A run folder's meta.yaml as MLflow's file store writes it (self-written, the shape of MLflow 2.x files).
META = (
    "artifact_uri: file:///home/me/mlruns/0/4f1c2e/artifacts\n"
    "end_time: {end}\n"
    "entry_point_name: ''\n"
    "experiment_id: '0'\n"
    "lifecycle_stage: active\n"
    "run_id: 4f1c2e\n"
    "run_name: sft-7b\n"
    "run_uuid: 4f1c2e\n"
    "source_name: ''\n"
    "source_type: 4\n"
    "source_version: ''\n"
    "start_time: 1732431600000\n"
    "status: {status}\n"
    "tags: []\n"
    "user_id: me\n"
)


def test_meta_yaml_gives_the_runs_name_status_and_times():
    from collector.formats import mlflow_meta

    done = mlflow_meta.parse(META.format(end=1732431700000, status=3).encode())
    assert done.bad == [] and len(done.points) == 0
    assert done.info == {
        "run_id": "4f1c2e",
        "experiment_id": "0",
        "lifecycle_stage": "active",
        "user_id": "me",
        "run_name": "sft-7b",
        "mlflow_status": "FINISHED",
        "state": "completed",
        "start_time": 1732431600.0,
        "end_time": 1732431700.0,
        "updated_at": 1732431700.0,
    }
    facts = mlflow_meta.run_info(done.info)
    assert (facts.status, facts.config_part) == ("completed", {"run_name": "sft-7b"})
    running = mlflow_meta.parse(META.format(end="null", status=1).encode()).info
    assert (running["state"], "end_time" in running, running["updated_at"]) == (
        "running",
        False,
        1732431600.0,
    )
    words = {n: mlflow_meta.parse(META.format(end="null", status=n).encode()).info for n in (2, 4, 5)}
    assert [(w["mlflow_status"], w.get("state")) for w in words.values()] == [
        ("SCHEDULED", None),
        ("FAILED", "failed"),
        ("KILLED", "failed"),
    ]
    # an older writer: the name under `name:`, the status as a word
    old = mlflow_meta.parse(b"name: first\nrun_uuid: ab\nexperiment_id: '1'\nstatus: FAILED\n").info
    assert (old["run_name"], old["state"]) == ("first", "failed")


def test_meta_yaml_that_cannot_be_read_is_one_bad_line_and_read_again():
    from collector.formats import mlflow_meta

    for data, reason in (
        (b"\xff\xfe", "non-UTF-8"),
        (b"", "no `key: value`"),
        (b"- a\n- b\n", "no `key: value`"),
    ):
        result = mlflow_meta.parse(data)
        assert result.consumed == 0 and reason in result.bad[0].reason, data


def test_only_a_runs_meta_yaml_is_sniffed():
    from collector.formats import mlflow_meta

    assert mlflow_meta.sniff(META.format(end="null", status=1).encode())
    experiment = (
        b"artifact_location: file:///m/mlruns/0\nexperiment_id: '0'\nlifecycle_stage: active\nname: Default\n"
    )
    assert not mlflow_meta.sniff(experiment)


# What the garbage fuzz (test_parsers_garbage) damages for this format.
FUZZ = {
    "mlflow_metric": FuzzSample(
        b"1732431600000 2.5 1\n1732431601000 nan 2\n", path="/r/mlruns/0/abc/metrics/train/loss"
    ),
    "mlflow_entry": FuzzSample(b"0.0001\n", path="/r/mlruns/0/abc/params/lr", quiet=True),
    "mlflow_meta": FuzzSample(
        b"end_time: null\nexperiment_id: '0'\nrun_id: 4f1c2e\nrun_name: sft\nstart_time: 1732431600000\n"
        b"status: 1\n"
    ),
}
