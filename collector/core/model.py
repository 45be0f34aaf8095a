"""The narrow shapes every part of the collector agrees on.

Parsers produce `ParseResult`s of columnar `Points`; the store keeps them; detectors read them back as
`Series`. Each input format is one `Format`. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from math import isfinite

# a step before (after) every step a run logs: "no step yet" / "no upper bound" in comparisons and queries
# (steps are 64-bit; 2**62 leaves room to add to it without overflow)
BEFORE_ALL_STEPS = -(2**62)
AFTER_ALL_STEPS = 2**62
# float32's relative spacing: a float64 rounded to float32 is off by at most half of it
FLOAT32_EPS = 2.0**-23


def same_point(seen: float, value: float) -> bool:
    """Whether two values logged for one (run, metric, step) are one point: equal, both NaN, or equal at
    float32 precision (TensorBoard keeps float32, trainer_state.json float64: an HF run's two files give one
    loss in different last digits, which is no rewrite). The store's merge asks the same (`store.points`)."""
    if seen == value or (seen != seen and value != value):
        return True
    scale = max(abs(seen), abs(value))
    return isfinite(scale) and abs(seen - value) <= FLOAT32_EPS * scale


@dataclass(slots=True)
class Points:
    """A columnar batch of points: four lists of one length.

    Columnar because a backfill moves millions of points and one Python object per point costs more than
    the parsing itself. `wall_time` is seconds since the epoch, or None when the file does not say.
    """

    step: list[int] = field(default_factory=list)
    metric: list[str] = field(default_factory=list)
    value: list[float] = field(default_factory=list)
    wall_time: list[float | None] = field(default_factory=list)

    def add(self, step: int, metric: str, value: float, wall_time: float | None = None) -> None:
        self.step.append(step)
        self.metric.append(metric)
        self.value.append(value)
        self.wall_time.append(wall_time)

    def extend(self, other: Points) -> None:
        self.step.extend(other.step)
        self.metric.extend(other.metric)
        self.value.extend(other.value)
        self.wall_time.extend(other.wall_time)

    def __len__(self) -> int:
        return len(self.step)


@dataclass(slots=True)
class BadLine:
    """A line (or record) that could not be read: quarantined, never fatal."""

    line: int  # 1-based line number in the file (record number for binary formats)
    reason: str
    text: str  # the offending text, cut to a few hundred characters


@dataclass(slots=True)
class ParseResult:
    """What a parser returns for the bytes it was given.

    `consumed` is how many bytes of the input were fully handled (complete records, good or bad); the
    caller stores `offset + consumed` and hands the rest back next time. `lines` is how many complete
    lines (records) that covers, so line numbers stay right across calls. `info` carries whole-file facts
    (status, config, best checkpoint, checkpoint marker) for the formats that have them. `state` is what
    the parser needs handed back as `state=` on its next read of the same file (the CSV header in force),
    JSON-serialisable; None when it needs nothing. `skipped` counts values left out because they are not
    numbers, by reason (`"a string"`): no line is bad for them, and the caller says how many.
    """

    points: Points = field(default_factory=Points)
    consumed: int = 0
    lines: int = 0
    bad: list[BadLine] = field(default_factory=list)
    info: dict = field(default_factory=dict)
    state: object = None
    skipped: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RunInfo:
    """What a file's `info` says about its run, in the store's terms (None: the file does not say)."""

    status: str | None = None  # running / completed / failed, as the trainer wrote it
    # The end a log itself shows (the HF Trainer's summary record: "completed"): the run's status only while
    # nothing else gave one, as a trainer_state's global_step at max_steps is; a status file's word wins.
    ended: str | None = None
    status_info: dict | None = None  # the whole status document (progress, pid, host, error)
    total_steps: int | None = None
    config: dict | None = None  # the training config (run.json) or the trainer's run facts
    checkpoint_marker: int | None = None  # the step of the newest complete checkpoint
    # A piece of the configuration, merged into what is stored (one MLflow param per file).
    config_part: dict | None = None


@dataclass(frozen=True, slots=True)
class Format:
    """One input format, declared once by its module in `collector/formats/` (see that package's docstring).

    `names`: file name patterns (fnmatch; `*.ext` matches the extension in any case; a pattern with `/`
    matches the end of the path) that are this format by name alone. `sniffed`: patterns whose files are
    this format only when `sniff(head)` is true of their first 64 KiB. `parse(data, first_line, *, path,
    state)` is pure. `whole_document`: each change replaces the file (re-read from offset 0, points merged
    by step). `role`: "metrics" (points) or "meta" (run facts only). `run_info(info)` reads the run-level
    facts from a parse's `info`; None for formats whose info says nothing about the run. `lives`: name
    patterns of a log that the trainer starts as a new file each time it starts or resumes: such files in
    one folder are one run's lives (read oldest first), never several runs gathered side by side.
    """

    name: str
    parse: Callable[..., ParseResult]
    names: tuple[str, ...] = ()
    sniffed: tuple[str, ...] = ()
    sniff: Callable[[bytes], bool] | None = None
    whole_document: bool = False
    role: str = "metrics"
    run_info: Callable[[dict], RunInfo] | None = None
    # A console or export copy of metrics (a console log, a CSV): read only when its run has no other
    # metrics file, whose values it would repeat.
    copy: bool = False
    # Records are text lines ending with a newline, consumed only up to one: a line longer than 64 MiB is
    # quarantined once, whole. False for binary framings (TensorBoard, W&B records).
    lines: bool = True
    lives: tuple[str, ...] = ()
