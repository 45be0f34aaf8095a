"""LLaMA-Factory's trainer_log.jsonl: points at `current_steps`, progress as run facts, nulls skipped."""

from __future__ import annotations

import json

from collector.formats import llamafactory_log
from tests.collector.test_parsers_support import FuzzSample, comparable, points_as_tuples


def _line(**record) -> bytes:
    return json.dumps(record).encode() + b"\n"


# The shapes seen in real files (written here): the older `lr` layout, the newer one with null placeholders,
# a progress-only record, and the final record that repeats the last step.
OLD = _line(
    current_steps=10,
    total_steps=30,
    loss=1.5,
    lr=2e-05,
    epoch=0.33,
    percentage=33.33,
    elapsed_time="0:00:10",
    remaining_time="0:00:20",
)
NEW = _line(
    current_steps=20,
    total_steps=30,
    loss=1.25,
    eval_loss=None,
    predict_loss=None,
    reward=None,
    accuracy=0.5,
    learning_rate=1e-05,
    epoch=0.66,
    percentage=66.67,
    elapsed_time="0:00:20",
    remaining_time="0:00:10",
    throughput=None,
    total_tokens=None,
)
PROGRESS = _line(
    current_steps=30,
    total_steps=30,
    epoch=1.0,
    percentage=100.0,
    elapsed_time="0:00:30",
    remaining_time="0:00:00",
)


def test_records_become_points_at_current_steps_with_the_hf_names():
    result = llamafactory_log.parse(OLD + NEW + PROGRESS)
    assert comparable(points_as_tuples(result)) == [
        (10, "loss", 1.5, None),
        (10, "learning_rate", 2e-05, None),
        (10, "epoch", 0.33, None),
        (20, "loss", 1.25, None),
        (20, "accuracy", 0.5, None),
        (20, "learning_rate", 1e-05, None),
        (20, "epoch", 0.66, None),
        (30, "epoch", 1.0, None),
    ]
    assert result.bad == []
    assert result.info == {
        "total_steps": 30,
        "current_step": 30,
        "percentage": 100.0,
        "elapsed_time": "0:00:30",
    }
    assert llamafactory_log.run_info(result.info).total_steps == 30


def test_progress_only_records_give_total_steps_and_no_points():
    data = b"".join(
        _line(current_steps=s, total_steps=250, percentage=s / 2.5, elapsed_time="0:00:01") for s in (5, 10)
    )
    result = llamafactory_log.parse(data)
    assert len(result.points) == 0 and result.bad == []
    assert result.info["total_steps"] == 250 and result.info["current_step"] == 10


def test_a_bad_line_costs_only_itself_and_a_partial_line_waits():
    data = OLD + b'{"current_steps": "x", "loss": 1}\n' + b"not json\n" + NEW + b'{"current_steps": 40'
    result = llamafactory_log.parse(data, first_line=7)
    assert [(b.line, b.reason.split(":")[0]) for b in result.bad] == [
        (8, "current_steps is not a whole number"),
        (9, "invalid JSON"),
    ]
    assert sorted(set(result.points.step)) == [10, 20]
    assert result.consumed == len(data) - len(b'{"current_steps": 40') and result.lines == 4


def test_split_anywhere_equals_one_read():
    data = OLD + NEW + PROGRESS
    whole = comparable(points_as_tuples(llamafactory_log.parse(data)))
    for cut in range(len(data) + 1):
        first = llamafactory_log.parse(data[:cut])
        second = llamafactory_log.parse(data[first.consumed :], 1 + first.lines)
        assert comparable(points_as_tuples(first) + points_as_tuples(second)) == whole, cut


def test_sniff_knows_the_record_shape_and_nothing_else():
    assert llamafactory_log.sniff(OLD + NEW)
    assert not llamafactory_log.sniff(b'{"step": 1, "data": {"train/loss": 1.0}}\n')
    assert not llamafactory_log.sniff(b'{"current_steps": 1}\n')


# What the garbage fuzz (test_parsers_garbage) damages for this format.
FUZZ = {
    "llamafactory_log": FuzzSample(
        b'{"current_steps": 5, "total_steps": 10, "loss": 2.5, "lr": 1e-05, "epoch": 0.5}\n'
        b'{"current_steps": 10, "total_steps": 10, "loss": NaN, "eval_loss": null, "percentage": 100.0}\n'
    )
}
