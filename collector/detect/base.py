"""What every rule shares: its verdict type, a bounded robust window, and number formatting for messages.

A rule is a small object fed one finite point at a time (`feed(step, value, run)`); it answers with a
`Finding` (the condition holds at this point), `None` (the condition does not hold: counts towards closing
an open episode) or `HOLD` (no verdict here: too little history, an excluded step). It keeps bounded state
and does no I/O. `rewind(step)` forgets what it saw at `step` and later (a rewritten or resumed file).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from statistics import median

HOLD = object()  # "no verdict at this point": neither opens nor clears an episode

MAD_TO_SIGMA = 1.4826  # scales the median absolute deviation to a normal sigma


@dataclass(slots=True)
class Finding:
    """The condition of a rule holds at one point."""

    severity: str
    value: float | None
    message: str
    evidence: dict = field(default_factory=dict)
    # the episode becomes an error (a warning) once it has this many hit points: sustained trouble
    error_after_points: int | None = None
    warn_after_points: int | None = None
    # for rules whose episode starts before the point that confirmed it (val_loss_rise: the first worse eval)
    first_step: int | None = None
    # the step this verdict is about, when a rule judges a point late (step_time waits for the next step)
    at_step: int | None = None
    # a spike: the episode reports its highest point (value, step, message), not its latest
    peak: bool = False


class Window:
    """The last `size` (step, value) points of one metric, with robust statistics over them.

    The median and MAD are recomputed every `size // 10` added points once the window is full (and at every
    point before): a baseline that is a few points stale judges a spike the same way, at a tenth of the cost.
    """

    __slots__ = ("points", "_stride", "_added", "_at", "_stats", "_noise_at", "_noise")

    def __init__(self, size: int) -> None:
        self.points: deque[tuple[int, float]] = deque(maxlen=max(1, size))
        self._stride = max(1, size // 10)
        self._added = 0
        self._at = -1
        self._stats = (0.0, 0.0)
        self._noise_at = -1
        self._noise = 0.0

    def __len__(self) -> int:
        return len(self.points)

    def add(self, step: int, value: float) -> None:
        self.points.append((step, value))
        self._added += 1

    def replace(self, points: Iterable[tuple[int, float]]) -> None:
        """Start over from these (step, value) points."""
        self.points.clear()
        for step, value in points:
            self.add(step, value)
        self._at = self._noise_at = -1

    def values(self) -> list[float]:
        return [v for _, v in self.points]

    def median_mad(self) -> tuple[float, float]:
        """Median and median absolute deviation of the window (0, 0 when empty)."""
        full = len(self.points) == self.points.maxlen
        if full and self._at >= 0 and self._added - self._at < self._stride:
            return self._stats
        values = sorted(v for _, v in self.points)
        if not values:
            return 0.0, 0.0
        n = len(values)
        mid = values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2
        self._stats = (mid, median([abs(v - mid) for v in values]))
        self._at = self._added
        return self._stats

    def diff_noise(self) -> float:
        """Noise sigma of the window from point-to-point differences (MAD of the differences / sqrt 2): a
        steady trend does not inflate it. Recomputed on the same stride as `median_mad`."""
        full = len(self.points) == self.points.maxlen
        if full and self._noise_at >= 0 and self._added - self._noise_at < self._stride:
            return self._noise
        values = [v for _, v in self.points]
        diffs = [b - a for a, b in zip(values, values[1:], strict=False)]
        if diffs:
            mid = median(diffs)
            self._noise = MAD_TO_SIGMA * median([abs(d - mid) for d in diffs]) / math.sqrt(2)
        self._noise_at = self._added
        return self._noise

    def rewind(self, step: int) -> None:
        """Forget points at `step` and after."""
        while self.points and self.points[-1][0] >= step:
            self.points.pop()
        self._at = -1
        self._noise_at = -1


class Streak:
    """How many points in a row a condition has held, and the step where that run of points began."""

    __slots__ = ("count", "since")

    def __init__(self) -> None:
        self.count = 0
        self.since = 0

    def hit(self, step: int) -> int:
        """The condition holds at `step`: the length of the run so far."""
        if self.count == 0:
            self.since = step
        self.count += 1
        return self.count

    def reset(self) -> None:
        self.count = 0


def robust_z(value: float, mid: float, mad: float, floor: float) -> float:
    """How many robust sigmas `value` is above `mid`; `floor` keeps a flat window from dividing by zero."""
    sigma = max(MAD_TO_SIGMA * mad, floor, 1e-12)
    return (value - mid) / sigma


def fmt(value: float | None) -> str:
    """A number short enough for a one-line message (4 significant digits)."""
    if value is None:
        return "none"
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Inf" if value > 0 else "-Inf"
    return f"{value:.4g}"


def is_finite(value: float) -> bool:
    return not (math.isnan(value) or math.isinf(value))
