"""Incidents: what a person reads. Alerts (episodes) are the evidence; an incident groups the alerts of one
trouble of one run (Alertmanager's grouping and inhibition, PagerDuty's incidents, Prometheus' keep-firing).

Stable interface:

- `incidents(alerts, runs=None) -> list[Incident]`: pure and deterministic (no clock, no I/O): it depends only
  on the alerts' run, rule, metric, steps, severity, value and state, and on each run's log interval and
  last step (`RunSteps`). Every path that stores the same alerts (ingest, serve, a restarted serve, check,
  live or backlog judging) therefore shows the same incidents. `alerts` are dicts as the store lists them
  (`id`, `run`, `rule`, `severity`, `metric`, `first_step`, `last_step`, `state`, `value`, `message`,
  `evidence`); the result is sorted by run, then first step.
- `run_steps(runs, stats)`: each run's `RunSteps` from the store's rows (`collector.runs.incidents` reads
  them and the alerts: the API, the CLI, the sinks and the stop rules ask there).
- `told(incidents)` and `changes(before, incidents) -> [(incident, event)]`: the notifications (one per
  incident and its escalations, re-opening or resolution) the sinks get.

How alerts group (each rule declares its part as class variables, see `collector.detect.base.Rule`):

- one trouble, one incident: alerts of one rule on one metric are one incident while they come back within
  the rule's keep-firing window (`keep_firing_points` logged points after the incident's last step); a rule
  whose episodes recur (`recurs`: spikes, NaN) keeps one incident per metric for the whole run, with the
  count, the steps and the worst value;
- inhibition: an alert of a rule whose cause is another rule (`caused_by`: a loss spike after a gradient
  spike, KL spikes during a KL climb, zero gradients of an RL run whose reward collapsed) joins that rule's
  incident when the cause's incident began at or before it and was firing within the window; the incident
  names the cause first. A cause whose first step trails the trouble (`dated_late_points`: a rolling median
  that crosses its line late) takes in the incident of a consequence that began up to that many logged
  points before it and is still firing: the incident keeps its id and first step, and names the cause first;
- one trouble through several metrics: an alert of a rule that declares `one_incident_across_metrics` joins
  that rule's incident on another metric when it began at or before it and is firing within the window;
- an incident's severity is its worst alert's (notice -> warning -> error, each step in `escalations`); it is
  `open` while one of its alerts is open, `acked` once a person acked every open one, `resolved` when every
  alert resolved and the run went on past the keep-firing window (or ended).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from collector.core.severity import Severity
from collector.detect import registry
from collector.detect.base import Rule

__all__ = [
    "Grouping", "Incident", "RunSteps", "changes", "grouping", "incidents", "run_steps", "told",
]  # fmt: skip


@dataclass(frozen=True, slots=True)
class RunSteps:
    """What grouping needs of a run beyond its alerts: steps between logged points, the last step, and
    whether the run is still going (a resolved incident of a running run waits out its keep-firing window)."""

    log_interval: int = 1
    last_step: int | None = None
    running: bool = True


@dataclass(slots=True)
class Incident:
    """One trouble of one run, with its alerts as evidence. `id` is its first alert's id."""

    id: int
    run: str
    rule: str  # the cause: the first rule of `rules`
    metric: str
    severity: str
    state: str  # open, acked, resolved
    first_step: int
    last_step: int
    message: str  # the most severe alert's message (the earliest among equals)
    rules: list[str] = field(default_factory=list)  # the cause first, then the troubles it explains
    metrics: list[str] = field(default_factory=list)
    alert_count: int = 0
    alert_ids: list[int] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)  # each alert's first step
    worst_value: float | None = None
    worst_step: int | None = None
    points: int = 0  # logged points its alerts lasted, together
    escalations: list[dict] = field(default_factory=list)  # {"step", "severity"}: when it reached each level

    def to_dict(self) -> dict:
        return asdict(self)


def incidents(alerts: list[dict], runs: dict[str, RunSteps] | None = None) -> list[Incident]:
    """See the module docstring."""
    runs = runs or {}
    by_run: dict[str, list[dict]] = {}
    for alert in alerts:
        by_run.setdefault(str(alert["run"]), []).append(alert)
    out: list[Incident] = []
    for run in sorted(by_run):
        out.extend(_run_incidents(run, by_run[run], runs.get(run, RunSteps())))
    return out


@dataclass(frozen=True, slots=True)
class Grouping:
    """How a rule's alerts group into incidents, as its class declares it (`collector.detect.base.Rule`)."""

    recurs: bool = Rule.recurs
    caused_by: tuple[str, ...] = Rule.caused_by
    keep_firing_points: int = Rule.keep_firing_points
    dated_late_points: int = Rule.dated_late_points
    one_incident_across_metrics: bool = Rule.one_incident_across_metrics


def grouping(rule: str) -> Grouping:
    """What `rule`'s class declares about its incidents (a custom or unknown rule: the defaults)."""
    cls = registry.get(rule)
    if cls is None:
        return Grouping()
    return Grouping(
        cls.recurs,
        tuple(cls.caused_by),
        cls.keep_firing_points,
        cls.dated_late_points,
        cls.one_incident_across_metrics,
    )


class _Open:
    """An incident being built: its alerts, the steps it was firing to, and its cause (the alert that names
    it: its first, unless a cause dated late took in this consequence's incident)."""

    __slots__ = ("alerts", "until", "rule", "metric", "cause")

    def __init__(self, alert: dict) -> None:
        self.alerts = [alert]
        self.cause = alert
        self.rule, self.metric = str(alert["rule"]), str(alert.get("metric") or "")
        self.until = int(alert["last_step"] if alert.get("last_step") is not None else alert["first_step"])


def _run_incidents(run: str, alerts: list[dict], steps: RunSteps) -> list[Incident]:
    ordered = sorted(alerts, key=lambda a: (int(a["first_step"]), _cause_rank(a), str(a["rule"]),
                                            str(a.get("metric") or ""), int(a.get("id") or 0)))  # fmt: skip
    built: list[_Open] = []
    current: dict[tuple[str, str], _Open] = {}  # (rule, metric) -> its latest incident
    interval = max(1, int(steps.log_interval or 1))
    for alert in ordered:
        rule, metric = str(alert["rule"]), str(alert.get("metric") or "")
        first = int(alert["first_step"])
        last = int(alert["last_step"] if alert.get("last_step") is not None else first)
        group = grouping(rule)
        home = _cause_of(alert, group, current, interval)
        if home is None and (home := _consequence_of(alert, group, current, interval)) is not None:
            home.cause, home.rule, home.metric = alert, rule, metric
        if home is None:
            mine = current.get((rule, metric))
            window = group.keep_firing_points * interval
            if mine is not None and (group.recurs or first - mine.until <= window):
                home = mine
            elif group.one_incident_across_metrics:
                home = _same_trouble(alert, current, window)
        if home is None:
            home = _Open(alert)
            built.append(home)
        else:
            home.alerts.append(alert)
            home.until = max(home.until, last)
        current[(rule, metric)] = home
    return [_incident(run, b, steps, interval) for b in built]


def _cause_rank(alert: dict) -> int:
    # at one step the cause comes first (a grad spike before the loss spike it explains)
    return 1 if grouping(str(alert["rule"])).caused_by else 0


def _cause_of(alert: dict, group, current: dict[tuple[str, str], _Open], interval: int) -> _Open | None:
    """The incident of a rule that causes this alert's (inhibition), when one began at or before it and was
    firing within the cause's keep-firing window; the most recent such."""
    first = int(alert["first_step"])
    found: _Open | None = None
    for (rule, _metric), incident in current.items():
        if rule not in group.caused_by:
            continue
        window = grouping(incident.rule).keep_firing_points * interval
        began = int(incident.alerts[0]["first_step"])
        firing = began <= first and first - incident.until <= window
        if firing and (found is None or incident.until > found.until):
            found = incident
    return found


def _same_trouble(alert: dict, current: dict[tuple[str, str], _Open], window: int) -> _Open | None:
    """The incident of this alert's rule on another metric that began at or before it and was firing within
    `window` steps of it; the most recent such."""
    first = int(alert["first_step"])
    found: _Open | None = None
    for (rule, _metric), incident in current.items():
        if rule != alert["rule"] or incident.rule != rule:
            continue
        began = int(incident.alerts[0]["first_step"])
        if (
            began <= first
            and first - incident.until <= window
            and (found is None or incident.until > found.until)
        ):
            found = incident
    return found


def _consequence_of(alert: dict, group, current: dict[tuple[str, str], _Open], interval: int) -> _Open | None:
    """The incident of a consequence of this alert's rule that began before it, by no more than the rule's
    `dated_late_points`, still firing within that rule's keep-firing window and named by none of its causes
    yet (a cause dated late); the earliest such."""
    if not group.dated_late_points:
        return None
    first = int(alert["first_step"])
    rule = str(alert["rule"])
    found: _Open | None = None
    for incident in current.values():
        if incident.cause is not incident.alerts[0] or rule not in grouping(incident.rule).caused_by:
            continue
        began = int(incident.alerts[0]["first_step"])
        window = grouping(incident.rule).keep_firing_points * interval
        near = 0 < first - began <= group.dated_late_points * interval and first - incident.until <= window
        if near and (found is None or began < int(found.alerts[0]["first_step"])):
            found = incident
    return found


def _incident(run: str, built: _Open, steps: RunSteps, interval: int) -> Incident:
    alerts = built.alerts
    head = alerts[0]
    rules: list[str] = []
    metrics: list[str] = []
    for a in [built.cause, *(a for a in alerts if a is not built.cause)]:
        for r in [a["rule"], *(a.get("evidence") or {}).get("rules", [])]:
            if r not in rules:
                rules.append(str(r))
        for m in [a.get("metric") or "", *(a.get("evidence") or {}).get("metrics", [])]:
            if m not in metrics:
                metrics.append(str(m))
    worst = max(alerts, key=lambda a: (Severity(a["severity"]).rank, _magnitude(a), -int(a["first_step"])))
    escalations: list[dict] = []
    for a in alerts:
        if not escalations or Severity(a["severity"]).rank > Severity(escalations[-1]["severity"]).rank:
            escalations.append({"step": int(a["first_step"]), "severity": str(a["severity"])})
    last = max(int(a["last_step"] if a.get("last_step") is not None else a["first_step"]) for a in alerts)
    states = {str(a.get("state") or "open") for a in alerts}
    if "open" in states:
        state = "open"
    elif "acked" in states:
        state = "acked"
    else:
        window = grouping(built.rule).keep_firing_points * interval
        waiting = steps.running and steps.last_step is not None and steps.last_step - last <= window
        state = "open" if waiting else "resolved"  # keep firing: a flapping trouble stays one incident
    return Incident(
        id=int(head.get("id") or 0),
        run=run,
        rule=rules[0],
        metric=str(built.cause.get("metric") or ""),
        severity=str(worst["severity"]),
        state=state,
        first_step=int(head["first_step"]),
        last_step=last,
        message=str(worst.get("message") or ""),
        rules=rules,
        metrics=metrics,
        alert_count=len(alerts),
        alert_ids=[int(a.get("id") or 0) for a in alerts],
        steps=[int(a["first_step"]) for a in alerts],
        worst_value=_finite_or_none(worst.get("value")),
        worst_step=int((worst.get("evidence") or {}).get("peak_step", worst["first_step"])),
        points=sum(int((a.get("evidence") or {}).get("points", 1) or 1) for a in alerts),
        escalations=escalations,
    )


def _magnitude(alert: dict) -> float:
    value = alert.get("value")
    if not isinstance(value, int | float) or isinstance(value, bool):
        return 0.0
    if value != value:
        return float("inf")  # NaN: the worst there is
    return abs(float(value))


def _finite_or_none(value: object) -> float | None:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    return float(value)


def run_steps(runs: list[dict], stats: list[dict]) -> dict[str, RunSteps]:
    """Each run's `RunSteps` from the store's run rows (`id`, `last_step`, `status`) and metric statistics
    (`run`, `points`, `first_step`, `last_step`): the log interval is its most-logged metric's mean gap."""
    densest: dict[str, dict] = {}
    for s in stats:
        if int(s.get("points") or 0) > int(densest.get(s["run"], {}).get("points") or 0):
            densest[s["run"]] = s
    out: dict[str, RunSteps] = {}
    for r in runs:
        s = densest.get(r["id"])
        interval = 1
        if (
            s is not None
            and int(s["points"]) > 1
            and s["last_step"] is not None
            and s["first_step"] is not None
        ):
            interval = max(1, round((int(s["last_step"]) - int(s["first_step"])) / (int(s["points"]) - 1)))
        ended = str(r.get("status") or "") in ("completed", "failed", "stopped")
        out[r["id"]] = RunSteps(interval, r.get("last_step"), not ended)
    return out


Told = dict[int, tuple[int, str]]  # incident id -> (severity rank, state) as last told


def told(found: list[Incident]) -> Told:
    """What a list of incidents tells, to compare the next list with (`changes`)."""
    return {i.id: (Severity(i.severity).rank, i.state) for i in found}


def changes(before: Told, found: list[Incident]) -> list[tuple[Incident, str]]:
    """The notifications a change from `before` to `found` calls for, one per incident at most: `opened` (new),
    `escalated` (its severity rose), `reopened` (resolved, and firing again) or `auto_resolved` (every alert
    resolved and the keep-firing window passed). An alert that joins an incident without raising it tells
    nothing: that is the storm kept out of people's way."""
    out: list[tuple[Incident, str]] = []
    for i in found:
        prev = before.get(i.id)
        rank = Severity(i.severity).rank
        if prev is None:
            out.append((i, "opened"))
        elif rank > prev[0]:
            out.append((i, "escalated"))
        elif prev[1] == "resolved" and i.state != "resolved":
            out.append((i, "reopened"))
        elif i.state == "resolved" and prev[1] != "resolved":
            out.append((i, "auto_resolved"))
    return out
