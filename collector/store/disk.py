"""Whether the collector's writes are failing for want of space, so that a stalled ingest is said, not hidden.

A full disk (or a quota) fails DuckDB's commits and the bulk reader's scratch copies beside the database;
the files are read on from their stored offsets once space is freed, so nothing is lost, but until then
nothing new is stored. `DiskState` is what `/api/health`, `collector runs` and the dashboard tell of it.
"""

from __future__ import annotations

import errno
import threading
import time
from pathlib import Path

_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_FULL_WORDS = ("No space left on device", "Disk quota exceeded")


def is_disk_full(error: BaseException) -> bool:
    """Whether `error` (an OSError, or DuckDB's error quoting one) says the disk or the quota is full."""
    if isinstance(error, OSError) and error.errno in _FULL_ERRNOS:
        return True
    return any(words in str(error) for words in _FULL_WORDS)


class DiskState:
    """Files whose ingest is failing for a full disk beside the database `db` (None: a whole cycle), since
    when, and the last error; a file leaves it once a read of it is stored."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self._lock = threading.Lock()
        self.stalled: set[str | None] = set()
        self.since: float | None = None
        self.error: str | None = None

    def failed(self, error: BaseException, path: str | None = None) -> bool:
        """Note a failed read of `path` (None: a whole ingest cycle); True when it failed for a full disk."""
        if not is_disk_full(error):
            return False
        with self._lock:
            self.stalled.add(path)
            self.since = self.since or time.time()
            self.error = str(error).splitlines()[0][:300]
        return True

    def stored(self, path: str | None = None) -> None:
        """A read of `path` (None: a whole cycle) was stored."""
        with self._lock:
            self.stalled.discard(path)
            if not self.stalled:
                self.since = self.error = None

    def state(self) -> dict:
        """`{"state": "ok"}`, or `{"state": "stalled", "reason": "disk_full", "since", "error", "files",
        "message"}` (`files`: how many files wait for space)."""
        with self._lock:
            if not self.stalled:
                return {"state": "ok"}
            return {
                "state": "stalled",
                "reason": "disk_full",
                "since": self.since,
                "error": self.error,
                "files": len(self.stalled - {None}),
                "message": (
                    f"ingest is stalled: the disk holding {self.db} is full ({self.error}). Free space there:"
                    " ingest resumes by itself from where each file was (nothing is lost)"
                ),
            }
