"""The JSONL parser (verl file logger and nested JSONL): records, bad lines, and reading from any offset."""

from __future__ import annotations

import json
import math

from collector.formats import jsonl
from tests.collector.test_parsers_support import (
    FuzzSample,
    assert_split_anywhere_equals_one_shot,
    points_as_tuples,
)


def test_verl_records_become_points_named_as_the_file_spells_them():
    data = (
        b'{"step":1,"data":{"train/loss":2.5,"train/grad_norm":1,"train/lr":0.001}}\n'
        b'{"step":1,"data":{"val/loss":3.25}}\n'
        b'{"step":2,"data":{"train/loss":2.0,"train/grad_norm":0.5,"train/lr":0.001}}\n'
    )
    result = jsonl.parse(data)
    assert points_as_tuples(result) == [
        (1, "train/loss", 2.5, None),
        (1, "train/grad_norm", 1.0, None),
        (1, "train/lr", 0.001, None),
        (1, "val/loss", 3.25, None),
        (2, "train/loss", 2.0, None),
        (2, "train/grad_norm", 0.5, None),
        (2, "train/lr", 0.001, None),
    ]
    assert all(type(v) is float for v in result.points.value)
    assert (result.consumed, result.lines, result.bad) == (len(data), 3, [])


def test_bare_nan_and_infinity_are_kept_as_non_finite_values():
    data = b'{"step":7,"data":{"train/loss":NaN,"train/grad_norm":Infinity,"x":-Infinity,"ok":1.5}}\n'
    result = jsonl.parse(data)
    values = dict(zip(result.points.metric, result.points.value, strict=True))
    assert math.isnan(values["train/loss"])
    assert values["train/grad_norm"] == math.inf
    assert values["x"] == -math.inf
    assert values["ok"] == 1.5
    assert result.points.step == [7, 7, 7, 7]
    assert result.bad == []


def test_a_nan_inside_a_string_is_not_a_value():
    result = jsonl.parse(b'{"step":1,"data":{"note":"NaN here","loss":1}}\n')
    assert points_as_tuples(result) == [(1, "loss", 1.0, None)]


def test_nested_records_are_flattened_with_slashes_and_other_step_keys_are_read():
    data = (
        b'{"step":1,"loss":{"actor":0.5,"critic":{"v":2}},"lr":1e-5}\n'
        b'{"global_step":2,"loss":{"actor":0.25}}\n'
        b'{"_step":3,"epoch":0.5}\n'
        b'{"iteration":4.0,"reward":true}\n'
    )
    result = jsonl.parse(data)
    assert points_as_tuples(result) == [
        (1, "loss/actor", 0.5, None),
        (1, "loss/critic/v", 2.0, None),
        (1, "lr", 1e-5, None),
        (2, "loss/actor", 0.25, None),
        (3, "epoch", 0.5, None),
        (4, "reward", 1.0, None),
    ]


def test_wall_time_fields_give_wall_time_and_are_not_metrics():
    data = b'{"step":1,"data":{"a":1}}\n{"step":2,"loss":3,"_timestamp":1700000000.5}\n{"step":3,"data":{"a":2}}\n'
    result = jsonl.parse(data)
    assert points_as_tuples(result) == [
        (1, "a", 1.0, None),
        (2, "loss", 3.0, 1700000000.5),
        (3, "a", 2.0, None),
    ]


def test_non_numeric_values_are_skipped_without_a_bad_line():
    result = jsonl.parse(b'{"step":1,"loss":{"name":"x","none":null,"list":[1,2],"n":3}}\n')
    assert points_as_tuples(result) == [(1, "loss/n", 3.0, None)]
    assert result.bad == []


def test_null_in_a_verl_record_is_nan_because_verl_writes_nan_through_orjson():
    import orjson

    # What verl 0.9.1's FileLogger writes for a NaN loss and an infinite grad norm.
    line = orjson.dumps({"step": 3, "data": {"train/loss": math.nan, "train/grad_norm": math.inf, "s": "x"}})
    assert line == b'{"step":3,"data":{"train/loss":null,"train/grad_norm":null,"s":"x"}}'
    result = jsonl.parse(line + b"\n")
    assert result.points.metric == ["train/loss", "train/grad_norm"]
    assert all(math.isnan(v) for v in result.points.value)


def test_bad_lines_are_reported_with_their_line_number_and_reason_and_never_raise():
    data = (
        b'{"step":1,"data":{"a":1}}\n'  # line 10
        b"{not json\n"  # 11
        b"\xff\xfe\x00garbage\n"  # 12
        b"[1, 2]\n"  # 13
        b'{"data":{"a":1}}\n'  # 14
        b'{"step":"five","data":{"a":1}}\n'  # 15
        b'{"step":1.5,"data":{"a":1}}\n'  # 16
        b"\n"  # 17: blank, skipped silently
        b'{"step":2,"data":{"a":2}}\n'  # 18
    )
    result = jsonl.parse(data, first_line=10)
    assert points_as_tuples(result) == [(1, "a", 1.0, None), (2, "a", 2.0, None)]
    assert result.lines == 9
    reasons = {bad.line: bad.reason for bad in result.bad}
    assert sorted(reasons) == [11, 12, 13, 14, 15, 16]
    assert reasons[11].startswith("invalid JSON")
    assert reasons[12].startswith("non-UTF-8 bytes")
    assert reasons[13] == "not a JSON object (a list)"
    assert reasons[14].startswith("missing step")
    assert "step is not a whole number" in reasons[15]
    assert "step is not a whole number" in reasons[16]
    assert result.bad[0].text == "{not json"


def test_partial_last_line_is_left_for_the_next_call():
    data = b'{"step":1,"data":{"a":1}}\n{"step":2,"da'
    result = jsonl.parse(data)
    assert result.consumed == data.index(b"\n") + 1
    assert result.lines == 1
    assert points_as_tuples(result) == [(1, "a", 1.0, None)]
    assert jsonl.parse(b'{"step":2,"da').consumed == 0


def test_a_whole_last_record_without_a_newline_is_read_and_a_cut_one_waits():
    # A writer that joins its records with newlines ends the file on its last record (a GRPO script's
    # metrics.jsonl keyed by "iteration", whose final line held the last evaluation): that record is whole.
    data = b'{"iteration":29,"loss":0.1}\n{"iteration":30,"loss":0.2,"accuracy":0.92}'
    result = jsonl.parse(data)
    assert result.consumed == len(data)
    assert sorted(zip(result.points.step, result.points.metric, strict=True)) == [
        (29, "loss"),
        (30, "accuracy"),
        (30, "loss"),
    ]
    assert result.lines == 1  # the newline that may follow starts the next read as the rest of line 2
    later = jsonl.parse(b'\n{"iteration":31,"loss":0.3}\nnot json\n', first_line=result.lines + 1)
    assert later.points.step == [31] and [bad.line for bad in later.bad] == [4]
    cut = b'{"iteration":29,"loss":0.1}\n{"iteration":30,"loss":{"a":0.2}'  # braces balance only at the end
    assert jsonl.parse(cut).consumed == cut.index(b"\n") + 1
    verl = b'{"step":1,"data":{"a":1.0}}\n{"step":2,"data":{"a":NaN}}'
    assert jsonl.parse(verl).points.step == [1, 2]


def test_the_hf_trainers_end_of_training_summary_says_the_run_completed():
    # A flat history written by a Trainer callback (satyamshivam13/LoRA_Medical_QA_Finetune's logs/metrics.jsonl)
    # ends with the Trainer's summary record: the training loop returned.
    train = b'{"step": 770, "epoch": 1.98, "loss": 1.05, "learning_rate": 7e-08}\n'
    evaluation = b'{"step": 778, "epoch": 2.0, "eval_loss": 1.1095}\n'
    summary = b'{"step": 778, "epoch": 2.0, "train_runtime": 6406.1, "train_loss": 1.1679}\n'
    assert jsonl.run_info(jsonl.parse(train + evaluation).info).ended is None
    ended = jsonl.parse(train + evaluation + summary)
    assert ended.info == {"completed": True}
    facts = jsonl.run_info(ended.info)
    assert facts.ended == "completed" and facts.status is None  # a status file beside it has the last word
    assert (778, "train_runtime") in zip(ended.points.step, ended.points.metric, strict=True)
    # read in two pieces, the summary alone in the second
    assert jsonl.parse(summary, first_line=3).info == {"completed": True}
    # verl's file logger writes no summary; a verl record never says the run ended
    verl = b'{"step": 9, "data": {"train/loss": 0.5, "train_runtime": 3.0}}\n'
    assert jsonl.parse(verl).info == {}


def test_crlf_line_endings_are_read():
    data = b'{"step":1,"data":{"a":1}}\r\n{"step":2,"data":{"a":NaN}}\r\n'
    result = jsonl.parse(data)
    assert result.points.step == [1, 2]
    assert result.bad == []
    assert result.consumed == len(data)


def test_splitting_the_file_at_every_byte_gives_the_one_shot_result():
    data = (
        b'{"step":1,"data":{"train/loss":2.5,"val/loss":NaN}}\r\n'
        b"garbage\n"
        b'{"step":2,"loss":{"actor":1e-3},"timestamp":5}\n'
        b"\n"
        b'{"step":3,"data":{"a":Infinity,"b":"s"}}\n'
        b"\xc3(\n"
        b'{"step":4,"data":{"caf\xc3\xa9":1}}\n'
    )
    assert_split_anywhere_equals_one_shot(jsonl.parse, data)


def test_a_large_verl_file_parses_exactly(tmp_path):
    lines = []
    expected = 0
    for step in range(1, 3001):
        record = {"train/loss": 1 / step, "train/grad_norm": step * 0.5, "train/lr": 1e-4}
        if step % 100 == 0:
            lines.append(json.dumps({"step": step, "data": {"val/loss": 2.0 / step}}))
            expected += 1
        lines.append(json.dumps({"step": step, "data": record}))
        expected += 3
    data = ("\n".join(lines) + "\n").encode()
    result = jsonl.parse(data)
    assert len(result.points) == expected
    assert len(result.points.wall_time) == expected
    assert result.points.step[-1] == 3000
    assert result.lines == len(lines)


def test_a_chunk_with_odd_values_in_verl_records_is_read_record_by_record():
    data = (
        b'{"step":1,"data":{"a":1,"b":true,"c":"text","d":{"e":2},"f":null}}\n'
        b'{"step":2,"data":{"a":2.5,"b":false}}\n'
        b'{"step":3,"data":{"a":3}}\n'
    )
    rows = points_as_tuples(jsonl.parse(data))
    assert [r for r in rows if r[1] != "f"] == [
        (1, "a", 1.0, None),
        (1, "b", 1.0, None),
        (1, "d/e", 2.0, None),
        (2, "a", 2.5, None),
        (2, "b", 0.0, None),
        (3, "a", 3.0, None),
    ]
    assert math.isnan(next(r[2] for r in rows if r[1] == "f"))
    assert all(type(r[2]) is float for r in rows)


# What the garbage fuzz (test_parsers_garbage) damages for this format.
FUZZ = {
    "jsonl": FuzzSample(
        b'{"step":1,"data":{"train/loss":2.5,"x":NaN}}\n{"step":2,"loss":{"actor":1}}\n', counts_lines=True
    )
}
