"""What became of a change a person asked, as the API answers it and the CLI and the dashboard say it (one
sentence, `said`): a run's stop (`StopState`, `GET /api/runs/{run}/stop` and the run detail's `stop`) and, on a
team's lake, an incident's ack or resolve (`AlertChangeState`, its `change`), which the collector that owns
the run carries out at its next batch or refuses, saying why. Imports pydantic only (through `answer`): the
app reads these through `collector.api.models`.
"""

from __future__ import annotations

from collector.api.answer import Answer


class StopState(Answer):
    """A run's last stop request and what became of it (`GET /api/runs/{run}/stop`, the run detail's `stop`).
    `state`: `asked` (through a team's lake; the collector that owns the run has not carried it out yet),
    `written` (the stop file is there), `already_asked` (a request was already there: it stands) or `refused`
    (`outcome` says why)."""

    state: str
    asked_at: float | None = None
    by: str | None = None  # person, rule
    reason: str | None = None
    done_at: float | None = None  # when the owning collector wrote or refused it (team)
    outcome: str | None = None  # the owning collector's word (team), or why no stop can be written
    collector: str | None = None  # team: the collector that owns the run, which writes or refuses it
    collector_live: bool | None = None  # team: whether that collector published in the last 30 s
    path: str | None = None  # the stop file (in team mode on the owning collector's machine)
    alert_id: int | None = None  # by a rule: the alert that asked

    def said(self, now: float) -> str:
        """The state in plain words, as the CLI and the dashboard say it (`now`: time.time())."""
        asked = "stop asked" + (f" {ago(now - self.asked_at)}" if self.asked_at is not None else "")
        asked += (f" by {self.by}" if self.by else "") + (f" ({self.reason})" if self.reason else "")
        owner = f"collector {self.collector}" if self.collector else "runwatch"
        later = f" {seconds(self.done_at - self.asked_at)} later" if self.done_at and self.asked_at else ""
        if self.state == "asked":
            if self.collector_live is False:
                return (
                    f"{asked}; not yet written: {owner} is not running (it writes the stop file once it runs)"
                )
            return f"{asked}; not yet written: {owner} writes the stop file at its next batch"
        if self.state == "written":
            return (
                f"{asked}; written by {owner}{later}" if self.collector else f"{asked}; written: {self.path}"
            )
        if self.state == "already_asked":
            return f"{asked}; not written again by {owner}{later}: a request was already there, and it stands"
        if self.asked_at is None and self.by is None:  # nobody asked: no stop can be written there
            return f"stop refused: {self.outcome}"
        return f"{asked}; refused by {owner}{later}: {self.outcome}"


def seconds(span: float) -> str:
    """A span of time as people say it: `12 s`, `3 min`, `2 h`, `4 d`."""
    span = max(0.0, span)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if span >= size:
            return f"{span // size:.0f} {unit}"
    return f"{span:.0f} s"


def ago(span: float) -> str:
    return f"{seconds(span)} ago"


class AlertChangeState(Answer):
    """An ack or resolve asked through a team's lake and what became of it (an incident's `change`): the
    collector that owns the run applies it at its next batch, or refuses it (`outcome` says why)."""

    state: str  # the state asked: acked, resolved
    asked_at: float
    done_at: float | None = None
    outcome: str | None = None  # the state set, or why it was not
    collector: str | None = None
    collector_live: bool | None = None  # whether that collector published in the last 30 s

    def said(self, now: float) -> str:
        """The change in plain words, as the CLI and the dashboard say it (`now`: time.time())."""
        verb = {"acked": "acknowledge", "resolved": "resolve"}.get(self.state, self.state)
        asked, owner = f"{verb} asked {ago(now - self.asked_at)}", f"collector {self.collector}"
        if self.done_at is None:
            if self.collector_live is False:
                return f"{asked}; not yet applied: {owner} is not running (it applies it once it runs)"
            return f"{asked}; not yet applied: {owner} applies it at its next batch"
        later = f"{seconds(self.done_at - self.asked_at)} later"
        if self.outcome == self.state:
            return f"{asked}; applied by {owner} {later}"
        return f"{asked}; refused by {owner} {later}: {self.outcome}"
