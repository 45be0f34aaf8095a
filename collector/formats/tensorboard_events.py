"""TensorBoard event files (`events.out.tfevents.*`): TFRecord-framed `Event` protobufs, read incrementally.

Each record is: 8-byte little-endian length, 4-byte masked CRC-32C of the length, the payload, 4-byte masked
CRC-32C of the payload. A writer appends whole records, so a read can end inside one: it stays for next time.
"""

from __future__ import annotations

import functools
import struct

import numpy as np

from collector.core.model import BadLine, Format, ParseResult

_HEADER = 12
_FOOTER = 4
# Tensor summaries from these plugins hold one number (anything else: images, histograms, text, hparams).
_SCALAR_PLUGINS = ("", "scalars")


def parse(data: bytes, first_line: int = 1, *, path: str = "", state: object = None) -> ParseResult:
    """Scalar points from the complete records of `data`, an event file read from a record boundary.

    Promises: `consumed` ends on a record boundary (a partial record stays); `lines` counts records and
    `first_line` is the record number of the first one, so BadLine.line is a 1-based record number. Points
    come from `simple_value` summaries and from scalar tensor summaries (float, double, int, half, bool), at
    the event's step with its wall time; other summaries (images, histograms, text) are skipped. A record
    whose payload checksum fails or that does not decode is reported and skipped. A broken length header is
    reported and the bytes up to the next valid header are skipped; never raises. `path` and `state`
    are unused (the common signature).
    """
    event_pb2, _, decode_error = _proto()
    result = ParseResult()
    points = result.points
    pos, size, record = 0, len(data), first_line - 1
    while pos + _HEADER <= size:
        header = data[pos : pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[pos + 8 : pos + _HEADER])
        if masked_crc32c(header) != length_crc:
            record += 1
            resync = _next_header(data, pos + 1)
            skipped_to = resync if resync is not None else max(pos + 1, size - _HEADER + 1)
            reason = (
                f"broken record header at byte +{pos} of this read (length checksum mismatch): "
                f"skipped {skipped_to - pos} bytes to the next valid record"
            )
            result.bad.append(BadLine(record, reason, data[pos : pos + 32].hex()))
            pos = skipped_to
            if resync is None:
                break
            continue
        end = pos + _HEADER + length + _FOOTER
        if end > size:
            break  # the writer has not finished this record yet
        record += 1
        payload = data[pos + _HEADER : end - _FOOTER]
        (payload_crc,) = struct.unpack("<I", data[end - _FOOTER : end])
        pos = end
        if masked_crc32c(payload) != payload_crc:
            result.bad.append(
                BadLine(record, "payload checksum mismatch: record skipped", payload[:32].hex())
            )
            continue
        try:
            event = event_pb2.Event.FromString(payload)
        except decode_error as err:
            result.bad.append(BadLine(record, f"not an Event protobuf: {err}", payload[:32].hex()))
            continue
        if not event.HasField("summary"):
            continue
        for value in event.summary.value:
            kind = value.WhichOneof("value")
            if kind == "simple_value":
                points.add(event.step, value.tag, value.simple_value, event.wall_time)
            elif kind == "tensor" and value.metadata.plugin_data.plugin_name in _SCALAR_PLUGINS:
                number = _scalar_of(value.tensor)
                if number is not None:
                    points.add(event.step, value.tag, number, event.wall_time)
    result.consumed = pos
    result.lines = record - (first_line - 1)
    return result


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC_TABLE = _crc32c_table()


def masked_crc32c(data: bytes) -> int:
    """TFRecord's checksum: CRC-32C (Castagnoli) of `data`, rotated and offset as TensorFlow masks it."""
    crc = 0xFFFFFFFF
    table = _CRC_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _next_header(data: bytes, start: int) -> int | None:
    """The first offset at or after `start` where a record header's length checksum holds, if any."""
    for pos in range(start, len(data) - _HEADER + 1):
        if masked_crc32c(data[pos : pos + 8]) == struct.unpack("<I", data[pos + 8 : pos + _HEADER])[0]:
            return pos
    return None


@functools.cache
def _proto() -> tuple:
    """TensorBoard's protobuf classes, imported on the first read of an event file (protobuf is slow to load
    and most runs have no event file): (event_pb2, types_pb2, DecodeError)."""
    from google.protobuf.message import DecodeError
    from tensorboard.compat.proto import event_pb2, types_pb2

    return event_pb2, types_pb2, DecodeError


@functools.cache
def _numpy_of_dtype() -> dict:
    types_pb2 = _proto()[1]
    return {
        types_pb2.DT_FLOAT: np.float32,
        types_pb2.DT_DOUBLE: np.float64,
        types_pb2.DT_INT32: np.int32,
        types_pb2.DT_INT64: np.int64,
        types_pb2.DT_HALF: np.float16,
        types_pb2.DT_BOOL: np.bool_,
    }


def _scalar_of(tensor) -> float | None:
    """The single number a TensorProto holds, or None when it holds several, or no number."""
    types_pb2 = _proto()[1]
    dtype = _numpy_of_dtype().get(tensor.dtype)
    if dtype is None:
        return None
    count = 1
    for dim in tensor.tensor_shape.dim:
        count *= dim.size
    if count != 1:
        return None
    if tensor.tensor_content:
        values = np.frombuffer(tensor.tensor_content, dtype=dtype)
    elif tensor.dtype == types_pb2.DT_HALF:
        values = np.array(tensor.half_val, dtype=np.uint16).view(np.float16)
    else:
        field = {
            types_pb2.DT_FLOAT: tensor.float_val,
            types_pb2.DT_DOUBLE: tensor.double_val,
            types_pb2.DT_INT32: tensor.int_val,
            types_pb2.DT_INT64: tensor.int64_val,
            types_pb2.DT_BOOL: tensor.bool_val,
        }[tensor.dtype]
        values = list(field)
    return float(values[0]) if len(values) == 1 else None


def sniff(head: bytes) -> bool:
    """Whether a file starts with an event file's first record (its `brain.Event:N` file-version event)."""
    return b"brain.Event:" in head[:64]


# Copies of event files renamed on the way (`<prefix>-events.out.tfevents.*`) are known by their first record.
FORMAT = Format(
    name="tensorboard",
    parse=parse,
    names=("events.out.tfevents.*",),
    sniffed=("*tfevents*",),
    sniff=sniff,
    lines=False,
    lives=("events.out.tfevents.*",),  # one per writer, named for its start time and host
)
