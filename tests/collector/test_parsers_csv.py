"""The CSV history parser: step/global_step/epoch columns, the header kept across calls, bad rows."""

from __future__ import annotations

import math

from collector.formats import csv_history
from tests.collector.test_parsers_support import (
    FuzzSample,
    assert_split_anywhere_equals_one_shot,
    feed_in_pieces,
    points_as_tuples,
)

TRAIN = (
    b"step,epoch,train/loss,train/grad_norm,train/lr,note\n"
    b"1,0,2.5,1.0,1e-3,warmup\n"
    b"2,0,nan,inf,1e-3,\n"
    b"3,1,2.0,,1e-3,x\n"
)


def test_rows_become_points_with_the_header_names():
    result = csv_history.parse(TRAIN)
    rows = points_as_tuples(result)
    assert rows[:4] == [
        (1, "epoch", 0.0, None),
        (1, "train/loss", 2.5, None),
        (1, "train/grad_norm", 1.0, None),
        (1, "train/lr", 1e-3, None),
    ]
    assert math.isnan(rows[5][2]) and rows[5][:2] == (2, "train/loss")
    assert rows[6] == (2, "train/grad_norm", math.inf, None)
    assert rows[8:] == [(3, "epoch", 1.0, None), (3, "train/loss", 2.0, None), (3, "train/lr", 1e-3, None)]
    assert result.state == ["step", "epoch", "train/loss", "train/grad_norm", "train/lr", "note"]
    assert (result.consumed, result.lines, result.bad) == (len(TRAIN), 4, [])


def test_the_header_is_passed_back_for_reads_from_an_offset():
    first = csv_history.parse(TRAIN[: TRAIN.index(b"2,0")])
    rest = TRAIN[first.consumed :]
    later = csv_history.parse(rest, first_line=1 + first.lines, state=first.state)
    assert [p[0] for p in points_as_tuples(later)] == [2, 2, 2, 2, 3, 3, 3]
    assert later.state == first.state
    # Without the header, the first row would be taken as one and nothing read: the caller passes it back.
    lost = csv_history.parse(rest, first_line=3)
    assert len(lost.points) == 0
    assert lost.bad[0].line == 3 and lost.bad[0].reason.startswith("header has no step column")


def test_epoch_only_history_uses_the_epoch_as_step_and_keeps_it_as_a_metric():
    data = b"epoch,loss,accuracy\r\n1,0.9,0.5\r\n2,0.7,0.6\r\n2.5,0.6,0.7\r\n"
    result = csv_history.parse(data)
    assert points_as_tuples(result) == [
        (1, "epoch", 1.0, None),
        (1, "loss", 0.9, None),
        (1, "accuracy", 0.5, None),
        (2, "epoch", 2.0, None),
        (2, "loss", 0.7, None),
        (2, "accuracy", 0.6, None),
    ]
    assert [(b.line, b.reason) for b in result.bad] == [(4, "epoch is not a whole number: '2.5'")]


def test_global_step_and_wall_time_columns():
    data = b"global_step,wall_time,loss\n10,1700000000.5,1.25\n"
    assert points_as_tuples(csv_history.parse(data)) == [(10, "loss", 1.25, 1700000000.5)]


def test_bad_rows_are_reported_and_the_rest_is_read():
    data = b'step,loss\n1,1.0\n2,1.0,extra\nx,3\n\xff,1\n"unclosed,2\n4,4.0\n'
    result = csv_history.parse(data, first_line=1)
    assert points_as_tuples(result) == [(1, "loss", 1.0, None), (4, "loss", 4.0, None)]
    reasons = {b.line: b.reason for b in result.bad}
    assert reasons[3] == "expected 2 fields as in the header, got 3"
    assert reasons[4] == "step is not a whole number: 'x'"
    assert reasons[5].startswith("non-UTF-8 bytes")
    assert 6 in reasons


def test_a_repeated_header_starts_over():
    data = b"step,loss\n1,1.0\nstep,loss,val/loss\n2,0.5,0.7\n"
    result = csv_history.parse(data)
    assert points_as_tuples(result) == [
        (1, "loss", 1.0, None),
        (2, "loss", 0.5, None),
        (2, "val/loss", 0.7, None),
    ]
    assert result.state == ["step", "loss", "val/loss"]


def test_no_complete_line_yet_means_no_header_yet():
    result = csv_history.parse(b"step,lo")
    assert (result.consumed, result.state) == (0, None)


def test_splitting_the_file_at_every_byte_gives_the_one_shot_result():
    assert_split_anywhere_equals_one_shot(csv_history.parse, TRAIN + b"oops\n4,2,1.5,1,1,\n", state=None)
    rows, bad, offset, line = feed_in_pieces(csv_history.parse, TRAIN, [10, 60, 61], state=None)
    assert offset == len(TRAIN) and line == 5 and bad == []


# What the garbage fuzz (test_parsers_garbage) damages for this format.
FUZZ = {"csv": FuzzSample(b"step,epoch,loss\r\n1,0,2.5\r\n2,0,nan\r\n", counts_lines=True)}
