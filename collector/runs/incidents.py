"""A database's incidents: `collector.detect.incidents` (pure) over the alerts and runs the store holds. The
API, the CLI and the daemon's sinks and stop rules all ask here, so every path that stored the same alerts
answers the same."""

from __future__ import annotations

from dataclasses import dataclass

from collector.detect import registry
from collector.detect.base import Rule
from collector.detect.incidents import Incident, RunSteps, incidents, run_steps
from collector.store import alerts as store_alerts
from collector.store import read as store_read
from collector.store.db import Store


def stored_incidents(
    store: Store, run: str | None = None, alerts: list[dict] | None = None
) -> list[Incident]:
    """The incidents of the alerts the store holds, of one run or all (`alerts`: those alerts, when the caller
    has just listed them). Reads the store, never writes it."""
    if alerts is None:
        alerts = store_alerts.list_alerts(store, run=run)
    return incidents(alerts, _steps(store, run))


def _steps(store: Store, run: str | None) -> dict[str, RunSteps]:
    return run_steps(store_read.run_progress(store, run), store_read.metric_stats(store, run))


def cleared_open(store: Store, runs: list[dict], stats: list[dict]) -> dict[str, int]:
    """Per run of `runs` (store rows: `id`, `last_step`, `status`; `stats`: their `metric_stats`) with one: how
    many of its incidents are still open though every alert of them cleared (a running run's incident waits out
    its keep-firing window: the Alerts queue lists it as open). Only runs still going with an alert resolved
    within the widest window of their last step are grouped (the overview asks for every run)."""
    steps = run_steps(runs, stats)
    going = {r["id"] for r in runs if steps[r["id"]].running and r.get("last_step") is not None}
    if not going:
        return {}
    widest = max([Rule.keep_firing_points, *(cls.keep_firing_points for cls in registry.by_id().values())])
    last = {r["id"]: int(r["last_step"]) for r in runs if r["id"] in going}
    near = sorted(
        run
        for run, cleared in store_read.last_cleared_steps(store, sorted(going)).items()
        if last[run] - int(cleared) <= widest * steps[run].log_interval
    )
    if not near:
        return {}
    alerts = store_alerts.list_alerts(store, runs=near)  # one read for them all
    state = {a["id"]: a["state"] for a in alerts}
    out: dict[str, int] = {}
    for i in incidents(alerts, {run: steps[run] for run in near}):
        if i.state == "open" and all(state[a] == "resolved" for a in i.alert_ids):
            out[i.run] = out.get(i.run, 0) + 1
    return out


@dataclass(frozen=True, slots=True)
class _Grouped:
    """A run's alerts as read at `version` and its incidents over them and `steps`."""

    version: int
    steps: RunSteps
    alerts: list[dict]
    incidents: list[Incident]


class RunIncidents:
    """Each run's alerts and incidents as the daemon asks for them after every change of the run: the same
    answer as `stored_incidents`, but its alerts are read again only when they changed (`Store.alert_version`)
    and grouped again only when they or the run's steps did. While an incident only keeps firing, every commit
    of the run asks (has the run gone past its window?); most alerts have not changed."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._grouped: dict[str, _Grouped] = {}

    def of_run(self, run: str) -> tuple[list[dict], list[Incident]]:
        """The run's alerts, as the store lists them, and its incidents (both shared: read, never change them)."""
        # read before the alerts: a change committed in between is read next time
        version = self.store.alert_version(run)
        steps = _steps(self.store, run).get(run, RunSteps())
        last = self._grouped.get(run)
        if last is not None and last.version == version:
            if last.steps == steps:
                return last.alerts, last.incidents
            alerts = last.alerts
        else:
            alerts = store_alerts.list_alerts(self.store, run=run)
        found = incidents(alerts, {run: steps})
        self._grouped[run] = _Grouped(version, steps, alerts, found)
        return alerts, found
