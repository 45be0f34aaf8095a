"""Every parser, fed damaged and random bytes, returns a result and never raises (a seeded, repeatable fuzz).

Each format's well-formed sample is declared beside its own tests (`FUZZ` in `test_parsers_*.py`): a new format
adds none here, and this test fails until its module declares one."""

from __future__ import annotations

import functools
import importlib
import random
from pathlib import Path

import pytest

from collector.formats import names, parser_for
from tests.collector.test_parsers_support import FuzzSample


def fuzz_samples() -> dict[str, FuzzSample]:
    """Every format's samples, as its own test module declares them (`FUZZ` in `test_parsers_*.py`)."""
    found: dict[str, FuzzSample] = {}
    for path in sorted(Path(__file__).parent.glob("test_parsers_*.py")):
        found.update(getattr(importlib.import_module(f"tests.collector.{path.stem}"), "FUZZ", {}))
    return found


SAMPLES = fuzz_samples()


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


@pytest.mark.parametrize("fmt", names())
def test_damaged_input_never_raises(fmt, tmp_path):
    assert fmt in SAMPLES, (
        f"format {fmt!r} has no fuzz sample: declare FUZZ in its tests/collector/test_parsers_*.py"
    )
    sample = SAMPLES[fmt]
    parse = functools.partial(parser_for(fmt), path=sample.path)
    data = sample.data(tmp_path) if callable(sample.data) else sample.data
    clean = parse(data, 1)
    assert clean.bad == [] and clean.consumed == len(data) and (len(clean.points) > 0 or clean.info)
    rng = random.Random(f"runwatch-{fmt}")
    reported = 0
    for damaged in mutations(data, rng):
        result = parse(damaged, 1)
        reported += len(result.bad)
        assert 0 <= result.consumed <= len(damaged)
        p = result.points
        assert len(p.step) == len(p.metric) == len(p.value) == len(p.wall_time)
        assert all(type(s) is int for s in p.step)
        assert all(type(v) is float for v in p.value)
        if sample.counts_lines:
            assert result.lines == damaged[: result.consumed].count(b"\n")
            assert all(1 <= b.line <= result.lines for b in result.bad)
    if not sample.quiet:  # a quiet format ignores what is not a record, by design
        assert reported > 0, "the damage never produced a reported bad record: the fuzz is not biting"
