"""The TensorBoard event-file parser, over real event files written by torch's SummaryWriter."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.plugins.scalar import summary_v2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from collector.formats import tensorboard_events
from tests.collector.test_parsers_support import FuzzSample, feed_in_pieces, points_as_tuples

torch_tb = pytest.importorskip("torch.utils.tensorboard")


def event_file(folder: Path) -> Path:
    [path] = folder.glob("events.out.tfevents.*")
    return path


def write_run(folder: Path, steps: range, writer=None, scalars_only: bool = False):
    writer = writer or torch_tb.SummaryWriter(log_dir=str(folder))
    for step in steps:
        writer.add_scalar("train/loss", 1.0 / step, step, walltime=1700000000.0 + step)
        writer.add_scalar("train/lr", 1e-3, step, walltime=1700000000.0 + step, new_style=True)
        if not scalars_only:
            writer.add_histogram("weights", np.arange(10.0), step)
            writer.add_text("note", "hello", step)
    writer.flush()
    return writer


def test_scalars_from_simple_values_and_tensors_with_wall_time(tmp_path):
    write_run(tmp_path, range(1, 4)).close()
    result = tensorboard_events.parse(event_file(tmp_path).read_bytes())
    rows = sorted(points_as_tuples(result))
    expected = []
    for step in range(1, 4):
        expected.append((step, "train/loss", pytest.approx(1.0 / step), 1700000000.0 + step))
        expected.append((step, "train/lr", pytest.approx(1e-3), 1700000000.0 + step))
    assert rows == sorted(expected, key=lambda r: (r[0], r[1]))
    assert result.bad == []
    assert result.consumed == event_file(tmp_path).stat().st_size
    assert result.lines == 1 + 3 * 4  # the file-version event, then one record per add_* call


def test_reads_incrementally_while_the_writer_appends(tmp_path):
    writer = write_run(tmp_path, range(1, 3))
    path = event_file(tmp_path)
    first = tensorboard_events.parse(path.read_bytes())
    assert sorted(set(first.points.step)) == [1, 2]
    write_run(tmp_path, range(3, 5), writer).close()
    rest = tensorboard_events.parse(path.read_bytes()[first.consumed :], first_line=1 + first.lines)
    assert sorted(set(rest.points.step)) == [3, 4]
    assert len(first.points) + len(rest.points) == 8


def test_splitting_an_event_file_at_every_byte_gives_the_one_shot_result(tmp_path):
    write_run(tmp_path, range(1, 3), scalars_only=True).close()
    data = event_file(tmp_path).read_bytes()
    whole = feed_in_pieces(tensorboard_events.parse, data, [])
    assert whole[2] == len(data) and len(whole[0]) == 4
    for cut in range(len(data) + 1):
        assert feed_in_pieces(tensorboard_events.parse, data, [cut]) == whole, f"cut at {cut}"


def test_tensor_scalars_of_other_dtypes(tmp_path):
    writer = EventFileWriter(str(tmp_path))
    summary = summary_pb2.Summary()
    summary.value.extend(summary_v2.scalar_pb("as_double", np.float64(2.5)).value)
    summary.value.extend(summary_v2.scalar_pb("as_int", np.int64(7)).value)
    summary.value.extend(summary_v2.scalar_pb("as_nan", np.float32("nan")).value)
    writer.add_event(event_pb2.Event(step=5, wall_time=10.0, summary=summary))
    writer.close()
    rows = points_as_tuples(tensorboard_events.parse(event_file(tmp_path).read_bytes()))
    assert rows[:2] == [(5, "as_double", 2.5, 10.0), (5, "as_int", 7.0, 10.0)]
    assert rows[2][:2] == (5, "as_nan") and math.isnan(rows[2][2])


def test_checksum_matches_tensorboards_reference_implementation():
    import random

    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as reference

    rng = random.Random(3)
    for length in [*range(0, 40), 107, 1000, 4097]:
        data = rng.randbytes(length)
        assert tensorboard_events.masked_crc32c(data) == reference(data), length


def test_corrupt_records_are_reported_and_skipped(tmp_path):
    write_run(tmp_path, range(1, 4)).close()
    data = bytearray(event_file(tmp_path).read_bytes())
    good = tensorboard_events.parse(bytes(data))
    # Flip a byte inside the payload of the second record (the first scalar event).
    second = 12 + int.from_bytes(data[:8], "little") + 4
    data[second + 14] ^= 0xFF
    damaged = tensorboard_events.parse(bytes(data))
    assert [(b.line, b.reason) for b in damaged.bad] == [(2, "payload checksum mismatch: record skipped")]
    assert len(damaged.points) == len(good.points) - 1
    # Garbage in the middle: the reader finds the next valid record and goes on.
    garbage = bytes(data[:second]) + b"\x07" * 40 + bytes(data[second:])
    result = tensorboard_events.parse(garbage)
    assert (
        result.bad[0].reason.startswith("broken record header") and "skipped 40 bytes" in result.bad[0].reason
    )
    assert result.consumed == len(garbage)
    # Garbage at the end: consumed except the last bytes that could still start a header.
    tail = tensorboard_events.parse(bytes(data) + b"\x07" * 40)
    assert tail.bad and tail.consumed == len(data) + 40 - 11


# What the garbage fuzz (test_parsers_garbage) damages for this format.
def fuzz_sample(folder: Path) -> bytes:
    """A real event file (file-version event plus two scalar events) written by TensorBoard's own writer."""
    writer = EventFileWriter(str(folder))
    for step in (1, 2):
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="loss", simple_value=0.5 * step)])
        writer.add_event(event_pb2.Event(step=step, wall_time=1.0, summary=summary))
    writer.close()
    [path] = folder.glob("events.out.tfevents.*")
    return path.read_bytes()


FUZZ = {"tensorboard": FuzzSample(fuzz_sample), "hf_tensorboard": FuzzSample(fuzz_sample)}
