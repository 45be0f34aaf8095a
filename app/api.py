"""The collector's HTTP API as the dashboard uses it: one method per endpoint. The answers come back as the
API's types (`collector.api.models`), so a page reads `run.last_step`, and a field renamed in a model fails where
it is read; only a playback's events stay JSON data. (A series is a model over its columns, `steps`,
`values`..., not one object per point: parsing 80 series of 2,000 buckets costs about what turning them into
the app's series costs.)

Transport (address, token, errors) is the collector's client; this class only names the calls the pages
make, so a page reads `api.checkpoints(run)` rather than a path string.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from collector.api.client import parse
from collector.api.models import (
    Advice,
    Alert,
    AlertDetail,
    ChecklistItem,
    Compare,
    Epochs,
    Health,
    Incident,
    IncidentChange,
    RunDetail,
    RunSummary,
    RunView,
    Series,
    SeriesAnswer,
    StopAnswer,
    StopState,
)

# Bucket count for a chart: about one bucket per horizontal pixel of a wide chart.
CHART_POINTS = 2000


def _run_path(run: str) -> str:
    # Run ids are paths with "/" separators; the API's route takes them as a path.
    return quote(run, safe="/")


class DashboardApi:
    """The endpoints the pages call. `client` is a `collector.api.client` client (anything with get/post)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def _get(self, path: str, params: dict | list | None = None, model: Any = None) -> Any:
        if model is None:
            return self.client.get(path, params=params)
        return self.client.get(path, params=params, model=model)

    def _post(self, path: str, body: dict, model: Any = None) -> Any:
        answer = self.client.post(path, body)
        return answer if model is None else parse(answer, model)

    def health(self) -> Health:
        return self._get("/api/health", model=Health)

    def runs(self) -> list[RunSummary]:
        return self._get("/api/runs", model=list[RunSummary])

    def run(self, run: str) -> RunDetail:
        return self._get(f"/api/runs/{_run_path(run)}", model=RunDetail)

    def metrics(
        self,
        run: str,
        metrics: list[str],
        *,
        points: int = CHART_POINTS,
        start: int | None = None,
        end: int | None = None,
        after: int | None = None,
    ) -> list[Series]:
        """The series of `metrics` (downsampled to about `points` buckets; raw points past `after` when given)."""
        params: list[tuple[str, Any]] = [("metric", m) for m in metrics]
        params.append(("points", points))
        for name, value in (("start", start), ("end", end), ("after", after)):
            if value is not None:
                params.append((name, value))
        return self._get(f"/api/runs/{_run_path(run)}/metrics", params=params, model=SeriesAnswer).series

    def view(
        self, run: str, *, points: int = CHART_POINTS, series: bool = True, start: int | None = None
    ) -> RunView:
        """The run page's first view in one request: the run's fields plus `series` (every metric,
        downsampled), `alerts` and `checkpoint_steps`; `series=False` leaves the series out."""
        params: list[tuple[str, Any]] = [("points", points), ("series", "true" if series else "false")]
        if start is not None:
            params.append(("start", start))
        return self._get(f"/api/runs/{_run_path(run)}/view", params=params, model=RunView)

    def epochs(self, run: str, metric: str) -> Epochs:
        return self._get(f"/api/runs/{_run_path(run)}/epochs", params={"metric": metric}, model=Epochs)

    def alerts(
        self,
        *,
        run: str | None = None,
        rule: str | None = None,
        severity: str | None = None,
        state: str = "all",
    ) -> list[Alert]:
        params = {"state": state}
        for name, value in (("run", run), ("rule", rule), ("severity", severity)):
            if value:
                params[name] = value
        return self._get("/api/alerts", params=params, model=list[Alert])

    def alert(self, alert_id: int) -> AlertDetail:
        return self._get(f"/api/alerts/{alert_id}", model=AlertDetail)

    def acknowledge(self, alert_id: int, note: str) -> AlertDetail:
        return self._post(f"/api/alerts/{alert_id}/ack", {"note": note}, model=AlertDetail)

    def resolve(self, alert_id: int, note: str) -> AlertDetail:
        return self._post(f"/api/alerts/{alert_id}/resolve", {"note": note}, model=AlertDetail)

    def incidents(self, *, run: str | None = None, state: str = "all") -> list[Incident]:
        """The incidents (alerts grouped by trouble, each with its `alert_ids` and `action`), newest first."""
        params = {"state": state}
        if run:
            params["run"] = run
        return self._get("/api/incidents", params=params, model=list[Incident])

    def acknowledge_incident(self, incident_id: int, note: str) -> IncidentChange:
        """Acknowledge every open alert of the incident; `changed` (their ids) and the `incident` after."""
        return self._post(f"/api/incidents/{incident_id}/ack", {"note": note}, model=IncidentChange)

    def resolve_incident(self, incident_id: int, note: str) -> IncidentChange:
        """Resolve every alert of the incident not yet resolved; `changed` and the `incident` after."""
        return self._post(f"/api/incidents/{incident_id}/resolve", {"note": note}, model=IncidentChange)

    def checkpoints(self, run: str) -> Advice:
        return self._get(f"/api/runs/{_run_path(run)}/checkpoints", model=Advice)

    def health_checklist(self, run: str) -> list[ChecklistItem]:
        return self._get(f"/api/runs/{_run_path(run)}/health", model=list[ChecklistItem])

    def compare(self, runs: list[str]) -> Compare:
        return self._get("/api/compare", params=[("run", r) for r in runs], model=Compare)

    def stop(self, run: str, reason: str) -> StopAnswer:
        """Ask the run to stop (its trainer polls `RUN_DIR/runwatch.stop`); the request in force."""
        return self._post(f"/api/runs/{_run_path(run)}/stop", {"reason": reason}, model=StopAnswer)

    def stop_state(self, run: str) -> StopState | None:
        """The run's last stop request and what became of it (None when none is known)."""
        return self._get(f"/api/runs/{_run_path(run)}/stop", model=StopState | None)

    def playback(
        self, run: str, metrics: list[str], start_step: int, end_step: int, speed: float
    ) -> Iterator[dict]:
        """The playback events of a run's history (playback_info, point, alert, progress, playback_complete)."""
        params: list[tuple[str, Any]] = [("metric", m) for m in metrics]
        params += [("start_step", start_step), ("end_step", end_step), ("speed", speed)]
        return self.client.stream(f"/api/runs/{_run_path(run)}/stream", params=params)
