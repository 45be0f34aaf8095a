"""Which life of a file an offset belongs to: change checks, and the rules that start a new segment.

A file that shrank (truncated), was replaced (new inode: rotation), was deleted and came back, or was
rewritten in place (the bytes before the offset differ) is read again from offset 0 as a new segment; what
was ingested from its earlier life stays. A whole document (`Format.whole_document`) is replaced on every
update and simply read again.
"""

from __future__ import annotations

import dataclasses
import os

from collector.ingest.fs import Files
from collector.store.db import SourceState, Store

SIG_BYTES = 32  # bytes before the offset remembered to notice a file rewritten in place


def read_range(path: str, start: int, size: int) -> bytes:
    """Up to `size` bytes of `path` from `start` (a local file, or a remote one: `collector.ingest.fs`)."""
    return Files.read_range(path, start, size)


@dataclasses.dataclass(slots=True)
class Event:
    """Something the ingest did that a person may want to read (file, line, what was done)."""

    path: str
    message: str


def changed(s: SourceState, whole_document: bool) -> bool:
    """Whether the file differs from what was ingested (cheap: one stat)."""
    if not Files.reachable(s.path):
        return False  # a remote file whose host is down: looked at again once it is back
    try:
        st = Files.stat(s.path)
    except OSError:
        return s.state != "deleted"
    if s.state == "deleted" or (st.st_ino, st.st_dev) != (s.inode, s.device):
        return True
    if whole_document:
        return (st.st_size, st.st_mtime) != (s.size, s.mtime)
    return st.st_size != s.offset or st.st_mtime != s.mtime


def backlog(s: SourceState) -> int:
    """Bytes of the file not yet ingested (all of it when it is a new life of the file)."""
    try:
        st = Files.stat(s.path)
    except OSError:
        return 0
    if st.st_ino != s.inode or st.st_size < s.offset:
        return st.st_size
    return st.st_size - s.offset


def remote_starts(paths: list[str], sources: dict[str, SourceState], whole) -> list[tuple[str, int]]:
    """(key, offset less the bytes checked for a rewrite) of each remote source in `paths` read by lines
    (`whole(s)` is False): what `Files.prefetch` fetches for all of them in one round trip per host."""
    return [
        (p, s.offset - len(s.tail_sig))
        for p in paths
        if not p.startswith("/") and (s := sources.get(p)) is not None and not whole(s)
    ]


def new_life(s: SourceState, st: os.stat_result) -> str | None:
    """Why the file `st` describes is no longer the life `s`'s offset belongs to, or None when it is.

    A file that was gone and is back as the same file (same inode and device, the bytes before the offset
    unchanged: its root was renamed away and back) is the same life."""
    if s.state == "deleted" and not _same_file(s, st, s.path):
        return "appeared again after being deleted"
    if s.inode and (st.st_ino, st.st_dev) != (s.inode, s.device):
        return "was replaced by a new file (rotation)"
    if st.st_size < s.offset:
        return f"shrank below the ingested offset {s.offset} (truncated)"
    if s.offset and s.tail_sig:
        before = read_range(s.path, s.offset - len(s.tail_sig), len(s.tail_sig))
        if before != s.tail_sig:
            return "was rewritten in place"
    return None


def renamed_to(s: SourceState) -> str | None:
    """Where the file `s`'s offset belongs to went when another file now has its name (rotation:
    `metrics.jsonl` -> `metrics.jsonl.1`, perhaps while the collector was down): a file of its folder
    with its inode and device and the same bytes before the offset, or None."""
    if not s.inode or s.state == "deleted":
        return None
    try:
        st = Files.stat(s.path)
        if (st.st_ino, st.st_dev) == (s.inode, s.device):
            return None
        entries = list(Files.scandir(os.path.dirname(s.path)))
    except OSError:
        return None
    for entry in entries:
        try:
            if entry.inode() != s.inode or entry.path == s.path or not entry.is_file(follow_symlinks=False):
                continue
            if _same_file(s, entry.stat(follow_symlinks=False), entry.path):
                return entry.path
        except OSError:
            continue
    return None


def _same_file(s: SourceState, st: os.stat_result, path: str) -> bool:
    """Whether `path` (as `st` saw it) is the file `s` was reading: its identity and its bytes before the
    offset."""
    if (st.st_ino, st.st_dev) != (s.inode, s.device) or st.st_size < s.offset:
        return False
    if not s.tail_sig:
        return True
    try:
        return read_range(path, s.offset - len(s.tail_sig), len(s.tail_sig)) == s.tail_sig
    except OSError:
        return False


def start_segment(s: SourceState) -> bool:
    """Reset `s` to read its file from offset 0; True when a segment was left behind (a new one begins)."""
    had = s.offset > 0 or s.state == "deleted"
    s.offset, s.lines, s.tail_sig, s.state, s.parser_state = 0, 0, b"", "active", None
    s.size = s.mtime = 0
    if had:
        s.segment += 1
    return had


def inside_line(s: SourceState) -> bool:
    """Whether `s`'s offset is inside a line (one too long to keep, quarantined, whose rest is skipped):
    the bytes before it do not end with a newline."""
    return bool(s.tail_sig) and not s.tail_sig.endswith(b"\n")


def mtime_of(path: str) -> float:
    """The file's modification time, 0 when it cannot be read."""
    try:
        return Files.stat(path).st_mtime
    except OSError:
        return 0.0


def size_of(path: str | os.PathLike) -> int:
    """The file's size, 0 when it cannot be read."""
    try:
        return Files.stat(str(path)).st_size
    except OSError:
        return 0


def position(s: SourceState) -> dict:
    """The fields of `s` that say where reading stands (kept when a file is re-registered under a new run)."""
    return {
        k: getattr(s, k)
        for k in ("inode", "device", "size", "mtime", "offset", "lines", "segment", "state", "tail_sig")
    }


# A file modified less than this long ago counts as written now: a remote host's clock may be off by minutes,
# and a live run must not look silent for it; older data is dated by its file's modification time.
CLOCK_SLACK_S = 600.0


def written_at(mtime: float, now: float) -> float:
    """When a file's newest data was written, as far as the collector can tell: its modification time when
    that is older than `CLOCK_SLACK_S`, else `now` (so a run first seen hours after it stopped writing is
    not taken for one that just wrote)."""
    return mtime if now - mtime > CLOCK_SLACK_S else now


def identity(store: Store, cur, s: SourceState, whole: bool, event) -> os.stat_result | None:
    """Stat the file `s` follows and start a new segment when it is no longer the file the offset belongs to
    (saving the source's state in the open transaction `cur`; `event(path, message)` says what was done).
    None: the file is gone (marked deleted once; what was ingested from it stays)."""
    try:
        st = Files.stat(s.path)
    except FileNotFoundError:
        if s.state != "deleted":
            s.state = "deleted"
            store.save_source(cur, s)
            event(s.path, "was deleted; what was ingested from it stays")
        return None
    if whole:
        # Replaced atomically on every update (a new inode each time): just read it again.
        s.inode, s.device, s.state = st.st_ino, st.st_dev, "active"
        return st
    reason = new_life(s, st)
    if reason is None and s.state == "deleted":
        s.state = "active"
        store.save_source(cur, s)
        event(s.path, f"is back, the same file as before (inode and bytes): reading on from byte {s.offset}")
    if reason and start_segment(s):
        event(
            s.path,
            f"{reason}: reading it again from the start as segment {s.segment}; "
            "earlier points stay, and steps written again replace them",
        )
    if (s.inode, s.device) != (st.st_ino, st.st_dev):
        s.inode, s.device = st.st_ino, st.st_dev
        # Remembered at once, even with nothing read yet: if this file is renamed while the collector is
        # down, its identity is what finds it again.
        store.save_source(cur, s)
    return st
