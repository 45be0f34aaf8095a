"""Files whose read fails as a whole (bad lines are quarantined instead): each is named with its reason,
kept as it was, and tried again after a backoff, while the other files and runs go on. Each is also kept in
the store (`store.failing`) until a read of it succeeds, where the API, the CLI and a later collector see it."""

from __future__ import annotations

import dataclasses
import logging
import time

from collector.store import failing as store_failing
from collector.store.db import Store
from collector.store.disk import is_disk_full

log = logging.getLogger("collector.ingest.failures")

# Retried after 1, 2, 4, ... s, at most 5 min apart.
RETRY_FIRST_S = 1.0
RETRY_MAX_S = 300.0
# A file that failed for a full disk is not at fault: it is tried again soon, to go on once space is freed.
RETRY_DISK_FULL_S = 5.0


@dataclasses.dataclass(slots=True)
class Failing:
    """A file whose last read failed: how often in a row, why, and when it is tried again (monotonic s)."""

    attempts: int
    reason: str
    retry_at: float


class Failures:
    """The files failing now, by path, kept in `store` too (those an earlier collector left there are tried
    at once, and counted on from there)."""

    def __init__(self, store: Store | None = None) -> None:
        self.store = store
        known = store_failing.failing_files(store) if store is not None else []
        self.by_path: dict[str, Failing] = {
            f["path"]: Failing(f["attempts"], f["reason"], 0.0) for f in known
        }
        self.unlisted: list[tuple[str, str]] | None = None  # folders that could not be listed, last noted

    def waiting(self, path: str, now: float) -> bool:
        """Whether `path` failed and its next try is not due at `now`."""
        failing = self.by_path.get(path)
        return failing is not None and now < failing.retry_at

    def failed(self, path: str, reason: str, run_id: str | None = None, soon: bool = False) -> Failing:
        """Note one more failure of `path` (a file of run `run_id`); the next try waits twice as long as the
        last (with `soon`, a failure not of the file's making, at most RETRY_DISK_FULL_S)."""
        attempts = self.by_path[path].attempts + 1 if path in self.by_path else 1
        wait = min(RETRY_FIRST_S * 2 ** (attempts - 1), RETRY_DISK_FULL_S if soon else RETRY_MAX_S)
        self.by_path[path] = Failing(attempts, reason, time.monotonic() + wait)
        if self.store is not None:
            try:
                with self.store.transaction() as cur:
                    store_failing.note_failing(cur, path, run_id, reason, attempts, time.time() + wait)
            except Exception as e:  # the store itself failing: the caller's log line still names the file
                if soon and is_disk_full(e):  # (said by /api/health; no traceback every retry of a full disk)
                    log.warning("%s: its failure could not be recorded in the store (%s)", path, e)
                else:
                    log.exception("%s: its failure could not be recorded in the store", path)
        return self.by_path[path]

    def note_unlisted(self, folders: list[tuple[str, str]]) -> None:
        """The folders (path, reason) a discovery could not list: kept in the store's `skipped_files` with no
        run (no run of theirs is known), replaced when they change."""
        if folders != self.unlisted and self.store is not None:
            self.store.set_skipped_files(None, [(path, why, 0) for path, why in folders])
        self.unlisted = folders

    def succeeded(self, paths: list[str]) -> None:
        """`paths` were read: they fail no more."""
        cleared = [p for p in paths if self.by_path.pop(p, None) is not None]
        if cleared and self.store is not None:
            with self.store.transaction() as cur:
                store_failing.clear_failing(cur, cleared)
