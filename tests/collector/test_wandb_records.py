"""The W&B offline file framing: records split over chunks and blocks come back whole, at any read boundary."""

from __future__ import annotations

import struct

from collector.formats.wandb_records import BLOCK, CHUNK_HEADER, FIRST, FULL, LAST, MIDDLE, frame_records


def write_log(records: list[bytes]) -> bytes:
    """A `.wandb` file as wandb's LevelDB-style writer lays it out (our own fixture writer)."""
    out = bytearray(struct.pack("<4sHB", b":W&B", 0xBEE1, 0))
    for record in records:
        rest, first = record, True
        while True:
            room = BLOCK - len(out) % BLOCK
            if room < CHUNK_HEADER.size:
                out += b"\0" * room
                continue
            take = min(len(rest), room - CHUNK_HEADER.size)
            last = take == len(rest)
            kind = FULL if first and last else FIRST if first else LAST if last else MIDDLE
            out += CHUNK_HEADER.pack(0, take, kind) + rest[:take]
            rest, first = rest[take:], False
            if last:
                break
    return bytes(out)


RECORDS = [bytes([i % 251]) * n for i, n in enumerate([10, 40_000, 3, 32_760, 70_000, 1, 500])]


def test_whole_file_gives_every_record_across_blocks():
    data = write_log(RECORDS)
    framed = frame_records(data)
    assert framed.records == RECORDS
    assert framed.consumed == len(data) and not framed.bad


def test_reads_cut_anywhere_resume_from_consumed_and_lose_nothing():
    data = write_log(RECORDS)
    for cuts in ([7, 20, 33_000, 65_600, 100_000], list(range(0, len(data), 9_973)), [len(data) - 1]):
        got, offset = [], 0
        for cut in [*cuts, len(data)]:
            if cut <= offset:
                continue
            framed = frame_records(data[offset:cut], offset)
            assert not framed.bad
            got += framed.records
            offset += framed.consumed
        assert got == RECORDS and offset == len(data)


def test_not_a_wandb_file_is_one_bad_record_and_nothing_consumed():
    framed = frame_records(b'{"step": 1, "loss": 2.0}\n' * 3)
    assert framed.consumed == 0 and framed.records == []
    assert len(framed.bad) == 1 and "not a W&B run file" in framed.bad[0].reason


def test_a_chunk_outside_a_record_is_reported_and_the_next_record_still_read():
    data = bytearray(write_log([b"a" * 5]))
    data += CHUNK_HEADER.pack(0, 4, LAST) + b"zzzz"  # a LAST with no FIRST before it
    data += CHUNK_HEADER.pack(0, 2, FULL) + b"ok"
    framed = frame_records(bytes(data))
    assert framed.records == [b"a" * 5, b"ok"]
    assert [(b.line, b.reason) for b in framed.bad] == [(2, "chunk of type 4 outside a record")]
    assert framed.consumed == len(data)
