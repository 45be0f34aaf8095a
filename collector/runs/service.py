"""The runs of one database as the API, the daemon's detection and sinks and the CLI read them: a run's advice
inputs gathered once (`RunInputs`), its checkpoint advice, its alerts' actions, its health checklist, and the
overview's recommended step, kept per run until something it was built from changes."""

from __future__ import annotations

import copy

from collector.advice import action as action_mod
from collector.detect.rules import UNSAFE_CHECKPOINT_RULES
from collector.detect.runlevel import RUN_FAILED
from collector.runs.inputs import RunInputs, add_actions, advise, checklist, is_evaluation
from collector.runs.lookup import find_run
from collector.runs.status import run_status
from collector.settings.config import DetectConfig
from collector.settings.thresholds import Thresholds, thresholds_for
from collector.store import alerts as store_alerts
from collector.store import read as store_read
from collector.store.db import Store

# The alerts whose steps or states the advice reads (besides error alerts): the bad episodes a recommendation
# passes over, and the alerts whose actions' resume points are kept from deletion while they count (a resolved
# alert of an ended run no longer keeps one: `collector.runs.inputs.resume_points`).
BAD_RULES = tuple(
    sorted(
        UNSAFE_CHECKPOINT_RULES | action_mod.CHECKPOINT_RULES | action_mod.STEP_NAMING_RULES | {RUN_FAILED}
    )
)


class RunService:
    """A database's runs for the layers above the store. Thread-safe as far as the store is: the cache of
    recommended steps is one dict whose entries are replaced whole."""

    def __init__(self, store: Store, thresholds: Thresholds | None = None) -> None:
        self.store = store
        # the one resolver of runwatch.toml for this database, shared with detection: they judge alike
        self.thresholds = thresholds if thresholds is not None else thresholds_for(store.path)
        # run id -> (what its recommendation was built from, the recommended step): the overview would
        # otherwise rebuild every run's advice (every evaluation series, a TOML read) on every refresh
        self._recommended: dict[str, tuple[tuple, int | None]] = {}
        # run id -> (its `version`, its inputs, its advice): the alert review and `check` ask for every run's
        # advice and actions each time; they are built again only for a run whose stored data changed
        self._advised: dict[str, tuple[tuple, RunInputs, dict]] = {}
        # the overview as last built on a team's lake (`collector.api.runs.Overview`: its rows kept, each
        # encoded, and where in the lake they were read); replaced whole
        self.overview = None
        # its builds, one at a time, and its refreshes in the background (`collector.api.runs`)
        self.overview_keeper = None

    def thresholds_of(self, run_path: str | None) -> DetectConfig:
        """The thresholds detection uses for the run at `run_path`."""
        return self.thresholds.for_run(run_path)

    def inputs(self, run_id: str) -> RunInputs:
        """Everything the run's advice, actions and checklist read, from the store; NotFound for an unknown run."""
        r = find_run(self.store, run_id)
        stats = store_read.metric_stats(self.store, run_id)

        def series(metric: str, points: int | None) -> tuple[list[int], list[float]]:
            s = store_read.series(self.store, run_id, metric, points=points or 10**9)
            return s["steps"], s["values"]

        return RunInputs(
            run_id=run_id,
            path=r["path"],
            format=r["format"],
            info=store_read.parse_json(r["config"]),
            status=store_read.parse_json(r["status_info"]),
            state=run_status(r, stalled=False),
            latest_marker=r["latest_marker"],
            last_step=max((s["last_step"] for s in stats), default=None),
            checkpoints=store_alerts.checkpoints(self.store, run_id),
            stats=stats,
            alerts=store_alerts.list_alerts(self.store, run=run_id),
            thresholds=self.thresholds_of(r["path"]),
            series=series,
            source_formats=store_read.source_formats(self.store, run_id),
        )

    def advice(self, run_id: str, metric: str | None = None, direction: str | None = None) -> dict:
        """The run's checkpoint advice (`collector.runs.inputs.advise`); the run's own choice of evaluation
        (no `metric`, no `direction`) is built once per `version` of the run."""
        if metric is not None or direction is not None:
            return advise(self.inputs(run_id), metric, direction)
        return self._advised_run(run_id, self.versions([run_id]).get(run_id))[1]

    def health(self, run_id: str) -> list[dict]:
        """The run's health checklist (`collector.runs.inputs.checklist`)."""
        return checklist(self.inputs(run_id))

    def with_actions(self, alerts: list[dict]) -> list[dict]:
        """`alerts` (dicts as the store lists them), each given its `action` (None where none is due), built
        from one advice per run: what `GET /api/alerts` shows and the sinks deliver."""
        by_run: dict[str, list[dict]] = {}
        for a in alerts:
            a["action"] = None
            if action_mod.needs_action(a):
                by_run.setdefault(a["run"], []).append(a)
        versions = self.versions(list(by_run)) if by_run else {}
        for run_id, wanting in by_run.items():
            try:
                run, advice = self._advised_run(run_id, versions.get(run_id))
            except LookupError:  # the run went away between the two reads: its alerts keep no action
                continue
            add_actions(run, wanting, advice)
        return alerts

    def versions(self, run_ids: list[str]) -> dict[str, tuple]:
        """Run id -> its data version: what its advice and its alerts' actions are built from, as stored now
        (`version`), for those of `run_ids` the store knows (read for every run at once when there are
        several)."""
        one = run_ids[0] if len(run_ids) == 1 else None
        stats: dict[str, list[dict]] = {}
        for s in store_read.metric_stats(self.store, runs=run_ids):  # a wide run not asked for is not read
            stats.setdefault(s["run"], []).append(s)
        signatures = store_read.advice_signatures(self.store, BAD_RULES, one)
        wanted = set(run_ids)
        return {
            r["id"]: self.version(r, stats.get(r["id"], []), signatures.get(r["id"]))
            for r in store_read.runs(self.store, one)
            if r["id"] in wanted
        }

    def version(self, r: dict, stats: list[dict], signature: tuple | None) -> tuple:
        """The data version of the run whose stored row is `r`, metric stats `stats` and advice signature
        `signature` (`store_read.advice_signatures`): it changes whenever anything `inputs` reads for the
        advice and the actions changes: the row's facts, any metric's count, steps or last value, the
        checkpoint index, bad-step and error alerts, replaced points, the files' formats, the thresholds."""
        return (
            signature,
            tuple(r[k] for k in ("path", "format", "status", "latest_marker")),
            hash(r["config"]),
            hash(r["status_info"]),
            tuple(
                (s["metric"], s["points"], s["first_step"], s["last_step"], repr(s["last_value"]))
                for s in stats
            ),
            self.thresholds_of(r["path"]),  # the resolver re-reads a changed runwatch.toml
        )

    def _advised_run(self, run_id: str, version: tuple | None) -> tuple[RunInputs, dict]:
        """The run's inputs and (a copy of) its advice as of `version`, built again only when that differs from
        the cached one's (or is None: a run not read with the others); NotFound for an unknown run. The inputs
        are read after the version: a change in between is built again next time, never missed."""
        cached = self._advised.get(run_id)
        if cached is None or version is None or cached[0] != version:
            run = self.inputs(run_id)
            cached = (version, run, advise(run))
            if version is not None:
                self._advised[run_id] = cached
        return cached[1], copy.deepcopy(cached[2])  # the caller's to change (an action holds its checkpoint)

    def recommended_step(self, r: dict, stats: list[dict], signature: tuple | None) -> int | None:
        """The recommended checkpoint step of the run whose stored row is `r` and metric stats `stats`,
        rebuilt only when something the advice reads has changed: its checkpoint index, bad-step alerts or
        replaced points (`signature`, `store_read.advice_signatures`), its evaluation series' counts and last
        values, its config, status and latest marker, or its resolved thresholds."""
        built_from = (
            signature,
            hash(r["config"]),
            hash(r["status_info"]),
            r["latest_marker"],
            r["format"],
            tuple(
                (s["metric"], s["points"], s["last_step"], repr(s["last_value"]))
                for s in stats
                if is_evaluation(s["metric"])
            ),
            self.thresholds_of(r["path"]),  # the resolver re-reads a changed runwatch.toml
        )
        cached = self._recommended.get(r["id"])
        if cached is not None and cached[0] == built_from:
            return cached[1]
        recommended = self._advised_run(r["id"], self.version(r, stats, signature))[1].get("recommended")
        step = recommended["step"] if recommended else None
        self._recommended[r["id"]] = (built_from, step)
        return step
