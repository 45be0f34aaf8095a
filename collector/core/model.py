"""The narrow shapes every part of the collector agrees on.

Parsers produce `ParseResult`s of columnar `Points`; the store keeps them; detectors read them back as
`Series`. Nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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
    (status, config, best checkpoint, checkpoint marker) for the formats that have them.
    """

    points: Points = field(default_factory=Points)
    consumed: int = 0
    lines: int = 0
    bad: list[BadLine] = field(default_factory=list)
    info: dict = field(default_factory=dict)
    # True for whole-document formats (trainer_state.json, status.json, run.json): each read replaces the
    # previous one, so the caller re-reads from offset 0 on every change instead of appending.
    whole_file: bool = False
