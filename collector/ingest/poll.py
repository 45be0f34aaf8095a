"""Polling a remote host for changed files: the remote counterpart of `tail.Tailer` (no inotify over SSH).

Each cycle costs one round trip for all the host's roots and files: a `find -newerct` listing of what changed
since the last cycle (a full listing now and then, to see deletions). Paths whose size, mtime or inode
changed are marked in the shared `Changes`; a file that now carries the inode another path had is a rename
(rotation). The interval tightens to `min_s` while files change and backs off to `max_s` while none do.
"""

from __future__ import annotations

import logging
import threading
import time

from collector.ingest.remote import Host
from collector.ingest.ssh_target import HostUnreachable, RemoteStat
from collector.ingest.tail import Changes

log = logging.getLogger("collector.ingest.poll")

MIN_INTERVAL_S = 0.3  # while a run writes
MAX_INTERVAL_S = 5.0  # while nothing changes
FULL_EVERY_S = 10.0  # a full listing (deletions); the delta listings in between see writes and renames
# Each delta looks this far before the last cycle's start (writes during the last listing): a second where
# the listing shows whole-second times (such a filesystem rounds a write down), else a quarter second (a file
# time lags the clock by a tick at most). A change a delta missed is seen by the next full listing.
SLACK_S = 1.0
FINE_SLACK_S = 0.25


class RemotePoller:
    """A thread per host feeding `changes` with the keys (`label:/path`) of files that changed."""

    def __init__(
        self, host: Host, changes: Changes, min_s: float = MIN_INTERVAL_S, max_s: float = MAX_INTERVAL_S
    ):
        self.host = host
        self.changes = changes
        self.min_s, self.max_s = min_s, max_s
        self.interval = min_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"poll-{host.label}", daemon=True)
        self._seen: dict[str, RemoteStat] | None = None  # None: the next listing is a full one

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def poll_once(self) -> int:
        """One cycle: list, compare, mark. Returns how many paths changed; HostUnreachable when down."""
        full = self._seen is None or time.monotonic() - self._last_full >= FULL_EVERY_S
        since = None if full else self._since - (FINE_SLACK_S if self._fine_times else SLACK_S)
        try:
            now, found = self.host.list_tree(since)
        except HostUnreachable:
            if self._seen is not None:
                self._seen = None  # after a reconnect: a full listing, and every file looked at again
                self._all_changed = True
            raise
        if full:
            self._last_full = time.monotonic()
            times = [st.st_mtime for st in found.values() if st.kind == "f"]
            self._fine_times = bool(times) and all(t % 1 for t in times)
        previous = self._seen or {}
        changed = self._compare(previous, found, full)
        if self._all_changed:
            changed |= {p for p, st in found.items() if st.kind == "f"}
            self._all_changed = False
        self._seen = found if full else {**previous, **found}
        self._since = now
        for path in changed:
            self.changes.add(f"{self.host.label}:{path}")
        return len(changed)

    _last_full = 0.0
    _since = 0.0
    _fine_times = False  # every file's time has a fraction of a second (a delta can look back less far)
    _all_changed = True  # the first listing: every file is news to this process (the reader checks offsets)

    def _compare(self, previous: dict[str, RemoteStat], found: dict[str, RemoteStat], full: bool) -> set[str]:
        changed = {p for p, st in found.items() if st.kind == "f" and previous.get(p) != st}
        if full:
            changed |= {p for p, st in previous.items() if st.kind == "f" and p not in found}  # deleted
        by_inode = {(st.st_ino, st.st_dev): p for p, st in previous.items() if st.kind == "f"}
        for dest in sorted(changed):
            st = found.get(dest)
            src = by_inode.get((st.st_ino, st.st_dev)) if st is not None else None
            if src is not None and src != dest:
                now_src = found.get(src)
                if now_src is None or (now_src.st_ino, now_src.st_dev) != (st.st_ino, st.st_dev):
                    label = self.host.label
                    self.changes.add_move(f"{label}:{src}", f"{label}:{dest}")  # rotation
        return changed

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                changed = self.poll_once()
            except HostUnreachable:
                changed = 0  # the host keeps its own reconnect backoff; its state says why
            except Exception:
                log.exception("%s: polling failed; retrying", self.host.label)
                changed = 0
            self.interval = self.min_s if changed else min(self.interval * 1.5, self.max_s)
            self._stop.wait(self.interval)
