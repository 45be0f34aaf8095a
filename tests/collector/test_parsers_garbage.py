"""Every parser, fed damaged and random bytes, returns a result and never raises (a seeded, repeatable fuzz)."""

from __future__ import annotations

import functools
import random

import pytest
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from collector.formats import names, parser_for

SAMPLES = {
    "jsonl": b'{"step":1,"data":{"train/loss":2.5,"x":NaN}}\n{"step":2,"loss":{"actor":1}}\n',
    "console": b"INFO start\nstep:1 - train/loss:2.5 - lr:1e-05\r\nstep:2 - a:nan\n",
    "csv": b"step,epoch,loss\r\n1,0,2.5\r\n2,0,nan\r\n",
    "hf_trainer_state": b'{"global_step": 2, "log_history": [{"step": 1, "loss": NaN}, {"step": 2, "eval_loss": 1}]}',
    "status": b'{"status": "running", "step": 3}',
    "run_config": b'{"config": {"a": 1}}',
    "checkpoint_marker": b"12\n",
    "llamafactory_log": b'{"current_steps": 5, "total_steps": 10, "loss": 2.5, "lr": 1e-05, "epoch": 0.5}\n'
    b'{"current_steps": 10, "total_steps": 10, "loss": NaN, "eval_loss": null, "percentage": 100.0}\n',
    "hf_console": b" 50%|#####     | 1/2 [00:01<00:01]\r{'loss': 2.5, 'grad_norm': nan, 'epoch': 0.5}\n"
    b"100%|##########| 2/2 [00:02<00:00]\r{'loss': '1.5', 'epoch': 1.0}\n{'train_runtime': 2.0, 'epoch': 1.0}\n",
    "platform_status": b'{"job_id": "j", "status": "running", "current_step": 3, "updated_at": "2026-11-24T07:00:00Z"}',
    "mlflow_metric": b"1732431600000 2.5 1\n1732431601000 nan 2\n",
    "mlflow_entry": b"0.0001\n",
    "mlflow_meta": b"end_time: null\nexperiment_id: '0'\nrun_id: 4f1c2e\nrun_name: sft\nstart_time: 1732431600000\n"
    b"status: 1\n",
}
# Formats whose parser reads the metric (or param) name from the file's path.
PATHS = {"mlflow_metric": "/r/mlruns/0/abc/metrics/train/loss", "mlflow_entry": "/r/mlruns/0/abc/params/lr"}


def mutations(data: bytes, rng: random.Random):
    yield b""
    yield rng.randbytes(200)
    yield rng.randbytes(100).replace(b"\x0a", b"") + b"\n" + rng.randbytes(50)
    for _ in range(60):
        damaged = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            choice = rng.random()
            pos = rng.randrange(len(damaged) + 1)
            if choice < 0.4 and damaged:
                damaged[min(pos, len(damaged) - 1)] = rng.randrange(256)
            elif choice < 0.7:
                damaged[pos:pos] = rng.choice([b"\n", b"\r", b"\xff", b"NaN", b'"', b"{", b",", b"\x00"])
            else:
                del damaged[pos : pos + rng.randint(1, 8)]
        yield bytes(damaged)


def tensorboard_sample(folder) -> bytes:
    """A real event file (file-version event plus two scalar events) written by TensorBoard's own writer."""
    writer = EventFileWriter(str(folder))
    for step in (1, 2):
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="loss", simple_value=0.5 * step)])
        writer.add_event(event_pb2.Event(step=step, wall_time=1.0, summary=summary))
    writer.close()
    [path] = folder.glob("events.out.tfevents.*")
    return path.read_bytes()


def wandb_sample() -> bytes:
    """A W&B run file framed by hand as wandb writes it: its header, then two history records, one chunk each."""
    import struct

    from wandb.proto import wandb_internal_pb2

    out = bytearray(b":W&B" + struct.pack("<HB", 0xBEE1, 0))
    for step in (1, 2):
        record = wandb_internal_pb2.Record()
        for key, value in (("_step", str(step)), ("train/loss", str(0.5 * step))):
            record.history.item.add(key=key, value_json=value)
        payload = record.SerializeToString()
        out += struct.pack("<IHB", 0, len(payload), 1) + payload
    return bytes(out)


def sample_of(fmt: str, folder) -> bytes:
    if fmt in ("tensorboard", "hf_tensorboard"):
        return tensorboard_sample(folder)
    return wandb_sample() if fmt == "wandb_offline" else SAMPLES[fmt]


@pytest.mark.parametrize("fmt", names())
def test_damaged_input_never_raises(fmt, tmp_path):
    parse = functools.partial(parser_for(fmt), path=PATHS.get(fmt, ""))
    sample = sample_of(fmt, tmp_path)
    clean = parse(sample, 1)
    assert clean.bad == [] and clean.consumed == len(sample) and (len(clean.points) > 0 or clean.info)
    rng = random.Random(f"runwatch-{fmt}")
    reported = 0
    for data in mutations(sample, rng):
        result = parse(data, 1)
        reported += len(result.bad)
        assert 0 <= result.consumed <= len(data)
        p = result.points
        assert len(p.step) == len(p.metric) == len(p.value) == len(p.wall_time)
        assert all(type(s) is int for s in p.step)
        assert all(type(v) is float for v in p.value)
        if fmt in ("jsonl", "console", "csv"):
            assert result.lines == data[: result.consumed].count(b"\n")
            assert all(1 <= b.line <= result.lines for b in result.bad)
    if fmt not in ("console", "hf_console", "mlflow_entry"):  # they ignore what is not a record, by design
        assert reported > 0, "the damage never produced a reported bad record: the fuzz is not biting"
