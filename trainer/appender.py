"""Appending text to a run file through a memory buffer that is written at a bounded interval.

A logged step costs a list append; the file gets one `write()` per interval (`every_s`): from the first
logging call past the interval, or from one background thread when training pauses (a long validation),
and always at a checkpoint, at the end of training, at a failure and at interpreter exit. So a clean stop
loses nothing, and a process killed outright (SIGKILL, SIGTERM without a handler, a machine going down)
loses at most the last `every_s` seconds of lines. Lines are written whole, in order, with O_APPEND.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
import weakref
from pathlib import Path

_OPEN: weakref.WeakSet[BufferedAppender] = weakref.WeakSet()
_FLUSHER: threading.Thread | None = None
_FLUSHER_LOCK = threading.Lock()
_TICK_S = 0.05  # how often the background thread looks for a file whose interval has passed


class BufferedAppender:
    """One file opened for appending; `append` buffers, `flush` writes what is buffered."""

    def __init__(self, path: Path, every_s: float) -> None:
        self.path = path
        self.every_s = every_s
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._pid = os.getpid()  # a forked child (a data-loader worker) must not write the parent's lines
        self._pending: list[str] = []
        self._lock = threading.Lock()
        self.error: OSError | None = None  # a background write's failure, raised by the next append
        self.due = time.monotonic() + every_s
        _OPEN.add(self)
        _start_flusher()

    def append(self, text: str) -> None:
        """Buffer `text` (whole lines); write the buffer if the interval has passed."""
        if self.error is not None:
            raise self.error
        with self._lock:
            self._pending.append(text)
        if time.monotonic() >= self.due:
            self.flush()

    def flush(self) -> None:
        """Write everything buffered so far, in order."""
        with self._lock:
            self.due = time.monotonic() + self.every_s
            if not self._pending or self._fd is None or os.getpid() != self._pid:
                return
            data = "".join(self._pending).encode()
            self._pending.clear()
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]

    def close(self) -> None:
        """Flush and close; later appends are dropped (training has ended)."""
        self.flush()
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
        _OPEN.discard(self)

    def __del__(self) -> None:
        if getattr(self, "_fd", None) is not None:
            self.close()


def flush_all() -> None:
    """Write every open appender's buffer (at exit, and from the background thread when due)."""
    for appender in list(_OPEN):
        appender.flush()


def _flush_due() -> None:
    while True:
        time.sleep(_TICK_S)
        now = time.monotonic()
        for appender in list(_OPEN):
            if now >= appender.due:
                try:
                    appender.flush()
                except OSError as exc:
                    appender.error = exc  # the writer raises it at its next step, and is reported


def _start_flusher() -> None:
    global _FLUSHER
    with _FLUSHER_LOCK:
        if _FLUSHER is None or not _FLUSHER.is_alive() or _FLUSHER.ident is None:
            _FLUSHER = threading.Thread(target=_flush_due, name="runwatch-flush", daemon=True)
            _FLUSHER.start()


def _after_fork_in_child() -> None:
    global _FLUSHER
    _FLUSHER = None  # threads do not survive fork; the child starts its own if it opens a file


atexit.register(flush_all)
os.register_at_fork(after_in_child=_after_fork_in_child)
