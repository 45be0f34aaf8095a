"""The record framing of a W&B offline run file (`RUN_DIR/wandb/offline-run-*/run-*.wandb`): bytes -> payloads.

The file is a 7-byte header (`:W&B`, magic 0xBEE1, version) then a LevelDB-style log: 32 KiB blocks (counted
from the start of the file) of chunks, each a 7-byte header (crc32c, length, type) and its payload; a record
is one FULL chunk, or FIRST, MIDDLE..., LAST; a block's last < 7 bytes are zero padding. Each record payload
is a serialized protobuf `Record` (`wandb.proto.wandb_internal_pb2`), which the caller decodes. Pure: no I/O;
the checksum is not verified (wandb 0.31 writes it, a torn tail shows as an incomplete chunk instead).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from collector.core.model import BadLine

BLOCK = 32768
FILE_HEADER = struct.Struct("<4sHB")  # b":W&B", magic 0xBEE1, version
CHUNK_HEADER = struct.Struct("<IHB")  # crc32c, length, chunk type
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
MAGIC = (b":W&B", 0xBEE1)


@dataclass(slots=True)
class Framed:
    """The whole records found in the bytes given.

    `consumed` counts the bytes fully handled (whole records and padding, plus the header at offset 0):
    a record still being written (a FIRST without its LAST, a chunk cut short) is left for the next read
    from `offset + consumed`. `bad` lists chunks that cannot belong to a record (record = chunk number).
    """

    records: list[bytes] = field(default_factory=list)
    consumed: int = 0
    chunks: int = 0
    bad: list[BadLine] = field(default_factory=list)


def frame_records(data: bytes, offset: int = 0, first_chunk: int = 1) -> Framed:
    """Split `data`, the file's bytes from `offset` on, into record payloads (see `Framed`).

    `offset` must be 0 or a value `offset + consumed` returned before (block positions count from the file's
    start). At offset 0 the file header is checked: a file that is not a W&B run file gives one BadLine and
    `consumed=0`. `first_chunk` numbers the chunks for BadLine across calls.
    """
    out = Framed()
    pos = 0
    if offset == 0:
        if len(data) < FILE_HEADER.size:
            return out
        ident, magic, _version = FILE_HEADER.unpack_from(data, 0)
        if (ident, magic) != MAGIC:
            out.bad.append(BadLine(1, f"not a W&B run file (header {ident!r}, magic {magic:#x})", ""))
            return out
        pos = out.consumed = FILE_HEADER.size
    pending: list[bytes] | None = None
    chunk_no = first_chunk
    while True:
        room = BLOCK - (offset + pos) % BLOCK
        if room < CHUNK_HEADER.size:  # block trailer: zero padding
            if pos + room > len(data):
                break
            pos += room
            if pending is None:
                out.consumed = pos
            continue
        if pos + CHUNK_HEADER.size > len(data):
            break
        _crc, length, kind = CHUNK_HEADER.unpack_from(data, pos)
        end = pos + CHUNK_HEADER.size + length
        if end > len(data):
            break  # the chunk is still being written
        payload = data[pos + CHUNK_HEADER.size : end]
        pos = end
        if kind in (FULL, FIRST):
            if pending is not None:
                out.bad.append(BadLine(chunk_no - 1, "record left unfinished: a new one starts", ""))
            pending = [payload]
        elif kind in (MIDDLE, LAST) and pending is not None:
            pending.append(payload)
        elif not (kind == 0 and length == 0):  # an empty type-0 chunk is filler
            out.bad.append(BadLine(chunk_no, f"chunk of type {kind} outside a record", payload[:200].hex()))
        chunk_no += 1
        if kind in (FULL, LAST) and pending is not None:
            out.records.append(b"".join(pending))
            pending = None
        if pending is None:
            out.consumed = pos
    out.chunks = chunk_no - first_chunk
    return out
