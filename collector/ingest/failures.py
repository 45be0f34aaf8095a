"""Files whose read fails as a whole (bad lines are quarantined instead): each is named with its reason,
kept as it was, and tried again after a backoff, while the other files and runs go on."""

from __future__ import annotations

import dataclasses
import time

# Retried after 1, 2, 4, ... s, at most 5 min apart.
RETRY_FIRST_S = 1.0
RETRY_MAX_S = 300.0


@dataclasses.dataclass(slots=True)
class Failing:
    """A file whose last read failed: how often in a row, why, and when it is tried again (monotonic s)."""

    attempts: int
    reason: str
    retry_at: float


class Failures:
    """The files failing now, by path."""

    def __init__(self) -> None:
        self.by_path: dict[str, Failing] = {}

    def waiting(self, path: str, now: float) -> bool:
        """Whether `path` failed and its next try is not due at `now`."""
        failing = self.by_path.get(path)
        return failing is not None and now < failing.retry_at

    def failed(self, path: str, reason: str) -> Failing:
        """Note one more failure of `path`; the next try waits twice as long as the last."""
        attempts = self.by_path[path].attempts + 1 if path in self.by_path else 1
        wait = min(RETRY_FIRST_S * 2 ** (attempts - 1), RETRY_MAX_S)
        self.by_path[path] = Failing(attempts, reason, time.monotonic() + wait)
        return self.by_path[path]

    def succeeded(self, path: str) -> None:
        self.by_path.pop(path, None)
