"""The HF Trainer console log: dicts between tqdm bars, steps from the bar when it moves with them, else order."""

from __future__ import annotations

import math

from collector.formats import hf_console
from tests.collector.test_parsers_support import FuzzSample, comparable, points_as_tuples


def bar(count: int, total: int) -> str:
    done = count * 10 // total
    return f"{count * 100 // total:3d}%|{'█' * done}{' ' * (10 - done)}| {count}/{total} [00:{count:02d}<00:10,  1.00s/it]"


def aligned_log() -> bytes:
    """stdout and stderr in order: the bar moves to each logged step, then the dict is printed."""
    out = ["***** Running training *****", "  Total optimization steps = 6"]
    out.append(
        "\r".join(bar(i, 6) for i in range(0, 3))
        + "\r{'loss': 2.5, 'grad_norm': 1.5, 'learning_rate': 1e-05, 'epoch': 0.33}"
    )
    # evaluation: its own bar (another total), then the eval dict, attached to step 2
    out.append("\r".join(bar(i, 4) for i in range(0, 5)))
    out.append("{'eval_loss': 2.75, 'eval_runtime': 1.5, 'epoch': 0.33}")
    out.append(
        "\r".join(bar(i, 6) for i in range(3, 5))
        + "\r{'loss': nan, 'grad_norm': inf, 'learning_rate': 5e-06, 'epoch': 0.67}"
    )
    out.append(
        "\r".join(bar(i, 6) for i in range(5, 7))
        + "\r{'loss': 1.5, 'grad_norm': 0.5, 'learning_rate': 0.0, 'epoch': 1.0}"
    )
    out.append("{'train_runtime': 12.5, 'train_samples_per_second': 4.0, 'train_loss': 2.0, 'epoch': 1.0}")
    out.append(bar(6, 6))
    return ("\n".join(out) + "\n").encode()


def clumped_log() -> bytes:
    """stdout block-buffered: the bar runs ahead, the dicts come later in a clump (TRL quoted values)."""
    out = ["\r".join(bar(i, 30) for i in range(0, 12))]
    out += [
        f"{{'loss': '{1.0 - i / 10:.4f}', 'grad_norm': '0.25', 'learning_rate': '1e-05', 'epoch': '{i / 10}'}}"
        for i in range(1, 4)
    ]
    out.append("{'eval_loss': 0.5, 'epoch': 0.3}")
    out.append("\r".join(bar(i, 30) for i in range(12, 31)))
    out.append("{'pad_token_id': 2}")  # config output in the same shape: not a metrics dict
    out.append("{'train_runtime': '75.5', 'train_loss': '0.8', 'epoch': '1.0'}")
    return ("\n".join(out) + "\n").encode()


def feed(data: bytes, cuts: list[int]) -> tuple:
    """Read `data` as the tailer does, growing to each cut, handing the state back each time."""
    offset, line, rows, state, info = 0, 1, [], None, {}
    for end in [*cuts, len(data)]:
        result = hf_console.parse(data[offset:end], line, state=state)
        rows += points_as_tuples(result)
        offset += result.consumed
        line += result.lines
        state, info = result.state, result.info
    return comparable(rows), offset, info


def test_aligned_dicts_take_the_bar_count_and_evals_join_their_step():
    rows, offset, info = feed(aligned_log(), [])
    by_step = {}
    for step, name, value, _ in rows:
        by_step.setdefault(step, {})[name] = value
    assert sorted(by_step) == [2, 4, 6]
    assert by_step[2]["loss"] == 2.5 and by_step[2]["eval_loss"] == 2.75
    assert by_step[4]["loss"] == "NaN" and by_step[4]["grad_norm"] == math.inf
    assert by_step[6]["train_loss"] == 2.0 and by_step[6]["train_runtime"] == 12.5
    assert info["step_source"] == "bar" and info["total_steps"] == 6 and info["current_step"] == 6
    assert info["completed"] is True and info["error"] is None
    assert offset == len(aligned_log())


def test_clumped_dicts_are_numbered_in_order_and_quoted_numbers_are_read():
    rows, _, info = feed(clumped_log(), [])
    losses = [(step, value) for step, name, value, _ in rows if name == "loss"]
    assert losses == [(1, 0.9), (2, 0.8), (3, 0.7)]
    assert [(s, v) for s, n, v, _ in rows if n == "eval_loss"] == [(3, 0.5)]
    assert [(s, v) for s, n, v, _ in rows if n == "train_loss"] == [(3, 0.8)]
    assert not any(n == "pad_token_id" for _, n, _, _ in rows)
    assert info["step_source"] == "order" and info["total_steps"] == 30 and info["completed"] is True


def grpo_log(dicts: int = 40, total: int = 200, first_epoch: float | None = None) -> bytes:
    """TRL GRPO as a notebook shows it: the banner, the bar run to its end, then every dict at once."""
    out = ["***** Running training *****", f"  Total optimization steps = {total:,}"]
    out.append("\r".join(bar(i, total) for i in range(0, total + 1)))
    for i in range(1, dicts + 1):
        epoch = (first_epoch or 0) + i / dicts * (1 - (first_epoch or 0))
        out.append(f"{{'loss': 0.01, 'reward': {i / 100}, 'kl': 0.02, 'epoch': {epoch:.3f}}}")
    out.append("{'train_runtime': 900.0, 'train_loss': 0.01, 'epoch': 1.0}")
    return ("\n".join(out) + "\n").encode()


def test_a_grpo_log_with_its_bar_at_the_end_takes_steps_from_total_steps_and_the_dict_count():
    # 40 dicts after the bar reached 200/200, "Total optimization steps = 200": logged every 5 steps
    rows, _, info = feed(grpo_log(), [])
    rewards = [s for s, n, _, _ in rows if n == "reward"]
    assert rewards == list(range(5, 201, 5))
    assert info["total_steps"] == 200 and info["current_step"] == 200
    # split anywhere, the same steps: the first dict waits for the end of the run (its summary dict)
    data = grpo_log()
    held = hf_console.parse(data[: data.index(b"{'train_runtime'")])
    assert len(held.points.step) == 0 and held.consumed <= data.index(b"{'loss'")
    for cut in range(0, len(data) + 1, 997):
        assert feed(data, [cut])[0] == rows, cut
    # or for an error after the dicts: a run that failed after its last step counts its dicts too
    failed = data[: data.index(b"{'train_runtime'")] + b"Traceback (most recent call last):\nOSError: disk\n"
    assert max(feed(failed, [])[0])[0] == 200
    # the banner alone gives the run's length when the log shows no bar (tqdm off); with the dicts as they come
    plain = b"\n".join(line for line in data.split(b"\n") if b"%|" not in line)
    assert feed(plain, [])[2]["total_steps"] == 200
    # the count never overrides what the log or its trainer_state.json says
    printed = hf_console.parse(b"logging_steps=4,\n" + grpo_log())
    assert max(printed.points.step) == 160
    assert max(hf_console.parse(grpo_log(), state={"logging_steps": 2}).points.step) == 80


def test_a_resumed_runs_dicts_are_not_spread_over_the_whole_run():
    # the first dict at epoch 0.5 of 1: the run resumed half-way; its 40 dicts are not every 5 of 200 steps
    rows, _, _ = feed(grpo_log(first_epoch=0.5), [])
    assert [s for s, n, _, _ in rows if n == "reward"] == list(range(1, 41))
    # and a count that no spacing fits (41 dicts in 200 steps: logging_first_step) stays in order
    rows, _, _ = feed(grpo_log(dicts=41), [])
    assert [s for s, n, _, _ in rows if n == "reward"] == list(range(1, 42))


def test_logging_steps_printed_in_the_log_spaces_the_ordered_steps():
    data = b"logging_steps=10,\n" + clumped_log()
    rows, _, _ = feed(data, [])
    assert sorted({s for s, n, _, _ in rows if n == "loss"}) == [10, 20, 30]


def test_logging_steps_from_the_trainer_state_beside_the_log_spaces_the_ordered_steps():
    # discovery hands the trainer_state.json's logging_steps as the state of a read from the file's start
    result = hf_console.parse(clumped_log(), state={"logging_steps": 5})
    assert sorted(
        {s for s, n in zip(result.points.step, result.points.metric, strict=True) if n == "loss"}
    ) == [
        5,
        10,
        15,
    ]
    assert result.state["logging_steps"] == 5  # and carried to the next read
    # the log's own print of its arguments wins (it is about this very run)
    printed = hf_console.parse(b"logging_steps=10,\n" + clumped_log(), state={"logging_steps": 5})
    assert sorted(
        {s for s, n in zip(printed.points.step, printed.points.metric, strict=True) if n == "loss"}
    ) == [
        10,
        20,
        30,
    ]


def test_a_traceback_after_the_last_dict_is_the_runs_error_until_it_logs_again():
    tail = b'Traceback (most recent call last):\n  File "train.py", line 3, in <module>\nRuntimeError: CUDA error: an illegal memory access\n'
    data = aligned_log().replace(b"{'train_runtime'", b"{'x': 1}\n{'nothing'") + tail
    _, _, info = feed(data, [])
    assert info["error"] == {
        "line": 13,
        "text": "RuntimeError: CUDA error: an illegal memory access",
        "file": "",
    }
    assert info["completed"] is False
    again = data + bar(6, 6).encode() + b"\r{'loss': 1.0, 'epoch': 1.0}\n"
    assert feed(again, [])[2]["error"] is None
    assert hf_console.run_info(info).status is None  # failure is the detector's call, from the facts
    assert hf_console.run_info(feed(aligned_log(), [])[2]).ended == "completed"


def test_a_launcher_kill_message_is_an_error():
    data = b"{'loss': 0.69, 'grad_norm': 24.8, 'learning_rate': 5e-06, 'epoch': 0.0}\n[launch.py:328:sigkill_handler] Main process received SIGINT, exiting\n"
    _, _, info = feed(data, [])
    assert info["error"]["line"] == 2 and "SIGINT" in info["error"]["text"]


def test_the_first_dict_waits_for_the_decision_then_split_anywhere_equals_one_read():
    for data in (aligned_log(), clumped_log()):
        whole = feed(data, [])
        first_dict = data.index(b"{'loss'")
        held = hf_console.parse(data[: data.index(b"\n", first_dict) + 1])
        assert all(n != "loss" for n in held.points.metric) and held.consumed <= first_dict
        for cut in range(0, len(data) + 1, 7):
            assert feed(data, [cut]) == whole, cut
        ends = [i + 1 for i, b in enumerate(data) if b == ord("\n")]
        assert feed(data, ends) == whole


def test_sniff_wants_an_hf_dict():
    assert hf_console.sniff(aligned_log()) and hf_console.sniff(clumped_log())
    assert not hf_console.sniff(b"step:1 - train/loss:1.0\n")


def test_a_record_the_script_printed_itself_is_not_a_logged_dict():
    """A training script's own dict with words for values (an RL environment's episode row, printed by a failed
    W&B table write) between the bar and the trainer's dict: neither its numbers nor a step of its own."""
    episode = "{'step': 0, 'agent_id': 'market_maker', 'direction': 0.03, 'strike': 'N/A', 'reward': -0.6747}"
    data = aligned_log().replace(b"\r{'loss': nan", ("\n" + episode + "\n{'loss': nan").encode())
    rows, _, info = feed(data, [])
    assert rows == feed(aligned_log(), [])[0]  # the same points at the same steps, as if it were not there
    assert info["current_step"] == 6 and info["completed"] is True
    # quoted numbers are still numbers (TRL prints them so); only words make a dict the script's own
    quoted = hf_console.parse(b"{'loss': '0.5', 'reward': 'nan', 'epoch': '0.1'}\n")
    assert sorted(quoted.points.metric) == ["epoch", "loss", "reward"]


def marked_log(start: int = 0) -> bytes:
    """stdout block-buffered, the bar on stderr: each log is written with tqdm.write, which clears the bar's
    line and draws it again at the same count (a mark); the dicts come later, in a clump."""
    total, pieces = 40, []
    for i in range(start, start + 23):
        pieces.append(bar(i, total))
        if i > start and (i - start) % 5 == 0:
            pieces += [" " * 40, "", bar(i, total)]  # cleared, then redrawn at the logging step
    out = ["\r".join(pieces)]
    out += [f"{{'loss': {1.0 - i / 10}, 'grad_norm': 0.3, 'epoch': {i / 10}}}" for i in range(1, 5)]
    out.append("\r".join(bar(i, total) for i in range(start + 23, total + 1)))
    return ("\n".join(out) + "\n").encode()


def test_the_bars_marks_space_clumped_dicts_where_the_log_does_not_say_its_logging_steps():
    # marks at 5, 10, 15, 20: logged every 5 steps; the four dicts that came later are steps 5-20
    rows, _, info = feed(marked_log(), [])
    assert [s for s, n, _, _ in rows if n == "loss"] == [5, 10, 15, 20]
    assert info["step_source"] == "order"
    # split anywhere, the same steps
    data = marked_log()
    for cut in range(0, len(data) + 1, 53):
        assert feed(data, [cut])[0] == rows, cut
    # a run resumed at step 10: its first mark is 15, so are its dicts' steps
    resumed, _, _ = feed(marked_log(start=10), [])
    assert [s for s, n, _, _ in resumed if n == "loss"] == [15, 20, 25, 30]
    # printed logging_steps still win over the marks
    printed, _, _ = feed(b"logging_steps=2,\n" + marked_log(), [])
    assert [s for s, n, _, _ in printed if n == "loss"] == [2, 4, 6, 8]


# What the garbage fuzz (test_parsers_garbage) damages for this format.
FUZZ = {
    "hf_console": FuzzSample(
        b" 50%|#####     | 1/2 [00:01<00:01]\r{'loss': 2.5, 'grad_norm': nan, 'epoch': 0.5}\n"
        b"100%|##########| 2/2 [00:02<00:00]\r{'loss': '1.5', 'epoch': 1.0}\n{'train_runtime': 2.0, 'epoch': 1.0}\n",
        quiet=True,
    )
}
