"""Alert episodes: one alert per episode, updated while it lasts, closed when its condition clears.

`AlertEvent` is what leaves the detector (see `collector.detect.engine` for the stable interface);
`Episodes` keeps the open ones of one run, applies verdicts to them, escalates, and hands out snapshots of
the episodes that changed since the last call. Pure bookkeeping: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from collector.core.severity import Severity
from collector.detect.base import Finding


@dataclass(slots=True)
class AlertEvent:
    """One state of one alert episode; the store upserts on (run, rule, metric, first_step)."""

    rule: str
    severity: Severity
    metric: str
    first_step: int
    last_step: int
    value: float | None
    message: str
    active: bool = True
    evidence: dict = field(default_factory=dict)
    run: str = ""

    def to_dict(self) -> dict:
        """A JSON-able dict (non-finite numbers, evidence included, as strings: JSON has no NaN)."""
        return {
            "run": self.run,
            "rule": self.rule,
            "severity": str(self.severity),
            "metric": self.metric,
            "first_step": self.first_step,
            "last_step": self.last_step,
            "value": _json_number(self.value),
            "message": self.message,
            "active": self.active,
            "evidence": _json_safe(self.evidence),
        }


def _json_number(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _json_safe(value: object) -> object:
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return _json_number(value)


@dataclass(slots=True)
class _Episode:
    event: AlertEvent
    hits: int = 1
    quiet: int = 0
    broken: bool = False  # a quiet point came between two of its points
    error_after: int | None = None
    warn_after: int | None = None
    peak: float | None = None  # highest value of a spike episode so far
    note: str = ""  # appended to every message of the episode (an escalation's reason)
    also: str = ""  # and the other metrics of the same incident


class Episodes:
    """The open episodes of one run, keyed by (rule, metric), and the events not yet handed out."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        # open episodes by (rule, metric); read-only outside this class (the engine checks membership)
        self.open_by_key: dict[tuple[str, str], _Episode] = {}
        self._closed_grad: dict[str, AlertEvent] = {}  # grad metric -> its last closed grad_spike episode
        self._closed: dict[tuple[str, str], AlertEvent] = {}  # (rule, metric) -> its last closed episode
        self._joined_hits: dict[tuple, int] = {}  # (head alert, joined rule and metric) -> findings joined
        self._dirty: dict[tuple[str, str, int], AlertEvent] = {}

    def is_open(self, key: tuple[str, str]) -> bool:
        return key in self.open_by_key

    def hit(self, key: tuple[str, str], finding: Finding, step: int) -> None:
        """The condition holds at `step`: open the episode, or update it (severity only ever rises)."""
        at = finding.at_step if finding.at_step is not None else step
        episode = self.open_by_key.get(key)
        if episode is None:
            first = finding.first_step if finding.first_step is not None else at
            event = AlertEvent(key[0], finding.severity, key[1], first, at, finding.value, finding.message,
                               True, dict(finding.evidence), self.run_id)  # fmt: skip
            episode = self.open_by_key[key] = _Episode(
                event, error_after=finding.error_after_points, warn_after=finding.warn_after_points
            )
            if finding.peak:
                _take_peak(episode, finding, at)
        else:
            event = episode.event
            episode.hits += 1
            episode.broken = episode.broken or episode.quiet > 0
            episode.quiet = 0
            event.last_step = max(event.last_step, at)
            if finding.peak:
                higher = episode.peak is None or (finding.value is not None and finding.value > episode.peak)
                if higher:
                    _take_peak(episode, finding, at)
                else:
                    # a lower point keeps the episode open; the peak stays what the alert reports
                    event.evidence["last_value"] = finding.value
            else:
                event.message = finding.message + episode.note + episode.also
                event.value = finding.value if episode.peak is None else episode.peak
                event.evidence = {**event.evidence, **finding.evidence}
            if finding.severity.rank > event.severity.rank:
                event.severity = finding.severity
            if finding.error_after_points is not None:
                episode.error_after = finding.error_after_points
            if finding.warn_after_points is not None:
                episode.warn_after = finding.warn_after_points
        if (
            episode.warn_after is not None
            and episode.hits >= episode.warn_after
            and event.severity == Severity.INFO
        ):
            event.severity = Severity.WARN
            event.evidence["escalated"] = f"sustained for {episode.hits} points"
        if (
            episode.error_after is not None
            and episode.hits >= episode.error_after
            and event.severity != Severity.ERROR
        ):
            event.severity = Severity.ERROR
            event.evidence["escalated"] = f"sustained for {episode.hits} points"
        event.evidence["points"] = episode.hits
        self._touch(event)

    def run_of(self, key: tuple[str, str], step: int) -> tuple[int, int, bool]:
        """What a finding of `key` at `step` makes of its episode: (first step, points with this one,
        whether they come in a row); a new episode's when none is open."""
        episode = self.open_by_key.get(key)
        if episode is None:
            return step, 1, True
        return episode.event.first_step, episode.hits + 1, not (episode.broken or episode.quiet > 0)

    def join_incident(self, key: tuple[str, str], finding: Finding, step: int) -> bool:
        """One root cause, one alert: a finding of `key`'s rule on another metric at the same step as an open
        episode of that rule (every metric NaN at one step; loss and grad norm stuck from the same point)
        joins that episode, which names every metric and keeps its first step, instead of opening its own
        (a more severe finding heads instead when that episode opened at this very step); a metric it names
        goes on joining it at later steps. False when there is none (or `key` has its own open episode)."""
        if key in self.open_by_key:
            return False
        rule, metric = key
        first = finding.first_step if finding.first_step is not None else step
        for (other_rule, other), episode in list(self.open_by_key.items()):
            event = episode.event
            named = metric in event.evidence.get("metrics", ())  # it joined or was folded in before
            if (
                other_rule != rule
                or other == metric
                or not (event.last_step == step or event.first_step == first or named)
            ):
                continue
            dirty_key = (event.rule, event.metric, event.first_step)
            if (
                finding.severity.rank > event.severity.rank
                and event.first_step == first
                and self._dirty.get(dirty_key) is event
            ):
                # the more severe metric heads the incident (a NaN loss over the grad norm the loss scaler
                # skipped at this step): the other episode, opened at this step and not handed out yet, folds
                # into this one; one that began earlier heads (NaN gradients since step 5, then a NaN
                # evaluation at 50: the trouble began at 5), below
                del self.open_by_key[(other_rule, other)], self._dirty[dirty_key]
                self.hit(key, finding, step)
                head = self.open_by_key[key]
                folded = [other, *[m for m in event.evidence.get("metrics", []) if m != other]]
                head.event.evidence["metrics"] = [metric, *folded]
                head.also = f" Same step, also: {', '.join(folded)}."
                head.event.message += head.also
                return True
            metrics = event.evidence.setdefault("metrics", [other])
            if metric not in metrics:
                metrics.append(metric)
                base = (
                    event.message[: len(event.message) - len(episode.also)] if episode.also else event.message
                )
                episode.also = f" Same step, also: {', '.join(metrics[1:])}."
                event.message = base + episode.also
            if finding.severity.rank > event.severity.rank:
                event.severity = finding.severity
            event.last_step = max(event.last_step, finding.at_step if finding.at_step is not None else step)
            self._touch(event)
            return True
        return False

    def join_related(
        self,
        key: tuple[str, str],
        finding: Finding,
        step: int,
        heads: tuple[str, ...],
        metric: str | None,
        horizon: int,
    ) -> Severity | None:
        """One root cause, one alert: a finding of `key` that follows, within `horizon` steps, an episode of one
        of the `heads` rules (on `metric`, or on any metric when None; open, or closed no longer ago than
        that) joins it: the head names this rule and metric too (`evidence.rules`, `evidence.metrics`), takes
        the finding's severity when higher (the finding's own escalation after points in a row counted), and
        reaches to its step. Returns that severity, or None when there is no such head (or `key` has its own
        open episode)."""
        if key in self.open_by_key:
            return None
        at = finding.at_step if finding.at_step is not None else step
        candidates = [(ep.event, ep) for k, ep in self.open_by_key.items() if k[0] in heads and k != key]
        candidates += [(e, None) for e in self._closed.values() if e.rule in heads]
        for event, episode in candidates:
            if metric is not None and event.metric != metric:
                continue
            if not event.first_step <= at or at - event.last_step > horizon:
                continue
            count_key = (event.rule, event.metric, event.first_step, key)
            hits = self._joined_hits[count_key] = self._joined_hits.get(count_key, 0) + 1
            severity = finding.severity
            if finding.warn_after_points is not None and hits >= finding.warn_after_points:
                severity = max(severity, Severity.WARN, key=lambda s: s.rank)
            if finding.error_after_points is not None and hits >= finding.error_after_points:
                severity = Severity.ERROR
            rules = event.evidence.setdefault("rules", [event.rule])
            metrics = event.evidence.setdefault("metrics", [event.metric])
            if key[0] not in rules or key[1] not in metrics:
                rules.extend([key[0]] if key[0] not in rules else [])
                metrics.extend([key[1]] if key[1] not in metrics else [])
                also = (
                    f" Same incident: {key[0]} on {key[1]} at step {at}: {_first_sentence(finding.message)}"
                )
                event.message += also
                if episode is not None:
                    episode.also += also
            if severity.rank > event.severity.rank:
                event.severity = severity
                event.evidence["escalated"] = f"{key[0]} on {key[1]} at step {at}"
            event.last_step = max(event.last_step, at)
            self._touch(event)
            return severity
        return None

    def adopt_same_step(self, key: tuple[str, str], finding: Finding, step: int, rule: str) -> bool:
        """A finding of `key` at the step where an episode of `rule` opened in this same batch (not handed
        out yet: the loss logged before the grad norm of the step whose update blew up) becomes the head of
        one incident: that episode folds into a new episode of `key`, which names both. False when there is
        no such episode (then `key` opens on its own)."""
        if key in self.open_by_key:
            return False
        at = finding.at_step if finding.at_step is not None else step
        for other_key, episode in list(self.open_by_key.items()):
            event = episode.event
            dirty_key = (event.rule, event.metric, event.first_step)
            if other_key[0] != rule or event.first_step != at or self._dirty.get(dirty_key) is not event:
                continue
            del self.open_by_key[other_key], self._dirty[dirty_key]
            self.hit(key, finding, step)
            head = self.open_by_key[key]
            also = f" Same incident: {rule} on {other_key[1]} at step {at}: {_first_sentence(event.message)}"
            head.event.evidence["rules"] = [key[0], rule]
            head.event.evidence["metrics"] = [key[1], other_key[1]]
            head.also += also
            head.event.message += also
            if event.severity.rank > head.event.severity.rank:
                head.event.severity = event.severity
            count_key = (key[0], key[1], head.event.first_step, other_key)
            self._joined_hits[count_key] = episode.hits
            return True
        return False

    def miss(self, key: tuple[str, str], clear_after: int) -> None:
        """The condition does not hold at this point: an open episode closes after `clear_after` of these."""
        episode = self.open_by_key.get(key)
        if episode is not None:
            episode.quiet += 1
            if episode.quiet >= clear_after:
                self.close(key)

    def close(self, key: tuple[str, str]) -> None:
        """End an open episode (its last event has active=False); a no-op when none is open."""
        episode = self.open_by_key.pop(key, None)
        if episode is None:
            return
        episode.event.active = False
        if key[0] == "grad_spike":
            self._closed_grad[key[1]] = episode.event
        self._closed[key] = episode.event
        self._touch(episode.event)

    def escalate_grad_spikes(self, step: int, loss_metric: str, horizon: int) -> None:
        """A gradient spike followed (within `horizon` steps) by a loss jump is an error: the update damaged
        the weights."""
        for (rule, _), episode in self.open_by_key.items():
            if rule == "grad_spike":
                self._mark_error(episode.event, loss_metric, step, episode)
        for event in self._closed_grad.values():
            if 0 <= step - event.last_step <= horizon:
                self._mark_error(event, loss_metric, step)

    def resume(self, alerts: list[dict]) -> None:
        """Reattach stored open alerts (dicts with rule, severity, metric, first_step, last_step, value,
        message, evidence) so that findings continue them instead of opening second ones."""
        for alert in alerts:
            key = (str(alert["rule"]), str(alert.get("metric") or ""))
            if key in self.open_by_key:
                continue
            evidence = alert.get("evidence") if isinstance(alert.get("evidence"), dict) else {}
            event = AlertEvent(key[0], Severity(str(alert.get("severity", "warn"))), key[1], int(alert["first_step"]),
                               int(alert.get("last_step") or alert["first_step"]), alert.get("value"),
                               str(alert.get("message", "")), True, dict(evidence), self.run_id)  # fmt: skip
            peak = evidence.get("peak")
            self.open_by_key[key] = _Episode(
                event,
                hits=int(evidence.get("points", 1) or 1),
                peak=float(peak) if isinstance(peak, int | float) and not isinstance(peak, bool) else None,
            )

    def open_events(self) -> list[AlertEvent]:
        return [_snapshot(ep.event) for ep in self.open_by_key.values()]

    def flush(self) -> list[AlertEvent]:
        """Snapshots of the episodes changed since the last flush, one per episode."""
        events = [_snapshot(e) for e in self._dirty.values()]
        self._dirty = {}
        return events

    def _mark_error(
        self, event: AlertEvent, loss_metric: str, step: int, episode: _Episode | None = None
    ) -> None:
        if event.severity != Severity.ERROR:
            event.severity = Severity.ERROR
            event.evidence["escalated"] = f"followed by a {loss_metric} jump at step {step}"
            note = f" The loss jumped right after (step {step}): the spike damaged the weights."
            event.message += note
            if episode is not None:
                episode.note += note  # a higher peak later rewrites the message: keep the reason
            self._touch(event)

    def _touch(self, event: AlertEvent) -> None:
        self._dirty[(event.rule, event.metric, event.first_step)] = event


def _first_sentence(message: str) -> str:
    """A finding's first sentence (what happened), without its causes and advice."""
    end = message.find(". ")
    return message if end < 0 else message[: end + 1]


def _take_peak(episode: _Episode, finding: Finding, step: int) -> None:
    """A spike episode's new highest point: its value, message and evidence become the alert's."""
    event = episode.event
    episode.peak = finding.value
    event.value = finding.value
    event.message = finding.message + episode.note + episode.also
    event.evidence = {**event.evidence, **finding.evidence, "peak": finding.value, "peak_step": step}
    event.evidence.pop("last_value", None)


def _snapshot(event: AlertEvent) -> AlertEvent:
    # the episode objects keep changing; an event handed out must not
    return replace(event, evidence=dict(event.evidence))
