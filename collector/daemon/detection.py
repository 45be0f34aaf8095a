"""Detection and alert delivery inside the collector: one incremental `RunDetector` per run, fed the points
each commit adds; its events are upserted as alerts (and their history) and new, escalated or cleared alerts go
to the sinks (console, `DB.alerts.jsonl`, webhook), each event of an alert that needs an action (error alerts,
the alerts that name a checkpoint) with the `action` the API gives that alert at that moment; every change goes
to the stop sink, which writes the run's stop request when the run's `[stop]` settings say so.

The same answer on every path: after a restart (and before `ingest` adds to a database) a stored run is
judged again from its first stored point through the backlog path, exactly as a first reading judged it, so
its next points are judged as one pass over its files would judge them (a bounded tail replayed through windows
cut short found episodes the whole history never showed: loss plateaus, grad spikes). That happens at once for
a run whose judging was not finished or whose status says running, else when the run next changes. While a
run is judged again its events are held and merged, one per episode, and stored once the judging has passed
the step it was judged to before: an episode unchanged is not written, told or stopped on again; one found in
points the collector had not judged yet opens as new.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from collector.advice import action as action_mod
from collector.core.model import BEFORE_ALL_STEPS, Points, RunInfo
from collector.core.roles import step_order
from collector.core.runtime import alerts_log_path
from collector.core.severity import Severity
from collector.core.stop_request import STOP_FILE, stop_path
from collector.daemon.sinks import ConsoleSink, JsonlSink, StopFileSink, WebhookSink, deliver
from collector.detect import incidents as inc
from collector.detect.backlog import judge_columns
from collector.detect.engine import AlertEvent, RunDetector
from collector.detect.runlevel import RUN_FAILED, STALLED
from collector.ingest.checkpoints import scan_checkpoints
from collector.runs.incidents import RunIncidents, stored_incidents
from collector.runs.service import RunService
from collector.settings.config import DetectConfig
from collector.settings.thresholds import thresholds_for
from collector.store import alerts as store_alerts
from collector.store import read as store_read
from collector.store.db import Store

log = logging.getLogger("collector.detect")

# points judged per catch-up slice: about a quarter second of the backlog path, so live runs keep flowing
CATCH_UP_POINTS = 500_000
TIMED_POINTS = 64  # the latest steps whose wall times give a run judged again its pace
RUN_LEVEL_EPISODES = (RUN_FAILED, STALLED)  # episodes judged from the run's facts and time, not its points


class Detection:
    """Runs the detectors of every run and delivers what they find. Used from the ingest thread only."""

    def __init__(self, store: Store, db: Path, sinks: list | None = None) -> None:
        self.store = store
        self.db = Path(db)
        self.sinks = sinks if sinks is not None else []
        self.thresholds = thresholds_for(self.db)  # shared with the API: detection and advice agree
        # the runs' advice and actions, the API's too (`Collector.serve` hands it over): one cache, one voice
        self.runs = RunService(store, self.thresholds)
        self.detectors: dict[str, RunDetector] = {}
        self.run_dirs: dict[str, Path] = {}
        self.run_files: dict[str, Path] = {}  # runs that are one file by itself (`Ingestor`)
        self.hf_own_state: dict[str, Path | None] = {}  # the runs of reused HF output folders (`Ingestor`)
        self.status: dict[str, dict] = {}
        self.reachable: Callable[[str], bool] = lambda run: True  # False while a remote run's host is down
        self.run_info: dict[str, dict] = {}
        # Runs whose newest stored points the detector has not seen (a bulk backlog): step fed up to.
        self.behind: dict[str, int] = {}
        self.fed_to: dict[str, int] = {}
        # Runs taken up after a restart and not judged again yet: the step they were judged to before
        self._cold: dict[str, int | None] = {}
        # Runs judged again after a restart: the step they were judged to before, and their events held till then
        self.rejudging: dict[str, int] = {}
        self._held: dict[str, dict[tuple[str, str, int], AlertEvent]] = {}
        self._outcome: dict[str, tuple[str | None, dict | None]] = {}  # status word and info, judged after
        # Per run: its incidents as last told to the sinks, and whether one only keeps firing (its alerts all
        # resolved, the keep-firing window not passed yet: the run's next points may resolve it)
        self._told: dict[str, inc.Told] = {}
        # each run's alerts and incidents, read and grouped again only when its alerts or steps changed
        self.incidents = RunIncidents(store)
        self._waiting: dict[str, bool] = {}
        self._checkpoints_seen: dict[str, list[dict]] = {}
        self._markers_seen: dict[str, int | None] = {}
        # Told every change of an alert (after_points is reached while an episode goes on), not only openings.
        self.stopper = StopFileSink(
            # a run that is one file has no folder to ask (its folder is its root's, or other runs'): the file
            lambda run: self.run_files.get(run) or self.run_dirs.get(run),
            lambda run: self._config(run).stop,
            self._stopped,
        )

    def _config(self, run: str) -> DetectConfig:
        return self.thresholds.for_run(self.run_dirs.get(run))

    def warm_up(self) -> None:
        """Take up the stored runs (after a restart, before an `ingest`). A run whose stored judging was not
        finished, or whose status says it is running (time may make it stalled), is judged again from its first
        stored point now; any other run when it next changes (`judge_again`): until then it costs nothing."""
        backlogs = self.store.detection_backlogs()
        incidents: dict[str, list[inc.Incident]] = {}  # every run's, in one reading of the store
        for i in stored_incidents(self.store):
            incidents.setdefault(i.run, []).append(i)
        for r in store_read.runs(self.store):
            run = r["id"]
            # The run's config and status as last stored: their files are not read again until they change.
            info, status = store_read.parse_json(r["config"]), store_read.parse_json(r["status_info"])
            if info:
                self.run_info[run] = info
            if status:
                self.status[run] = status
            self.detector(run)
            self._told[run] = inc.told(incidents.get(run, []))
            self._outcome[run] = (r["status"], status)
            self._cold[run] = backlogs.get(run, r["last_step"])
            if run in backlogs or str((status or {}).get("state", "")).lower() == "running":
                self.judge_again(run)

    def judge_again(self, run: str | None = None) -> None:
        """Judge a stored run (every one taken up by `warm_up` and not judged yet, when None) again from its
        first stored point, through the catch-up slices: its detector then stands where one that read the
        run's files from the start stands, so its next points are judged as one pass would judge them. Its
        events are held until the judging passes the step judged before (`_judged_again`)."""
        for name in [run] if run is not None else list(self._cold):
            if name not in self._cold:
                continue
            judged = self._cold.pop(name)
            if judged is None:  # nothing stored yet: the outcome alone
                self._judged_again(name)
                continue
            self.rejudging[name] = int(judged)
            self._held[name] = {}
            self.behind[name] = BEFORE_ALL_STEPS

    def _judged_again(self, run: str) -> None:
        """The run's stored points are judged again: store its held events (one per episode, the latest),
        reattach its open run-level episodes and judge its outcome."""
        self.rejudging.pop(run, None)
        held = self._held.pop(run, {})
        det = self.detector(run)
        self._handle(run, list(held.values()))
        # the pace `stalled` judges by: the backlog path passes no wall times
        det.note_times(store_read.recent_wall_times(self.store, run, TIMED_POINTS))
        det.resume_episodes(
            [a for a in store_alerts.list_alerts(self.store, run=run)
             if a["state"] != "resolved" and a["rule"] in RUN_LEVEL_EPISODES]
        )  # fmt: skip
        status, info = self._outcome.pop(run, (None, None))
        if status or info:
            self._handle(run, det.note_outcome(status, info))

    def forget(self, run: str) -> None:
        """The run was removed from the store (its files were found to be another run's): nothing of it is
        judged or told any more, so no time-based rule raises an alert on a run that is not there."""
        for held in (self.detectors, self.status, self.run_info, self.behind, self.fed_to, self._cold,
                     self.rejudging, self._held, self._outcome, self._told, self._waiting,
                     self._checkpoints_seen, self._markers_seen):  # fmt: skip
            held.pop(run, None)

    def detector(self, run: str) -> RunDetector:
        """The run's detector (created empty on first use), judging with the run's current thresholds (a
        changed runwatch.toml applies from the next points on)."""
        found = self.detectors.get(run)
        if found is None:
            found = self.detectors[run] = RunDetector(run, self._config(run), self.run_info.get(run))
        else:
            found.set_config(self._config(run))
        return found

    def points_added(self, run: str, points: Points) -> None:
        """Feed the points a commit just added (unless the run's backlog is still being caught up on: then
        the catch-up reads them from the store in step order)."""
        self.judge_again(run)
        if run in self.behind:
            return
        if points.wall_time and points.wall_time[0] is None and points.wall_time[-1] is None:
            # The file gives no time (verl's JSONL): the moment the collector saw the points stands in, so
            # the detector learns the usual pace and `stalled` can tell a hung run from a slow one.
            now = time.time()
            points = Points(points.step, points.metric, points.value, [now] * len(points.step))
        self._handle(run, self.detector(run).update(_as_stored(points)))
        self.fed_to[run] = max(self.fed_to.get(run, points.step[0]), max(points.step))
        self._keep_firing(run)

    def backlog_added(self, run: str) -> None:
        """A bulk commit stored points the detector has not seen; `catch_up` will feed them."""
        self.judge_again(run)
        if run not in self.behind:
            self.behind[run] = self.fed_to.get(run, BEFORE_ALL_STEPS)

    def catch_up(self, budget: int = CATCH_UP_POINTS) -> bool:
        """Judge about `budget` stored points of a run with a backlog, in step order; True while any is left.

        A big backfill is stored first and judged after, slice by slice, without holding up live runs. A
        slice goes through the backlog path (`collector.detect.backlog`: numpy screens, only the points where
        a rule may fire fed one by one), which finds exactly what feeding every point would.
        """
        for run in list(self.behind):
            after = self.behind[run]
            steps, codes, names, values = store_read.point_columns(self.store, run, after, budget)
            if not len(steps):
                del self.behind[run]
                if run in self.rejudging:
                    self._judged_again(run)
                self.store.set_detected_to(run, None)
                continue
            events = judge_columns(self.detector(run), steps, codes, names, values)
            last = int(steps[-1])
            self.behind[run] = self.fed_to[run] = last
            if run in self.rejudging:
                held = self._held[run]
                for ev in events:
                    held[(ev.rule, ev.metric, ev.first_step)] = ev
                if last < self.rejudging[run]:
                    return True  # still inside what was judged before: nothing new to store or tell yet
                self._judged_again(run)
            else:
                self._handle(run, events)
                self._keep_firing(run)
            self.store.set_detected_to(run, last)
            return True
        return bool(self.behind)

    def _keep_firing(self, run: str) -> None:
        """The run went on: an incident that only kept firing may have resolved."""
        if self._waiting.get(run):
            self._tell(run, {})

    def run_info_changed(self, run: str, facts: RunInfo) -> None:
        """A file with run facts changed: keep the status for time-based rules, judge the run's outcome
        (`run_failed`), give the config to the run's detector, index the checkpoints when the checkpoint
        marker moved."""
        if facts.status_info is not None:
            self.status[run] = facts.status_info
        if facts.status_info is not None or facts.status is not None:
            self.judge_again(run)
            if run in self.rejudging:  # judged once its stored points are (its last step is not known yet)
                self._outcome[run] = (facts.status, facts.status_info)
            else:
                self._handle(run, self.detector(run).note_outcome(facts.status, facts.status_info))
        if facts.config is not None:
            self.run_info[run] = facts.config
            if run in self.detectors:
                self.detectors[run].set_run_info(facts.config)
        if facts.checkpoint_marker is not None:
            self.scan_checkpoints(run)

    def scan_checkpoints(self, run: str) -> None:
        """Index the run folder's checkpoints into the store and tell its detector the saved steps."""
        run_dir = self.run_dirs.get(run)
        if run_dir is None or not run_dir.is_dir():
            return
        index = scan_checkpoints(run_dir, self.hf_own_state.get(run), reused=run in self.hf_own_state)
        items = [
            {
                "step": c.step,
                "path": str(c.path),
                "complete": c.complete,
                "bytes": c.bytes,
                "kind": c.kind,
                "problem": c.problem,
            }
            | ({"state_only": True} if c.state_only else {})
            for c in index.checkpoints
        ]
        if items != self._checkpoints_seen.get(run):
            # Compared in memory: a periodic rescan of a hundred runs must not query the store each time.
            if self._checkpoints_seen.get(run) is not None or items != store_alerts.checkpoints(
                self.store, run
            ):
                store_alerts.replace_checkpoints(self.store, run, items)
            self._checkpoints_seen[run] = items
        if index.latest_marker != self._markers_seen.get(run, -1):
            self.store.set_latest_marker(run, index.latest_marker)
            self._markers_seen[run] = index.latest_marker
        if run in self.detectors:
            self.detectors[run].note_checkpoints([c.step for c in index.checkpoints])

    def tick(self, now: float | None = None) -> None:
        """Time-based rules (stalled) for every run with a status file."""
        now = time.time() if now is None else now
        last_point = {r["id"]: r["last_point_at"] for r in store_read.runs(self.store)}
        for run, status in self.status.items():
            if not self.reachable(run) or run in self.rejudging or run in self._cold:
                continue  # its host is out of reach: "unreachable", not stalled; or its points are not judged yet
            self._handle(run, self.detector(run).tick(now, status, last_point.get(run)))

    def _handle(self, run: str, events: list[AlertEvent]) -> None:
        if not events:
            return
        for ev in events:
            ev.run = run
        changed = store_alerts.upsert_events(self.store, run, events)
        if changed:
            self._tell(run, {c["id"]: c["event"] for c in changed})

    def _tell(self, run: str, kinds: dict[int, str]) -> None:
        """Give the sinks one event per incident opened, escalated, re-opened or resolved (the alert that did
        it, with its `incident`), and the stop sink every changed alert with its incident."""
        alerts, found = self.incidents.of_run(run)
        by_id = {a["id"]: a for a in alerts}
        self._waiting[run] = any(
            i.state != "resolved" and all(by_id[a]["state"] == "resolved" for a in i.alert_ids) for i in found
        )
        of_alert = {a: i for i in found for a in i.alert_ids}
        if (
            str(self.status.get(run, {}).get("state", "running")) == "running"
        ):  # an ended run: nothing to stop
            for alert_id, kind in kinds.items():
                if alert_id in by_id:
                    deliver([self.stopper], _body(by_id[alert_id], kind, of_alert.get(alert_id)))
        told: list[tuple[dict, dict]] = []  # (the stored alert, the event body) for the sinks
        for incident, event in inc.changes(self._told.get(run, {}), found):
            # the alert that did it: the most severe changed now (the latest among equals), else its worst
            mine = [by_id[a] for a in incident.alert_ids if a in by_id]
            moved = [a for a in mine if a["id"] in kinds] or mine
            alert = max(moved, key=lambda a: (Severity(a["severity"]).rank, a["first_step"]))
            told.append((alert, _body(alert, event, incident)))
        self._told[run] = inc.told(found)
        actions = self._actions(run, [alert for alert, _ in told])
        for alert, body in told:
            deliver(self.sinks, body | {"action": actions.get(alert["id"])})

    def _actions(self, run: str, alerts: list[dict]) -> dict[int, dict]:
        """Alert id -> the `action` the API gives that alert now (`RunService.with_actions`), for the alerts
        that need one; built once per run and batch, and only for those (it reads the run's checkpoint advice).
        A failure is logged and the events go out without it: delivery never waits on advice."""
        wanting = [dict(a) for a in alerts if action_mod.needs_action(a)]
        if not wanting:
            return {}
        try:
            self.runs.with_actions(wanting)
        except Exception as exc:  # advice reads the store and runwatch.toml: neither may cost the alert
            log.warning(
                "run %s: the action for the %s alert(s) could not be built (%s: %s); delivered without it",
                run, ", ".join(a["rule"] for a in wanting), type(exc).__name__, str(exc).strip().split("\n")[0],
            )  # fmt: skip
            return {}
        return {a["id"]: a["action"] for a in wanting if a.get("action") is not None}

    def _stopped(self, alert: dict, request: dict) -> None:
        where = self.run_dirs.get(alert["run"])
        note = (
            f"asked the run to stop: wrote {stop_path(where) if where else STOP_FILE} ({request['reason']})"
        )
        store_alerts.note_stop_requested(self.store, alert["id"], note)

    def close(self) -> None:
        for sink in self.sinks:
            try:
                sink.close()
            except Exception as e:  # a sink failing at shutdown must not stop the final commit
                log.warning("alert sink %s did not close cleanly: %s", type(sink).__name__, e)


def _as_stored(points: Points) -> Points:
    """A batch whose steps only go forward as the store holds it and a collector started again reads it back
    (`store.read.point_columns`): one value per (step, metric), the later one, and each step's points in
    `core.roles.step_order` (training metrics with gradient norms last, then evaluations, by name); so a rule that reads another metric
    at the same step (the training loss at an evaluation) or counts a step written twice judges the same on
    both paths. A batch that goes back (a resumed run rewriting its steps) keeps its file order."""
    steps, names = points.step, points.metric
    if not all(a <= b for a, b in zip(steps, steps[1:], strict=False)):
        return points
    last = {(s, m): i for i, (s, m) in enumerate(zip(steps, names, strict=True))}
    keys = [(s, *step_order(m)) for s, m in last]
    if len(last) == len(steps) and all(a <= b for a, b in zip(keys, keys[1:], strict=False)):
        return points  # already so (most batches: one metric a step, or in that order)
    order = [last[(s, m)] for s, *_, m in sorted(keys)]
    return Points(*([column[i] for i in order] for column in (steps, names, points.value, points.wall_time)))


def _body(alert: dict, event: str, incident: inc.Incident | None) -> dict:
    """What the sinks get: the alert's documented fields, the `event`, and its `incident`."""
    body = {k: alert.get(k) for k in ("run", "rule", "severity", "metric", "first_step", "last_step", "value",
                                       "message", "active", "evidence", "id", "state")}  # fmt: skip
    body["metric"] = body["metric"] or ""
    return body | {"event": event, "incident": incident.to_dict() if incident is not None else None}


def default_sinks(db: Path, webhook: str | None) -> list:
    """Console, `DB.alerts.jsonl`, and a webhook when given."""
    out: list = [ConsoleSink(), JsonlSink(alerts_log_path(db))]
    if webhook:
        out.append(WebhookSink(webhook))
    return out
