"""Screens: what lets the backlog path (`collector.detect.backlog`) skip the points where a rule cannot fire.

A screen belongs to one rule class, which declares it (`Rule.screen`) and keeps it beside itself in the rule's
own module; its property test sits with the rule's tests (`tests/collector/detect/screen_check.py` walks a
series through the rule as the backlog path would). This module holds what screens share: the protocol
(`Screen`, `ScreenContext`, `screen_of`) and the numpy helpers more than one screen uses (medians as
`statistics.median` takes them, the robust window's recomputation schedule). A screen answers three things
about one rule object, over numpy arrays of the finite points (steps, values scaled as the engine scales them)
that would be fed to it next:

- `ready(rule, ctx) -> bool`: whether the rule's state lets quiet points be taken in bulk at all (a full
  baseline window, no episode under way inside the rule...). Not ready: the next point is fed in full.
- `quiet(rule, steps, values, ctx) -> k`: pure (changes nothing): the first `k` points surely give a quiet
  verdict (None or HOLD, with no state that bulk-taking could not reproduce); point `k` may fire, and the
  backlog path feeds it to the rule, in file order, with the run's facts as they stand there.
  Conservative by design: a screen may call a quiet point hot (it is then fed one by one, which costs time),
  never a hot point quiet (that would lose a finding: the rule's own screen test feeds every point it calls
  quiet, and tests/collector/detect/test_backlog.py compares every episode with the incremental engine's).
- `between(rule, steps, values, ctx) -> k` (screens with `holds_between`): while the rule's episode is open,
  how many leading points surely HOLD (a None would count towards closing the episode).
- `advance(rule, steps, values, ctx)`: take points `quiet` called quiet, leaving the rule exactly as feeding
  them one by one would have.

A rule class without a screen is fed every point in full by the backlog path: correct, only slower.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from collector.core.facts import RunFacts
from collector.detect.base import Window, median_of_sorted


@dataclass
class ScreenContext:
    """What screens may read beyond the rule: the run's facts, and every step that may be excused as a save or
    evaluation step anywhere in the backlog (a superset of what the facts will know at any of its points)."""

    facts: RunFacts
    excused: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))


class Screen:
    """The default screen: every point may fire (see the module docstring for the protocol)."""

    # whether `between` may say more than 0: while the rule's episode is open, a verdict of None closes it in
    # time, so only points that surely HOLD may be taken
    holds_between = False

    def between(self, rule, steps: np.ndarray, values: np.ndarray, ctx: ScreenContext) -> int:
        """How many leading points surely give HOLD (pure)."""
        return 0

    def ready(self, rule, ctx: ScreenContext) -> bool:
        return True

    def quiet(self, rule, steps: np.ndarray, values: np.ndarray, ctx: ScreenContext) -> int:
        return 0

    def advance(self, rule, steps: np.ndarray, values: np.ndarray, ctx: ScreenContext) -> None:
        raise NotImplementedError


def screen_of(rule) -> Screen | None:
    """The screen its class declares (`Rule.screen`); None: the rule is fed every point in full."""
    return getattr(type(rule), "screen", None)


def first(hot: np.ndarray) -> int:
    """Index of the first True (len when none)."""
    at = int(np.argmax(hot)) if len(hot) else 0
    return at if len(hot) and hot[at] else len(hot)


def floats(values) -> np.ndarray:
    return np.fromiter(values, dtype=np.float64, count=len(values))


def row_medians(rows: np.ndarray) -> np.ndarray:
    """The median of each row, exactly as `statistics.median` gives it (the middle value, or the two middle
    values' sum halved)."""
    k = rows.shape[1]
    half = k // 2
    ordered = np.partition(rows, [half] if k % 2 else [half - 1, half], axis=1)
    return ordered[:, half] if k % 2 else (ordered[:, half - 1] + ordered[:, half]) / 2


def block_medians(arr: np.ndarray, ends: np.ndarray, k: int) -> np.ndarray:
    """Median of arr[e - k : e] for each end e."""
    return row_medians(sliding_window_view(arr, k)[ends - k])


# ----- the robust window's recomputation schedule (collector.detect.base.Window) -----


def _first_due(added: int, at: int, stride: int) -> int:
    """Index of the first of the coming calls that recomputes, for a window that stays full."""
    return 0 if at < 0 else max(0, stride - (added - at))


def scheduled_medians(window: Window, values: np.ndarray) -> np.ndarray:
    """The median `Window.median()` returns before each of `values` is added, one call per value, the window
    full throughout (every value added: the points are quiet)."""
    size, stride, n = window.vals.maxlen, window._stride, len(values)
    j0 = _first_due(window._added, window._at, stride)
    mids = np.full(n, window._mid)
    if j0 < n:
        arr = np.concatenate([floats(window.vals), values])
        meds = row_medians(sliding_window_view(arr, size)[np.arange(j0, n, stride)])
        mids[j0:] = meds[(np.arange(j0, n) - j0) // stride]
    return mids


def extend_window(window: Window, steps: np.ndarray, values: np.ndarray, median: bool, noise: bool) -> None:
    """Add quiet points to a full window as one `median()` (or `noise_due()`) call then one `add` each would."""
    size, stride, n = window.vals.maxlen, window._stride, len(values)
    if not n:
        return
    arr = None
    for kind in ("median", "noise") if median and noise else ("median",) if median else ("noise",):
        at = window._at if kind == "median" else window._noise_at
        j0 = _first_due(window._added, at, stride)
        if j0 >= n:
            continue
        last = j0 + stride * ((n - 1 - j0) // stride)
        if arr is None:
            arr = np.concatenate([floats(window.vals), values])
        before = arr[last : last + size].tolist()  # the window as the call at `last` saw it
        if kind == "median":
            ordered = sorted(before)
            window._mid, window._mad, window._frozen = median_of_sorted(ordered), None, ordered
            window._at = window._added + last
        else:
            if size > 1:
                window._noise_frozen, window._noise = before, None
            window._noise_at = window._added + last
    window.vals.extend(values[-size:].tolist())
    window.steps.extend(steps[-size:].tolist())
    if window._sorted is not None:
        window._sorted = sorted(window.vals)
    window._added += n
