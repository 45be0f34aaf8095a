"""A long read of a file piece by piece (`fs.Files.fill`): a remote one as a stream whose next pieces are in
flight while the caller works on one, so the network and the ingest overlap (a first backfill over SSH)."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import TYPE_CHECKING

from collector.ingest.remote import OP_TIMEOUT_S, Host
from collector.ingest.ssh_loop import Loop

if TYPE_CHECKING:
    import asyncssh

DEPTH = 4  # pieces in flight at once (4 MiB pieces: 16 MiB held)


def stream(host: Host, path: str, start: int, size: int, piece: int) -> Iterator[bytes]:
    """`size` bytes of `path` on `host` from `start`, in order, `piece` bytes at a time (fewer at its end),
    with up to DEPTH pieces in flight. Each piece waits OP_TIMEOUT_S at most; a dropped or stalled link
    raises HostUnreachable (and the host reconnects at its next use)."""
    conn, sftp = host._connected()
    host.round_trips += 1
    pending: collections.deque = collections.deque()  # (future, bytes asked)
    f = None
    try:
        f = Loop.run(_open(sftp, path), OP_TIMEOUT_S)
        at, end = start, start + size
        while pending or at < end:
            while at < end and len(pending) < DEPTH:
                n = min(piece, end - at)
                pending.append((Loop.submit(f.read(n, at)), n))
                at += n
            future, asked = pending.popleft()
            data = future.result(OP_TIMEOUT_S)
            host.bytes_read += len(data)
            if data:
                yield data
            if len(data) < asked:
                return  # the file ends here (it was cut since it was listed)
    except Exception as e:
        raise host._failure(e) from None
    finally:
        for future, _ in pending:
            future.cancel()
        if f is not None:
            Loop.submit(f.close())  # not waited for: a stalled link must not hold the caller


def fill_local(path: str, start: int, size: int, buf: bytearray) -> Iterator[int]:
    """Read `size` bytes of a local file from `start` into `buf` piece by piece; yields each piece's length."""
    with open(path, "rb") as f:
        f.seek(start)
        while size > 0:
            n = f.readinto(memoryview(buf)[: min(len(buf), size)])
            if not n:
                return
            size -= n
            yield n


def fill_remote(host: Host, path: str, start: int, size: int, buf: bytearray) -> Iterator[int]:
    """Like `fill_local`, for a file on `host`, streamed (`stream`)."""
    for data in stream(host, path, start, size, len(buf)):
        buf[: len(data)] = data
        yield len(data)


async def _open(sftp: asyncssh.SFTPClient, path: str) -> asyncssh.SFTPClientFile:
    return await sftp.open(path, "rb")  # (open returns an awaitable, not the coroutine the loop takes)
