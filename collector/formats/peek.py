"""A look at a file's first (and last) bytes, for discovery: what format it is, or whether it is a pointer.

The only I/O of the formats package besides discovery's folder listing; the judgements on the bytes are pure
(`Format.sniff`, `unread.pointer_reason`).
"""

from __future__ import annotations

import os
from pathlib import Path

from collector import formats
from collector.formats import unread

SNIFF_BYTES = 64 * 1024


def head(path: Path, size: int = SNIFF_BYTES, tail: bool = False) -> bytes | None:
    """The first `size` bytes of a file, and with `tail` its last `size` too (a console log shows what
    wrote it late: an HF Trainer's first logged dict can come after 100 KiB of set-up output)."""
    try:
        with path.open("rb") as f:
            first = f.read(size)
            if tail and len(first) == size:
                end = f.seek(0, os.SEEK_END)
                f.seek(max(size, end - size))
                first += b"\n" + f.read(size)
            return first
    except OSError:
        return None


def pointer(path: Path, size: int) -> str | None:
    """Why a small file is not itself but a pointer (Git LFS, git-annex), or None."""
    if size > unread.POINTER_MAX_BYTES:
        return None
    first = head(path, unread.POINTER_MAX_BYTES)
    return unread.pointer_reason(first) if first else None


def classify(path: Path) -> str | None:
    """The format of one file, by the registered formats' name patterns and, for a name that needs it, a
    peek at the file's first 64 KiB (`Format.sniffed`, `Format.sniff`).

    Returns a registered format's name, or None for files runwatch does not read. Never raises (an
    unreadable file whose name is ambiguous is None).
    """
    fmt, maybe = formats.by_name(path)
    if not maybe:
        return fmt.name if fmt is not None else None
    first = head(path, tail=True)
    if first is None:
        return fmt.name if fmt is not None else None
    sniffed = next((f.name for f in maybe if f.sniff is not None and f.sniff(first)), None)
    return sniffed or (fmt.name if fmt is not None else None)


# Files seen to hold a point, by (path, device, inode): an appended log that held one always does.
_HOLDS_POINTS: set[tuple[str, int, int]] = set()


def holds_points(path: Path, fmt: str) -> bool:
    """Whether the file's first 64 KiB hold a point in format `fmt`; False only when they hold whole records
    and none gave a point (a whole document, which only parses whole, and a file with no whole record yet
    are taken to hold points, as is one the parser fails on: its read reports that failure for the file). Discovery
    asks before calling another file a copy of this one. Never raises."""
    described = formats.get(fmt)
    if described.whole_document:
        return True
    try:
        st = path.stat()
    except OSError:
        return False
    key = (str(path), st.st_dev, st.st_ino)
    if key in _HOLDS_POINTS:
        return True
    data = head(path)
    try:
        read = described.parse(data or b"", path=str(path))
    except Exception:  # noqa: BLE001 (a parser's module missing, bytes it cannot take): the read says so
        return True  # for this file, with its name; a peek must never cost the other files their run
    if not read.lines:
        return True  # not one whole record yet (a run just started): nothing says it holds no points
    if not len(read.points):
        return False
    _HOLDS_POINTS.add(key)
    return True
