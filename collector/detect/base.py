"""What every rule shares: the `Rule` contract, its verdict type, a bounded robust window, and number
formatting for messages.

A rule (`Rule`) is a small object fed one finite point at a time (`feed(step, value, facts)`, `facts` the
run's `RunFacts`); it answers with a `Finding` (the condition holds at this point), `None` (the condition
does not hold: counts towards closing an open episode) or `HOLD` (no verdict here: too little history, an
excluded step). It keeps bounded state and does no I/O. `rewind(step)` forgets what it saw at `step` and
later (a rewritten or resumed file).

Everything else the code knows about a rule is declared on its class (`Rule`'s class variables: the roles
it reads, its settings, its severities, what its episodes mean for a checkpoint and for the advice, the
action it calls for, what a chart draws for it), and the class is listed once in `collector.detect.registry`;
other code asks the registry, never a table of rule names.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any, ClassVar

from collector.core.facts import RunFacts
from collector.core.severity import Severity


class Hold(Enum):
    """The one "no verdict at this point" value: neither opens nor clears an episode."""

    HOLD = "hold"


HOLD = Hold.HOLD

MAD_TO_SIGMA = 1.4826  # scales the median absolute deviation to a normal sigma


@dataclass(slots=True)
class Finding:
    """The condition of a rule holds at one point."""

    severity: Severity
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


Verdict = Finding | Hold | None


class Action(StrEnum):
    """What an error (or a checkpoint-naming) episode of a rule calls for; `collector.advice.action` words it."""

    GO_BACK = "go_back"  # resume from the last good checkpoint before the episode (the default)
    REPLAY_FROM_BEFORE = "replay_from_before"  # a burst of bad updates: replay from well before it
    SKIP_BATCHES = "skip_batches"  # ...and skip its batches (bad batches cause loss and gradient spikes)
    KEEP_CHECKPOINT = "keep_checkpoint"  # the message names a checkpoint to keep: the advice's choice agrees
    NAME_STEP = (
        "name_step"  # the message points near a step (a best reward, a peak): the action relates to it
    )


class Rule:
    """One detector on one metric (see the module docstring); its class declares what the rule is.

    A run-level rule (`nonfinite`, `stalled`, `run_failed`, judged by the engine itself) declares the same
    class variables with no `roles`: it is never fed points.
    """

    rule_id: ClassVar[str]  # the alert's rule name, and its `[rules.NAME]` section in runwatch.toml
    roles: ClassVar[tuple[str, ...]] = ()  # the metric roles (`collector.core.roles`) whose metrics it reads
    settings: ClassVar[type]  # its frozen settings dataclass: thresholds with their defaults, `enabled` first
    severities: ClassVar[tuple[Severity, ...]]  # the severities its episodes may reach, lowest first
    unsafe_checkpoint: ClassVar[bool] = (
        False  # a checkpoint saved inside one of its episodes is not one to keep
    )
    about_weights: ClassVar[bool] = (
        True  # its errors judge the weights saved meanwhile (not a slow step, ...)
    )
    action: ClassVar[Action] = Action.GO_BACK
    meaning: ClassVar[str] = ""  # what its error episode says about the weights saved during it
    # its backlog screen (a `collector.detect.screening.Screen`, kept beside the rule: which points surely give a
    # quiet verdict, taken in bulk); None: the backlog path feeds it every point (correct, slower)
    screen: ClassVar[Any] = None
    # One alert (the engine, `collector.detect.episodes`): a finding within a few logged points after an
    # episode of one of `follows` (on the same metric when `follows_same_metric`) joins that episode; with
    # `one_alert_across_metrics` its findings on several metrics from one step are one alert.
    follows: ClassVar[tuple[str, ...]] = ()
    follows_same_metric: ClassVar[bool] = False
    one_alert_across_metrics: ClassVar[bool] = False
    # One incident (`collector.detect.incidents`): `recurs`: its episodes come back (spikes, NaN), all of them
    # on one metric are one incident of the run; `caused_by`: rules whose incident explains its alerts
    # (inhibition); `keep_firing_points`: logged points after which its return is a new incident;
    # `dated_late_points`: how many logged points its first step can trail the trouble it names (a rule that
    # waits for a rolling median to fall): a consequence that began up to that much earlier is still its own;
    # `one_incident_across_metrics`: its alert on another metric while its incident is firing joins it (one
    # trouble read through several metrics: a reward at its floor, then its spread at zero).
    recurs: ClassVar[bool] = False
    caused_by: ClassVar[tuple[str, ...]] = ()
    keep_firing_points: ClassVar[int] = 20
    dated_late_points: ClassVar[int] = 0
    one_incident_across_metrics: ClassVar[bool] = False
    clear_after: int  # verdicts of None in a row that close an open episode

    @classmethod
    def decorations(cls, settings: Any) -> dict[str, dict]:
        """Role -> what a chart of that role draws for this rule from its resolved `settings` (`normal_band`
        [low, high], `warning_line`); most rules draw nothing."""
        return {}

    def feed(self, step: int, value: float, facts: RunFacts) -> Verdict:
        raise NotImplementedError

    def rewind(self, step: int) -> None:
        raise NotImplementedError


class Window:
    """The last `size` (step, value) points of one metric, with robust statistics over them.

    The median and MAD are recomputed every `size // 10` added points once the window is full (and at every
    point before): a baseline that is a few points stale judges a spike the same way, at a tenth of the cost.
    The schedule is fixed by the calls to `median()` (one per judged point); what is expensive is deferred:
    at a scheduled moment the window's values are copied, and the MAD (or the difference noise) is worked
    out from that copy only when a rule asks for it, which it does only for a point that could be a spike.
    With `keep_sorted` the values are also kept in order as they come and go (a sorted insert and delete per
    point, in C), so the median is read directly and the deviations sort in linear time.
    """

    __slots__ = (
        "steps", "vals", "_sorted", "_stride", "_added", "_at", "_mid", "_mad", "_frozen",
        "_noise_at", "_noise", "_noise_frozen",
    )  # fmt: skip

    def __init__(self, size: int, keep_sorted: bool = True) -> None:
        self.steps: deque[int] = deque(maxlen=max(1, size))
        self.vals: deque[float] = deque(maxlen=max(1, size))
        self._sorted: list[float] | None = [] if keep_sorted else None
        self._stride = max(1, size // 10)
        self._added = 0
        self._at = -1
        self._mid = 0.0
        self._mad: float | None = 0.0
        self._frozen: list[float] = []  # sorted values at the last scheduled recomputation
        self._noise_at = -1
        self._noise: float | None = 0.0
        self._noise_frozen: list[float] = []

    def __len__(self) -> int:
        return len(self.vals)

    def add(self, step: int, value: float) -> None:
        vals, ordered = self.vals, self._sorted
        if ordered is not None:
            if len(vals) == vals.maxlen:
                del ordered[bisect_left(ordered, vals[0])]
            insort(ordered, value)
        vals.append(value)
        self.steps.append(step)
        self._added += 1

    def replace(self, points: Iterable[tuple[int, float]]) -> None:
        """Start over from these (step, value) points."""
        self.steps.clear()
        self.vals.clear()
        if self._sorted is not None:
            self._sorted.clear()
        for step, value in points:
            self.add(step, value)
        self._at = self._noise_at = -1

    def values(self) -> list[float]:
        return list(self.vals)

    def median(self) -> float:
        """The window's median as of its last scheduled recomputation (0 when empty); call once per judged
        point: the calls set the schedule."""
        vals = self.vals
        if len(vals) == vals.maxlen and self._at >= 0 and self._added - self._at < self._stride:
            return self._mid
        ordered = self._sorted if self._sorted is not None else sorted(vals)
        if not ordered:
            self._mid, self._mad, self._frozen = 0.0, 0.0, []
        else:
            self._mid, self._mad, self._frozen = median_of_sorted(ordered), None, list(ordered)
        self._at = self._added
        return self._mid

    def mad(self) -> float:
        """Median absolute deviation around `median()`, over the same values (call `median()` first)."""
        if self._mad is None:
            self._mad = median_of_sorted(deviations_sorted(self._frozen, self._mid))
        return self._mad

    def quantile(self, q: float) -> float:
        """The value below which a fraction `q` of the window lies now (nearest rank; 0 when empty)."""
        ordered = self._sorted if self._sorted is not None else sorted(self.vals)
        if not ordered:
            return 0.0
        return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]

    def diff_noise(self) -> float:
        """Noise sigma of the window from point-to-point differences (MAD of the differences / sqrt 2): a
        steady trend does not inflate it. Scheduled like `median()`: call `noise_due()` once per judged
        point, and this only when the point needs it."""
        if self._noise is None:
            values = self._noise_frozen
            diffs = sorted([b - a for a, b in zip(values, values[1:], strict=False)])
            mid = median_of_sorted(diffs)
            self._noise = MAD_TO_SIGMA * median_of_sorted(deviations_sorted(diffs, mid)) / math.sqrt(2)
        return self._noise

    def noise_due(self) -> None:
        """Advance `diff_noise`'s schedule by one judged point (copies the values when a recomputation is
        due; the noise itself is worked out on demand)."""
        vals = self.vals
        if len(vals) == vals.maxlen and self._noise_at >= 0 and self._added - self._noise_at < self._stride:
            return
        if len(vals) > 1:
            self._noise_frozen, self._noise = list(vals), None
        self._noise_at = self._added

    def rewind(self, step: int) -> None:
        """Forget points at `step` and after."""
        steps, vals, ordered = self.steps, self.vals, self._sorted
        while steps and steps[-1] >= step:
            steps.pop()
            value = vals.pop()
            if ordered is not None:
                del ordered[bisect_left(ordered, value)]
        self._at = -1
        self._noise_at = -1


def median_of_sorted(values: list[float]) -> float:
    """The median of an already sorted, non-empty list (what `statistics.median` gives, without its sort)."""
    n = len(values)
    half = n // 2
    return values[half] if n % 2 else (values[half - 1] + values[half]) / 2


def deviations_sorted(values: list[float], mid: float) -> list[float]:
    """|v - mid| for every v of a sorted list, in order: the points below `mid` give a falling run and those
    above a rising one, so this is two runs merged (linear time), not a full sort."""
    cut = bisect_left(values, mid)
    below = [mid - v for v in values[:cut]]  # mid - v == abs(v - mid) exactly for v < mid
    below.reverse()
    return sorted(below + [v - mid for v in values[cut:]])


def eval_noise(values: list[float], fewest: int = 3) -> float:
    """The evaluations' own noise: the sigma of one evaluation's chance error (an eval set is small: its score
    wobbles), from how far each evaluation strays from the line through its two neighbours (1.21 x their median
    distance is the sigma of independent noise; a steady trend adds nothing); 0.0 with fewer than `fewest`
    (at least three) evaluations. The one noise figure of an evaluation series: the validation rules' margins and the checkpoint
    advice's ties both use it (and print it with `noise_text`)."""
    strays = sorted(abs(b - (a + c) / 2) for a, b, c in zip(values, values[1:], values[2:], strict=False))
    return 1.21 * strays[len(strays) // 2] if strays and len(values) >= fewest else 0.0


def noise_text(noise: float) -> str:
    """A noise figure as it is printed: two significant digits (0.0048), no false precision."""
    return f"{noise:.2g}"


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


def checked_table(values: object, known: tuple[str, ...], where: str, error: type[Exception]) -> dict:
    """A settings table from a TOML file, checked to be a table holding only `known` keys; `error` names `where`."""
    if not isinstance(values, dict):
        raise error(f"{where} must be a table of key = value")
    unknown = set(values) - set(known)
    if unknown:
        raise error(f"{where}: unknown key {sorted(unknown)[0]!r}; known keys: {', '.join(known)}")
    return values
