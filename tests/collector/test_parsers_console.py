"""The verl console-log parser: `step:N - key:value` records inside any other output."""

from __future__ import annotations

import math

from collector.formats import console
from tests.collector.test_parsers_support import (
    FuzzSample,
    assert_split_anywhere_equals_one_shot,
    comparable,
    points_as_tuples,
)

LOG = (
    b"Loading model from /models/tiny ...\n"
    b"step:1 - train/loss:6.25 - train/grad_norm:3.17 - train/lr:1e-05\n"
    b"(TaskRunner pid=1234) step:2 - train/loss:5.5 - train/total_tokens(B):0.002 - note:warmup\n"
    b"\x1b[36m(TaskRunner pid=1234)\x1b[0m step:3 - train/loss:nan - train/grad_norm:inf - x:-inf\r\n"
    b"Epoch 1:  50%|#####     | 1/2 [00:01<00:01]\rstep:4 - train/loss:4.0\n"
    b"validation: step:4 - val/loss:4.5\n"
    b"the step: is not a record\n"
    b"step:5 - \n"
)


def test_records_are_read_among_other_output():
    result = console.parse(LOG)
    rows = points_as_tuples(result)
    assert rows[:6] == [
        (1, "train/loss", 6.25, None),
        (1, "train/grad_norm", 3.17, None),
        (1, "train/lr", 1e-05, None),
        (2, "train/loss", 5.5, None),
        (2, "train/total_tokens(B)", 0.002, None),
        (3, "train/loss", rows[5][2], None),
    ]
    assert math.isnan(rows[5][2])
    assert rows[6:] == [
        (3, "train/grad_norm", math.inf, None),
        (3, "x", -math.inf, None),
        (4, "train/loss", 4.0, None),
        (4, "val/loss", 4.5, None),
    ]
    assert result.bad == []
    assert (result.consumed, result.lines) == (len(LOG), 8)


def test_numpy_and_torch_scalars_as_verl_prints_them():
    line = b"step:3 - a:np.float32(1.5) - b:tensor(2., device='cuda:0') - c:np.float64(nan) - d:foo(bar) - e:np.int64(4)\n"
    rows = points_as_tuples(console.parse(line))
    assert [(m, v) for _, m, v, _ in rows if m != "c"] == [("a", 1.5), ("b", 2.0), ("e", 4.0)]
    assert rows[2][1] == "c" and math.isnan(rows[2][2])


def test_a_word_ending_in_step_is_not_a_record():
    assert len(console.parse(b"laststep:3 - a:1\nmy_step:4 - a:2\n").points) == 0


def test_a_logging_prefix_ending_in_a_colon_is_allowed():
    rows = points_as_tuples(console.parse(b"INFO:root:step:7 - a:1\n[rank0]:step:8 - a:2\n"))
    assert rows == [(7, "a", 1.0, None), (8, "a", 2.0, None)]


def test_undecodable_record_line_is_bad_and_other_undecodable_lines_are_ignored():
    data = b"\xff\xfe binary progress\nstep:1 - a:\xff1\nstep:2 - a:2\n"
    result = console.parse(data, first_line=40)
    assert points_as_tuples(result) == [(2, "a", 2.0, None)]
    assert [(b.line, b.reason.split(" at")[0]) for b in result.bad] == [(41, "non-UTF-8 bytes")]


def test_partial_last_line_waits():
    result = console.parse(b"step:1 - a:1\nstep:2 - a:")
    assert points_as_tuples(result) == [(1, "a", 1.0, None)]
    assert result.consumed == len(b"step:1 - a:1\n")


def test_splitting_the_log_at_every_byte_gives_the_one_shot_result():
    assert_split_anywhere_equals_one_shot(console.parse, LOG + b"\xc3(step:9 - a:1\n")


# verl's validation dicts and training bar, in the shapes its console shows (written here): a pprint split over
# Ray-prefixed lines with numpy reprs, a one-line final dict, the progress bar, and a shutdown-time traceback.
RAY = "\x1b[36m(TaskRunner pid=4409)\x1b[0m "
VERL_LOG = "\n".join(
    [
        RAY + "Training Progress:   0%|          | 0/3 [00:00<?, ?it/s]",
        RAY + "(\"Initial validation metrics: {'val-aux/reward/mean@1': \"",
        RAY + " \"np.float64(0.25), 'val-core/acc/mean@1': np.float64(0.5), \"",
        RAY + " \"'val-aux/num_turns/min': np.int32(2), 'val-aux/num_turns/mean': \"",
        RAY + " 'np.float64(6.97)}')",
        RAY + "step:1 - actor/pg_loss:np.float64(0.1) - critic/score/mean:0.5",
        RAY + "Training Progress:  33%|###3      | 1/3 [00:10<00:20, 10.0s/it]",
        RAY + "step:2 - actor/pg_loss:0.2 - critic/score/mean:0.75",
        RAY + "Training Progress:  67%|######6   | 2/3 [00:20<00:10, 10.0s/it]",
        "Final validation metrics: {'val/loss': 0.0058, 'val/acc': 0.9}",
        "Exception ignored in: <function ResourceTracker.__del__ at 0x7f>",
        "Traceback (most recent call last):",
        '  File "resource_tracker.py", line 1, in __del__',
        "AttributeError: '_thread.RLock' object has no attribute '_recursion_count'",
        "",
    ]
).encode()


def feed_console(data: bytes, cuts: list[int]) -> tuple:
    offset, line, rows, state, info = 0, 1, [], None, {}
    for end in [*cuts, len(data)]:
        result = console.parse(data[offset:end], line, state=state)
        rows += points_as_tuples(result)
        offset, line, state, info = offset + result.consumed, line + result.lines, result.state, result.info
    return comparable(rows), offset, info


def test_verl_validation_dicts_and_training_bar():
    rows, offset, info = feed_console(VERL_LOG, [])
    assert offset == len(VERL_LOG)
    assert [(s, n, v) for s, n, v, _ in rows if s == 0] == [
        (0, "val-aux/reward/mean@1", 0.25),
        (0, "val-core/acc/mean@1", 0.5),
        (0, "val-aux/num_turns/min", 2.0),
        (0, "val-aux/num_turns/mean", 6.97),
    ]
    assert [(s, n, v) for s, n, v, _ in rows if n.startswith("val/")] == [
        (2, "val/loss", 0.0058),
        (2, "val/acc", 0.9),
    ]
    assert info["total_steps"] == 3 and info["current_step"] == 2
    assert info["error"] is None  # a traceback under "Exception ignored in" is not the job failing
    assert console.run_info(info).total_steps == 3


def test_a_crash_after_the_last_record_is_the_error_and_a_split_dict_waits_for_its_end():
    crashed = VERL_LOG.replace(b"Exception ignored in: <function ResourceTracker.__del__ at 0x7f>\n", b"")
    assert feed_console(crashed, [])[2]["error"] == {
        "line": 13,
        "text": "AttributeError: '_thread.RLock' object has no attribute '_recursion_count'",
        "file": "",
    }
    whole = feed_console(VERL_LOG, [])
    ends = [i + 1 for i, b in enumerate(VERL_LOG) if b == ord("\n")]
    for cut in ends:
        assert feed_console(VERL_LOG, [cut]) == whole, cut
    held = console.parse(VERL_LOG[: ends[2]])  # the Initial dict's first two lines only
    assert held.consumed == ends[0] and "val-aux/reward/mean@1" not in held.points.metric


# verl's start-up config dump (pprint over Ray lines), a launch script's Hydra overrides, and a crash while
# saving a checkpoint whose traceback is a chain (written here, in the shapes verl and Python print).
CHAINED_LOG = "\n".join(
    [
        RAY + "{'trainer': {'default_local_dir': '/ckpt/exp',",
        RAY + "             'save_freq': 350,",
        RAY + "             'test_freq': 700,",
        RAY + "             'total_training_steps': 700}}",
        "+ python3 -m verl.trainer.main_ppo trainer.save_freq=20 trainer.test_freq=-1",
        RAY + "step:699 - critic/score/mean:0.25",
        RAY + "local_global_step_folder: /ckpt/exp/global_step_700",
        "Error executing job with overrides: ['trainer.save_freq=350', 'trainer.test_freq=700']",
        "Traceback (most recent call last):",
        '  File "ray_trainer.py", line 807, in _save_checkpoint',
        "ray.exceptions.RayTaskError(RuntimeError): ray::WorkerDict.actor_rollout_save_checkpoint() (pid=4)",
        '  File "serialization.py", line 1216, in _save',
        "RuntimeError: PytorchStreamWriter failed writing file data/721: file write failed",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        '  File "serialization.py", line 784, in __exit__',
        "RuntimeError: unexpected pos 13476221568 vs 13476221464",
        "",
        "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.",
        "",
    ]
).encode()


def test_verl_save_and_test_frequencies_from_the_printed_config():
    rows, offset, info = feed_console(CHAINED_LOG, [])
    assert offset == len(CHAINED_LOG)
    # the config dump comes first and stays: a later override line (another launch, a typo) does not replace it
    assert info["settings"] == {"save_freq": 350, "test_freq": 700, "default_local_dir": "/ckpt/exp"}
    assert console.run_info(info).config_part == {
        "trainer": {"save_freq": 350, "test_freq": 700, "default_local_dir": "/ckpt/exp"}
    }
    overrides = console.parse(
        b"Error executing job with overrides: ['trainer.save_freq=50', 'x.test_freq=3']\n"
    )
    assert overrides.info["settings"] == {"save_freq": 50}  # only trainer.* is verl's trainer setting
    assert console.run_info(console.parse(LOG).info).config_part is None  # a log that prints none says none
    assert console.parse(b"'esi_save_freq': 5, 'save_freq_x': 1\n").info["settings"] == {}
    # where it saves: a printed or overridden folder, never a None nor an unresolved interpolation
    assert console.parse(b"trainer.default_local_dir=/ck/e trainer.save_freq=5\n").info["settings"] == {
        "default_local_dir": "/ck/e",
        "save_freq": 5,
    }
    for unusable in (
        b"'default_local_dir': None,\n",
        b"trainer.default_local_dir=ck/${trainer.project_name}\n",
    ):
        assert console.parse(unusable).info["settings"] == {}


def test_a_chained_traceback_is_quoted_with_the_exception_that_caused_it():
    assert feed_console(CHAINED_LOG, [])[2]["error"] == {
        "line": 18,
        "text": "RuntimeError: unexpected pos 13476221568 vs 13476221464 (raised while handling line 13: "
        "RuntimeError: PytorchStreamWriter failed writing file data/721: file write failed)",
        "file": "",
        "cause": {
            "line": 13,
            "text": "RuntimeError: PytorchStreamWriter failed writing file data/721: file write failed",
        },
    }
    direct = CHAINED_LOG.replace(
        b"During handling of the above exception, another exception occurred:",
        b"The above exception was the direct cause of the following exception:",
    )
    assert feed_console(direct, [])[2]["error"]["cause"]["line"] == 13
    unchained = CHAINED_LOG.replace(
        b"During handling of the above exception, another exception occurred:\n", b""
    )
    assert "cause" not in feed_console(unchained, [])[2]["error"]  # one traceback, its last exception line


def test_settings_and_chains_read_in_pieces_give_the_one_shot_result():
    whole = feed_console(CHAINED_LOG, [])
    for cut in [i + 1 for i, b in enumerate(CHAINED_LOG) if b == ord("\n")]:
        assert feed_console(CHAINED_LOG, [cut]) == whole, cut


# a public verl run's end (KotoHanon/VERL-Maze): the reward function raised a bare NotImplementedError, wrapped by Ray
RAY_BARE_LOG = b"""Error executing job with overrides: ['trainer.save_freq=10']
Traceback (most recent call last):
  File "/r/verl/trainer/main_ppo.py", line 53, in main
    run_ppo(config)
  File "/r/site-packages/ray/_private/worker.py", line 919, in get_objects
    raise value.as_instanceof_cause()
ray.exceptions.RayTaskError(NotImplementedError): \x1b[36mray::main_task()\x1b[39m (pid=19443, ip=172.17.0.4)
  File "/r/verl/trainer/ppo/ray_trainer.py", line 996, in fit
    reward_tensor = self.reward_fn(batch)
  File "/r/verl/utils/reward_score/__init__.py", line 37, in _default_compute_score
    raise NotImplementedError
NotImplementedError

Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.
"""


def test_a_bare_exception_is_quoted_with_the_frame_that_raised_it():
    whole = feed_console(RAY_BARE_LOG, [])[2]["error"]
    assert whole == {
        "line": 12,
        "text": "NotImplementedError",
        "file": "",
        "raised_in": {
            "file": "/r/verl/utils/reward_score/__init__.py",
            "line": 37,
            "function": "_default_compute_score",
        },
    }
    ends = [i + 1 for i, b in enumerate(RAY_BARE_LOG) if b == ord("\n")]
    for cut in ends:  # read in pieces, the frame is still found
        assert feed_console(RAY_BARE_LOG, [cut])[2]["error"] == whole, cut
    # an exception with a message says what went wrong itself: no frame is added
    told = RAY_BARE_LOG.replace(
        b"NotImplementedError\n\nSet", b"NotImplementedError: no reward for maze\n\nSet"
    )
    assert "raised_in" not in feed_console(told, [])[2]["error"]


# What the garbage fuzz (test_parsers_garbage) damages for this format.
FUZZ = {
    "console": FuzzSample(
        b"INFO start\nstep:1 - train/loss:2.5 - lr:1e-05\r\nstep:2 - a:nan\n", quiet=True, counts_lines=True
    )
}
