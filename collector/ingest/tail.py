"""Watching the roots with watchdog: which files changed since the ingest loop last looked.

inotify by default; `polling=True` for network filesystems where inotify sees nothing. Events only mark paths
as changed; the ingest loop always reads from the stored offset to the end of the file (events coalesce under
a tight write loop), so a missed or merged event costs latency, never data.
"""

from __future__ import annotations

import threading
from pathlib import Path

from watchdog.events import (
    DirCreatedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.polling import PollingObserver

from collector.core.runtime import POLL_INTERVAL_S

# Our own reads produce opened / closed-without-write events: not changes.
_FILE_CHANGES = (FileCreatedEvent, FileModifiedEvent, FileDeletedEvent, FileClosedEvent)


class Changes(FileSystemEventHandler):
    """Collects changed file paths and new folders; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._paths: set[str] = set()
        self._moved: list[tuple[str, str]] = []
        self._new_dirs = False
        self.wakeup = threading.Event()

    def on_any_event(self, event: FileSystemEvent) -> None:
        with self._lock:
            if isinstance(event, FileMovedEvent):
                self._moved.append((str(event.src_path), str(event.dest_path)))
                self._paths.update((str(event.src_path), str(event.dest_path)))
            elif isinstance(event, _FILE_CHANGES):
                self._paths.add(str(event.src_path))
            elif isinstance(event, DirCreatedEvent | DirMovedEvent):
                self._new_dirs = True
            else:
                return
        self.wakeup.set()

    def add(self, path: str) -> None:
        """Mark a path changed by hand (an ingest request from the API)."""
        with self._lock:
            self._paths.add(path)
        self.wakeup.set()

    def add_move(self, src: str, dest: str) -> None:
        """Mark a rename seen by other means than watchdog (a remote host's listing)."""
        with self._lock:
            self._moved.append((src, dest))
            self._paths.update((src, dest))
        self.wakeup.set()

    def drain(self) -> tuple[set[str], list[tuple[str, str]], bool]:
        """(changed paths, moves (src, dest), whether folders appeared) since the last call."""
        with self._lock:
            paths, moved, new_dirs = self._paths, self._moved, self._new_dirs
            self._paths, self._moved, self._new_dirs = set(), [], False
            self.wakeup.clear()
        return paths, moved, new_dirs


class Tailer:
    """A watchdog observer over the roots (recursive) feeding a `Changes`."""

    def __init__(self, roots: list[Path], polling: bool = False) -> None:
        self.changes = Changes()
        self.observer = PollingObserver(timeout=POLL_INTERVAL_S) if polling else Observer()
        for root in roots:
            root = Path(root)
            # A root that is a single file is watched through its folder (events are filtered by path later).
            folder = root if root.is_dir() else root.parent
            self.observer.schedule(self.changes, str(folder), recursive=root.is_dir())

    def start(self) -> None:
        self.observer.start()

    def stop(self) -> None:
        self.observer.stop()
        self.observer.join(timeout=10)
