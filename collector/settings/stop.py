"""Which alerts stop a run: the `[stop]` table of runwatch.toml (`collector.settings.config.DetectConfig.stop`)
and the pure decision over one alert, which only the daemon's stop sink asks (detection knows neither).

    [stop]
    on = ["nonfinite", "grad_spike", "accuracy_zero"]  # rule ids; a custom rule by its id (or "custom:ID")
    severity = "error"                                  # the alert's severity at least (info < warn < error)
    after_points = 1                                    # the episode has lasted this many points

Off by default (`on` empty). The collector then writes the stop request (`collector.core.stop_request`).
"""

from __future__ import annotations

from dataclasses import dataclass

from collector.core.severity import SEVERITIES, Severity
from collector.detect.base import checked_table


class StopConfigError(ValueError):
    """A [stop] table that cannot be used; the message names where and what."""


@dataclass(frozen=True)
class StopSettings:
    on: tuple[str, ...] = ()
    severity: str = "error"
    after_points: int = 1


def parse_stop(current: StopSettings, values: object, where: str) -> StopSettings:
    """`current` with one file's `[stop]` table applied (keys replace keys); StopConfigError when malformed."""
    if values is None:
        return current
    values = checked_table(values, ("on", "severity", "after_points"), where, StopConfigError)
    on = values.get("on", list(current.on))
    if not isinstance(on, list) or not all(isinstance(r, str) and r for r in on):
        raise StopConfigError(
            f"{where} on: expected a list of rule ids (the README's Alert rules), got {on!r}"
        )
    severity = values.get("severity", current.severity)
    if severity not in SEVERITIES:
        raise StopConfigError(f'{where} severity: expected "info", "warn" or "error", got {severity!r}')
    after = values.get("after_points", current.after_points)
    if isinstance(after, bool) or not isinstance(after, int) or after < 1:
        raise StopConfigError(f"{where} after_points: expected a whole number >= 1, got {after!r}")
    return StopSettings(on=tuple(on), severity=severity, after_points=after)


def stops_run(settings: StopSettings, alert: dict) -> bool:
    """Whether this alert (an open episode: `rule`, `severity`, `evidence.points`) asks for the run to stop. With
    its `incident` (as the collector sends it) the incident decides: any of its rules, its severity, the points
    its alerts lasted together (a no_learning error inside a reward collapse's incident stops on the reward
    collapse's rule; recurring spikes count together)."""
    if not settings.on or not alert.get("active", True):
        return False
    incident = alert.get("incident") if isinstance(alert.get("incident"), dict) else {}
    rules = [str(r) for r in incident.get("rules") or [alert.get("rule") or ""]]
    if not any(r in settings.on or (r.startswith("custom:") and r[7:] in settings.on) for r in rules):
        return False
    severity = incident.get("severity") or alert.get("severity")
    if severity not in SEVERITIES or Severity(severity).rank < Severity(settings.severity).rank:
        return False
    points = incident.get("points") or (alert.get("evidence") or {}).get("points", 1)
    return int(points or 1) >= settings.after_points
