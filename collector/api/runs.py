"""The runs as the API answers them: the overview (`GET /api/runs`), one run, its page's first view, and runs
side by side. Each function takes the database's `RunService` and plain arguments and returns JSON-able data (floats may be NaN
or infinite); the CLI's `--json` calls the same functions, so the two never drift."""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from typing import NamedTuple

import duckdb

from collector.advice.verl_saves import verl_save_freq
from collector.api import incidents as api_incidents
from collector.api import run_files
from collector.api import stop as api_stop
from collector.api.http import json_bytes
from collector.api.series import metrics
from collector.core.panels import panels_for
from collector.core.roles import RL_ROLES, real_units_name, role_of, value_scale
from collector.detect import registry
from collector.detect.runlevel import STALLED
from collector.ingest.fs import hosts, root_state
from collector.runs.incidents import cleared_open
from collector.runs.inputs import is_evaluation
from collector.runs.lookup import find_run
from collector.runs.service import BAD_RULES, RunService
from collector.runs.status import run_status
from collector.settings.config import DetectConfig
from collector.store import alerts as store_alerts
from collector.store import lake_reader
from collector.store import read as store_read

log = logging.getLogger("collector")
# The lake's tables the overview reads, each with its run column: a row of a run inserted or deleted in any of
# them is a change of that run's row in the overview (`lake_reader.runs_changed`).
OVERVIEW_TABLES = {
    "runs": "id",
    "metric_stats": "run_id",
    "alerts": "run_id",
    "checkpoints": "run_id",
    "points_replaced": "run_id",
    "sources": "run_id",
}

# Where most runs change at every commit (4 collectors x 250 live runs: all 1,000 each second), finding what changed
# costs more than building whole (~0.5 s a call against 0.1-0.3 s; bench/README.md, "Team mode at 4 x 250"): a call
# that finds more than WHOLE_FROM of at least WHOLE_MIN_RUNS runs changed builds whole, and the calls of the next
# WHOLE_FOR_S seconds build whole without asking; a whole build in which most rows changed from the last one starts
# those seconds again, else the change feed is asked again after them.
WHOLE_FROM = 0.25
WHOLE_MIN_RUNS = 100
WHOLE_FOR_S = 10.0

# On a team's lake `GET /api/runs` answers the overview kept while it was read at most this long ago (and a
# build in the background, one at a time, brings it up to date for the next call): at 4 x 250 live runs a build
# takes ~0.1 s of CPU and 0.7-2 s of wall time on a loaded 2-core machine (bench/README.md, "Team mode: the
# overview kept while most runs change"). The answer says as of which snapshot and when (`runs_answer`); a caller
# asks `max_age_s=0` for one built for it. 2 s: the write target, a line on any collector in the team's API.
OVERVIEW_MAX_AGE_S = 2.0


def runs(service: RunService) -> list[dict]:
    """Every run with its state, latest losses, open alerts and recommended checkpoint step, newest activity
    first. On a team's lake the list is kept (`Overview`) and a commit builds again only the rows of the runs
    it changed; the list (and its dicts) is then the one kept: not the caller's to change."""
    if not _reads_lake(service):
        return built_whole(service)
    return _answer(service, 0.0).rows


def built_whole(service: RunService) -> list[dict]:
    """The overview built from the store now, every row: what `runs` answers on a local file, and what the
    overview kept on a team's lake equals."""
    return [summary for _, summary, _ in _summaries(service, None)]


def runs_body(service: RunService) -> bytes:
    """`runs` as `GET /api/runs?max_age_s=0` sends it (`http.json_bytes`). On a team's lake each row is kept
    encoded, and the body is the rows' JSON joined (10,000 runs are ~4 MB: encoding them costs more than the
    lake's reads)."""
    return runs_answer(service, 0.0)[0]


def runs_answer(service: RunService, max_age_s: float = OVERVIEW_MAX_AGE_S) -> tuple[bytes, dict[str, str]]:
    """`GET /api/runs`: the body (`runs_body`) and headers saying as of when. A local file's overview is built
    now (no headers). On a team's lake it is the overview kept while it was read at most `max_age_s` ago (a
    build in the background then brings it up to date, after the one under way if any), else one built now (or
    the build under way, when that one read the lake recently enough; a call within `max_age_s` of the one before
    asks the next build in the background too); its headers: `X-Runwatch-Lake-Snapshot`
    (the lake snapshot its rows were read at), `X-Runwatch-As-Of` (when, Unix seconds) and `X-Runwatch-Age-S`
    (how long before this answer)."""
    if not _reads_lake(service):
        return json_bytes(runs(service)), {}
    overview = _answer(service, max_age_s)
    return overview.body, {
        "X-Runwatch-Lake-Snapshot": str(overview.snapshot),
        "X-Runwatch-As-Of": f"{overview.read_at:.3f}",
        "X-Runwatch-Age-S": f"{max(0.0, time.time() - overview.read_at):.3f}",
    }


def _reads_lake(service: RunService) -> bool:
    """Whether the store reads a team's lake (a reader before any collector created it reads empty tables)."""
    return service.store.lake is not None and service.store.lake.attached


class _Row(NamedTuple):
    """A run's row of the overview as kept on a team's lake; rows sort in the overview's order."""

    order: tuple  # (`_newest_first`, run id): `store_read.runs`'s order
    summary: dict
    encoded: bytes  # `summary` as `json_bytes` writes it
    advised: tuple | None  # (path, thresholds) when its recommended step read its thresholds, else None


@dataclass(frozen=True)
class Overview:
    """The overview as last built on a team's lake (`RunService.overview`; replaced whole, never changed):
    where in the lake it was read (`mark`), the host states its rows read, its rows in order (`kept`, each
    encoded; `rows` and `body` from them), the runs whose rows it built (`built`; None: all of them), until
    when (`time.monotonic()`) calls build whole without asking what changed (`whole_until`; `WHOLE_FROM`), and
    the lake as it stood when (`read_at`, `time.time()`): its snapshot then (`snapshot`; every row read in it)."""

    mark: lake_reader.LakeMark | None
    hosts: tuple
    kept: list[_Row]
    rows: list[dict]
    body: bytes
    built: frozenset[str] | None
    whole_until: float = 0.0
    snapshot: int | None = None
    read_at: float = 0.0


class _Keeper:
    """A service's overview builds on a team's lake: one at a time (`lock`), in the caller or in a thread of
    its own when a call was answered with the kept overview (`refresh`)."""

    def __init__(self, service: RunService) -> None:
        self.service = service
        self.lock = threading.Lock()  # held while the overview is built
        self._wanted = threading.Event()
        self._thread: threading.Thread | None = None
        self._starting = threading.Lock()
        self.asked = 0.0  # when (`time.time()`) the overview was last asked for

    def build(self) -> Overview:
        """The overview built now (after a build under way), in one read transaction of the lake: every row
        as of one snapshot (and one snapshot and file list per table read from the catalog, not one per query)."""
        with self.lock:
            cur = self.service.store.cursor()
            return lake_reader.in_one_snapshot(cur, lambda: _overview(self.service), again_on_any_error=True)

    def refresh(self) -> None:
        """Build again in the background (after the build under way, if any; one more at most)."""
        with self._starting:
            if self._thread is None:
                self._thread = threading.Thread(target=self._refreshing, name="overview", daemon=True)
                self._thread.start()
        self._wanted.set()

    def _refreshing(self) -> None:
        while True:
            self._wanted.wait()
            self._wanted.clear()
            try:
                self.build()
            except Exception as e:  # the next call that finds the kept one too old builds it, and says why
                log.warning("team lake: the overview could not be built again in the background: %s", e)


_KEEPERS_LOCK = threading.Lock()


def _keeper(service: RunService) -> _Keeper:
    with _KEEPERS_LOCK:
        keeper = service.overview_keeper
        if keeper is None:
            keeper = service.overview_keeper = _Keeper(service)
        return keeper


def _answer(service: RunService, max_age_s: float) -> Overview:
    """The overview read at most `max_age_s` ago (`runs_answer`); a failed read of the lake (its Postgres
    gone: the API answers 503) is said in the log too (its message never holds a password: `ReaderCursor`)."""
    try:
        return _answer_from(_keeper(service), max_age_s)
    except duckdb.Error as e:
        log.info("team lake: the overview could not be read (%s)", e)
        raise


def _answer_from(keeper: _Keeper, max_age_s: float) -> Overview:
    service = keeper.service
    kept = service.overview
    asked = time.time()
    # Calls within max_age_s of each other (dashboards): each wants the next answer built in the background, also
    # one that built its own or waited for one (where a build takes about as long as the time between calls, each
    # call would otherwise find the last answer too old and build again).
    often, keeper.asked = max_age_s > 0 and asked - keeper.asked <= max_age_s, asked
    if kept is not None and asked - kept.read_at <= max_age_s:
        # (one catalog round trip: a lake out of reach fails this call, as a build would: 503)
        lake_reader.snapshot_now(service.store.cursor())
        keeper.refresh()
        return kept
    with keeper.lock:  # a build under way: its overview, if it read the lake recently enough
        kept = service.overview
        fresh_enough = kept is not None and kept.read_at >= asked - max_age_s
    built = kept if fresh_enough else keeper.build()
    if often:
        keeper.refresh()
    return built


def _overview(service: RunService) -> Overview:
    """The overview of the lake now: the one kept while the lake and the host states are as it read them and no
    run's thresholds changed; else the kept one with the rows of the runs changed since built again (in the
    lake: `lake_reader.runs_changed`; or in their thresholds); else one built whole (the first time, host states
    changed, the lake cannot say what changed, or most runs changed: `WHOLE_FROM`)."""
    hosts = _host_states()  # read before the data: a change in between is built again next time
    cur = service.store.cursor()
    # (the first read of the build's transaction: every query after it reads this snapshot)
    as_of = {"read_at": time.time(), "snapshot": lake_reader.snapshot_now(cur)}
    old = service.overview
    now = time.monotonic()
    if old is not None and old.hosts == hosts and now < old.whole_until:  # most runs change at every commit
        new = _overview_of(None, hosts, _rows(service, None), None)
        # Still so (the rows built show it): whole for WHOLE_FOR_S more, without asking the change feed (asking
        # again needs a mark, 6 lake scans, then the feed: 2 of 3 calls paid them at 4 x 250 live runs).
        until = (
            now + WHOLE_FOR_S
            if _most_changed(len(old.kept), _changed(old.kept, new.kept))
            else old.whole_until
        )
        service.overview = replace(new, whole_until=until, **as_of)
        return service.overview
    asks = old is not None and old.hosts == hosts and old.mark is not None
    found = lake_reader.runs_changed(cur, old.mark, OVERVIEW_TABLES) if asks else None
    if found is None:
        mark = lake_reader.lake_mark(cur, OVERVIEW_TABLES)
        new = _overview_of(mark, hosts, _rows(service, None), None)
        if mark is None:  # a table the lake has not got yet: nothing to follow, built whole next time too
            return replace(new, **as_of)
    else:
        mark, changed = found
        changed |= {
            row.summary["id"]
            for row in old.kept
            if row.advised is not None and service.thresholds_of(row.advised[0]) != row.advised[1]
        }
        if not changed:  # (the lake as it stands now: read now)
            new = (
                replace(old, built=frozenset())
                if mark == old.mark
                else replace(old, mark=mark, built=frozenset())
            )
        elif _most_changed(len(old.kept), len(changed)):
            new = replace(
                _overview_of(mark, hosts, _rows(service, None), None), whole_until=now + WHOLE_FOR_S
            )
        else:
            kept = [row for row in old.kept if row.summary["id"] not in changed]
            new = _overview_of(mark, hosts, kept + _rows(service, sorted(changed)), frozenset(changed))
    service.overview = replace(new, **as_of)
    return service.overview


def _most_changed(runs: int, changed: int) -> bool:
    """Whether `changed` of `runs` rows is most of them (`WHOLE_FROM`): then the overview is built whole."""
    return changed >= WHOLE_MIN_RUNS and changed > runs * WHOLE_FROM


def _changed(old: list[_Row], new: list[_Row]) -> int:
    """How many of the `new` rows differ from the `old` (or are new)."""
    before = {row.summary["id"]: row.encoded for row in old}
    return sum(1 for row in new if before.get(row.summary["id"]) != row.encoded)


def _overview_of(
    mark: lake_reader.LakeMark | None, hosts: tuple, rows: list[_Row], built: frozenset[str] | None
) -> Overview:
    kept = sorted(rows)  # (kept rows and new rows: two sorted runs, merged)
    body = b"[" + b",".join(row.encoded for row in kept) + b"]"
    return Overview(mark, hosts, kept, [row.summary for row in kept], body, built)


def _rows(service: RunService, only: list[str] | None) -> list[_Row]:
    """The kept rows of every run (or of those of `only` the lake holds), in order."""
    out = []
    for r, summary, advised in _summaries(service, only):
        when = r["last_point_at"] if r["last_point_at"] is not None else r["created_at"]
        out.append(_Row((_newest_first(when), r["id"]), summary, json_bytes(summary), advised))
    return out


def _newest_first(when: float | None) -> tuple:
    """A sort key of `coalesce(last_point_at, created_at)` in `store_read.runs`'s order: DESC, NaN (DuckDB's
    largest double) first and NULL last."""
    if when is None:
        return (2, 0.0)
    return (0, 0.0) if math.isnan(when) else (1, -when)


def _host_states() -> tuple:
    """The states of this process's remote hosts: what each run's `root_state` (and `unreachable`) reads."""
    return tuple((h.label, h.state) for h in hosts())


def _summaries(service: RunService, only: list[str] | None) -> Iterator[tuple[dict, dict, tuple | None]]:
    """(stored row, overview row, (path, thresholds) when its recommendation reads them, else None) of every
    run (or of those of `only` the store holds), in `store_read.runs`'s order (the thresholds are read before
    the recommendation: a runwatch.toml changed in between is seen next time)."""
    store = service.store
    alerts = store_read.open_alerts(store, STALLED, only)
    signatures = store_read.advice_signatures(store, BAD_RULES, runs=only)
    all_stats = store_read.metric_stats(store, runs=only)
    stats_by_run: dict[str, list[dict]] = {}
    for s in all_stats:
        stats_by_run.setdefault(s["run"], []).append(s)
    # (by metric name once, not per run's metric: 10,000 runs log the same few names)
    evaluations = {m for m in {s["metric"] for s in all_stats} if is_evaluation(m)}
    with_evaluations = {s["run"] for s in all_stats if s["metric"] in evaluations}
    stored = store_read.runs(store, runs=only)
    cleared = cleared_open(store, stored, all_stats)
    for r in stored:
        signature = signatures.get(r["id"])
        has_checkpoints = signature is not None and signature[0] is not None  # (its checkpoints' part)
        reads_advice = _reads_advice(r, has_checkpoints, r["id"] in with_evaluations)
        advised = (r["path"], service.thresholds_of(r["path"])) if reads_advice else None
        summary = _run_summary(
            service, r, stats_by_run.get(r["id"], []), alerts.get(r["id"]), reads_advice, signature
        ) | {"cleared_open_incidents": cleared.get(r["id"], 0)}
        yield r, summary | anomaly(alerts.get(r["id"])), advised


def anomaly(open_alerts: dict | None) -> dict:
    """`anomaly_detected` and `anomaly_reason` of a run from its first unresolved error alert (of its
    `store_read.open_alerts`; the trainer's own state, `status`, is left as it is)."""
    a = open_alerts["first_error"] if open_alerts is not None else None
    if a is None:
        return {"anomaly_detected": False, "anomaly_reason": None}
    where = f" on {a['metric']}" if a["metric"] else ""
    return {
        "anomaly_detected": True,
        "anomaly_reason": f"{a['rule']}{where} at step {a['first_step']}: {a['message']}",
    }


def _latest_by_role(stats: list[dict], role: str) -> float | None:
    best = None
    for s in stats:
        if role_of(s["metric"]) == role and (best is None or s["last_step"] > best["last_step"]):
            best = s
    return best["last_value"] if best else None


@functools.lru_cache(maxsize=4096)
def _save_freq(config: str | None) -> int | None:
    """verl's save frequency from a run's stored config text, parsed once per distinct text (every overview
    refresh asks it for each run)."""
    return verl_save_freq(store_read.parse_json(config))


def _reads_advice(r: dict, has_checkpoints: bool, has_evaluations: bool) -> bool:
    """Whether the run's recommended step is asked of its advice. A lone trainer_state.json or a verl log
    naming its save_freq has no checkpoint folders to index (its advice infers them); a run with evaluations
    and no checkpoint seen is told its best evaluation's step."""
    return (
        has_checkpoints
        or r["format"] == "hf_trainer_state"
        or has_evaluations
        or _save_freq(r["config"]) is not None
    )


def _run_summary(
    service: RunService,
    r: dict,
    stats: list[dict],
    open_alerts: dict | None,
    reads_advice: bool,
    signature: tuple | None,
) -> dict:
    """The run's overview row but its anomaly; `open_alerts` is its `store_read.open_alerts` (None: none)."""
    recommended = None
    if reads_advice:
        recommended = service.recommended_step(r, stats, signature)
    state = root_state(r["path"])["state"]
    return {
        "id": r["id"],
        "path": r["path"],
        "format": r["format"],
        "status": run_status(r, open_alerts is not None and open_alerts["has_rule"], state != "disconnected"),
        "root_state": state,
        "last_step": r["last_step"],
        "total_steps": r["total_steps"],
        "updated_at": r["updated_at"],
        "last_point_at": r["last_point_at"],
        "train_loss": _latest_by_role(stats, "loss"),
        "val_loss": _latest_by_role(stats, "val_loss"),
        # what an RL run (PPO/GRPO: no loss to read) is judged by: its reward and its validation score
        "kind": "rl" if any(role_of(s["metric"]) in RL_ROLES for s in stats) else "sft" if stats else None,
        "reward": _latest_by_role(stats, "reward"),
        "val_score": _latest_by_role(stats, "val_score"),
        "open_alerts": open_alerts["counts"] if open_alerts else {"error": 0, "warn": 0, "info": 0},
        "recommended_step": recommended,
        "judged_to": r["detected_to"],  # a stored backlog being judged: the step alerts are up to; else None
    }


def run(service: RunService, run_id: str) -> dict:
    """One run: its summary plus config, status file content, metrics with point counts, sources."""
    store = service.store
    r = find_run(store, run_id)
    stats = store_read.metric_stats(store, run_id)
    signature = store_read.advice_signatures(store, BAD_RULES, run_id).get(run_id)
    has_checkpoints = signature is not None and signature[0] is not None  # (its checkpoints' part)
    reads_advice = _reads_advice(r, has_checkpoints, any(is_evaluation(s["metric"]) for s in stats))
    alerts = store_read.open_alerts(store, STALLED, [run_id]).get(run_id)
    out = _run_summary(service, r, stats, alerts, reads_advice, signature) | anomaly(alerts)
    out["cleared_open_incidents"] = cleared_open(store, [r], stats).get(run_id, 0)
    out["config"] = store_read.parse_json(r["config"])
    out["status_info"] = store_read.parse_json(r["status_info"])
    shapes = store_read.metric_shapes(store, run_id)
    # One value at the end of a run that logs series (HF's train_runtime, total_flos): a figure, not a chart.
    # At its end: a live run's first evaluation (make demo's val/loss at step 10 of a run at step 20) is one
    # point of a series to come, drawn in its panel.
    has_series = any(s["points"] > 1 for s in stats)
    end = max((s["last_step"] for s in stats if s["points"] > 1 and s["last_step"] is not None), default=None)
    out["metrics"] = [
        {
            "metric": s["metric"],
            "points": s["points"],
            "last_step": s["last_step"],
            "last_value": s["last_value"],
            "role": role_of(s["metric"]),
            **shapes.get(s["metric"], {"constant": None, "same_as": None}),
            "summary_only": has_series
            and s["points"] == 1
            and (s["last_step"] is None or end is None or s["last_step"] >= end),
            # what a chart needs to draw it in real units (detection rescales by the same factor)
            "scale": value_scale(s["metric"]),
            "label": real_units_name(s["metric"]),
        }
        for s in stats
    ]
    out["sources"], out["skipped_files"] = run_files.files_of(store, run_id)
    out["failing_files"] = run_files.failing_of(store, run_id)
    out["decorations"] = panel_decorations(service.thresholds_of(r["path"]))
    out["panels"] = panels_of({m["role"] for m in out["metrics"] if m["role"]})
    out["stop"] = api_stop.stop_state(store, run_id, r)
    return out


def panels_of(roles: set[str]) -> list[dict]:
    """The run page's role panels (`collector.core.panels`) that draw one of `roles`, as the API sends them."""
    return [
        {k: v for k, v in asdict(panel).items() if k != "names"} | {"roles": list(panel.roles)}
        for panel in panels_for(roles)
    ]


def panel_decorations(config: DetectConfig) -> dict[str, dict]:
    """Role -> what a chart of that role draws beside the data, from the run's resolved thresholds:
    `normal_band` [low, high] (the healthy range) and `warning_line` (above it is trouble)."""
    return registry.decorations(config)


def run_view(
    service: RunService,
    run_id: str,
    points: int = 2000,
    start: int | None = None,
    end: int | None = None,
    with_series: bool = True,
) -> dict:
    """What a run page draws first, in one answer: `run`'s fields plus `series` (every metric over
    [start, end], at most `points` buckets each; empty without `with_series`), `alerts` (all states, newest
    first), `incidents` (as `GET /api/runs/{run}/incidents`) and `checkpoint_steps` (the indexed checkpoints'
    steps, without computing advice)."""
    store = service.store
    out = run(service, run_id)
    names = [m["metric"] for m in out["metrics"]]
    series = metrics(store, run_id, names, points, start, end)["series"] if with_series and names else []
    index = store_alerts.checkpoints(store, run_id)
    alerts = service.with_actions(store_alerts.list_alerts(store, run=run_id))
    return out | {
        "series": series,
        "alerts": alerts,
        "incidents": api_incidents.incidents(service, run_id, acted=alerts),
        "checkpoint_steps": sorted(c["step"] for c in index),
    }


def compare(service: RunService, run_ids: list[str]) -> dict:
    """The runs side by side and the config keys whose values differ between them."""
    summaries = [run(service, r) for r in run_ids]
    flat = {s["id"]: _flatten(s.get("config") or {}) for s in summaries}
    keys = sorted({k for f in flat.values() for k in f})
    diff = []
    for key in keys:
        values = {rid: flat[rid].get(key) for rid in flat}
        if len({repr(v) for v in values.values()}) > 1:
            diff.append({"key": key, "values": values})
    return {"runs": summaries, "config_diff": diff}


def _flatten(obj: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in obj.items():
        if k == "log_history":
            continue  # the whole history is not a setting
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out
