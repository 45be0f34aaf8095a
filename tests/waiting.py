"""The one way tests wait for a daemon, a trainer or a page: poll until the thing is there.

A daemon answers before its first scan has registered the runs, a run's list misses a run a moment longer
than the test's first look, a file is read a cycle later than it is written. Each of those is "not there
yet", never a failure: `wait_for` keeps polling through them and fails only when the deadline passes (or
the process being waited on dies), naming what it waited for and the last "not yet" it saw. The deadlines
are guards against a hang, not timing checks: nothing asserts how fast something happened.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from collector.api.client import ApiError

DEADLINE_S = 90.0
POLL_S = 0.05
# An API that is not up yet (0: no answer), does not know the run yet (404), or is busy starting (503).
NOT_YET_STATUS = frozenset({0, 404, 503})


def not_yet(error: BaseException) -> bool:
    """Whether `error` only says the thing waited for is not there yet."""
    if isinstance(error, ApiError):
        return error.status in NOT_YET_STATUS
    # a run or an alert not listed yet (`next(...)` over a list, `d[key]`, `rows[0]`), a file not written
    # yet or half written, a server not listening yet
    return isinstance(error, (StopIteration, LookupError, OSError, ValueError))


def wait_for(
    condition: Callable[[], object],
    what: str,
    timeout: float = DEADLINE_S,
    proc: subprocess.Popen | None = None,
    log: Path | None = None,
    poll_s: float = POLL_S,
) -> object:
    """Poll `condition` until it returns something truthy and return that. Errors that only say "not yet"
    (see `not_yet`) are polled through; any other error fails at once. With `proc`, fail at once when it
    exits (naming its exit code and the tail of `log`); else fail naming `what` after `timeout` seconds."""
    end = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        if proc is not None and proc.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log is not None and log.exists() else ""
            raise AssertionError(
                f"while waiting for {what}, the process exited with {proc.returncode}\n{tail}"
            )
        try:
            value = condition()
        except Exception as e:
            if not not_yet(e):
                raise
            value, last = None, e
        else:
            last = None
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(
                f"gave up after {timeout:.0f} s waiting for {what}"
                + (f" (last: {type(last).__name__}: {last})" if last else "")
            )
        time.sleep(poll_s)
