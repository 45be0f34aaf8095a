"""The API's answers as types: one pydantic model per answer, named in `/openapi.json` (so schemathesis checks
every answer against it) and parsed by the client for the app and the CLI (`Client.get(path, model=...)`).

The routes send the views' JSON as built (NaN and infinities kept, see `collector.api.http.JSONWithNaN`); these
models say what that JSON holds. A field that is absent in some answers (a downsampled series' `min`) is
optional here and stays absent when a parsed answer is dumped again (`model_dump(exclude_unset=True)`). Every
model allows fields it does not name, so a newer collector's extra field reaches an older reader intact.

Imports pydantic only: the app may import this module (tests/test_layout.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import Field

from collector.api.answer import Answer
from collector.api.asked import AlertChangeState, StopState

# ---- the collector --------------------------------------------------------------------------------------


class RootState(Answer):
    root: str
    state: str  # local, connected, connecting, disconnected, unknown
    since: float | None = None
    error: str | None = None
    read_bytes: int | None = None  # remote roots only
    listing_bytes: int | None = None


class ProblemCounts(Answer):
    failing: int
    not_read: int
    deleted: int
    bad_lines: int
    no_points: int


class IngestState(Answer):
    """Whether the collector stores what it reads: `ok`, or `stalled` (a full disk: `reason`, `since`,
    `error`, `files` waiting, `message`)."""

    state: str
    reason: str | None = None
    since: float | None = None
    error: str | None = None
    files: int | None = None
    message: str | None = None


class LakeState(Answer):
    """A team reader's lake (`serve --store` without roots): how many `collectors` have published into it (0:
    none yet, and `message` says so), whether this reader may only read it (`read_only`; null until a
    collector has created the lake: its catalog says what the role may do), and `error`: why a lake awaited
    cannot be attached (e.g. another `--data-path` than its collectors'), while it cannot."""

    collectors: int
    read_only: bool | None
    message: str | None = None
    error: str | None = None


class Health(Answer):
    """`GET /api/health`."""

    ok: bool
    db: str
    roots: list[str]
    root_states: list[RootState]
    version: str
    problem_files: ProblemCounts
    memory_limit: str
    api_threads: int
    ingest: IngestState | None = None
    lake: LakeState | None = None  # a team reader's only


class Identity(Answer):
    """`GET /api/identity?challenge=`: this collector's pid and HMAC(token, challenge)."""

    pid: int
    proof: str


class ProblemFile(Answer):
    """One entry of `GET /api/problem_files`."""

    run: str | None
    path: str
    problem: str  # failing, not_read, deleted, bad_lines, no_points
    reason: str
    attempts: int | None
    since: float | None
    next_try_at: float | None
    bad_lines: int | None


class Queued(Answer):
    """`POST /api/ingest`."""

    queued: list[str]


# ---- runs ---------------------------------------------------------------------------------------------


class OpenAlerts(Answer):
    error: int
    warn: int
    info: int

    def by_severity(self) -> tuple[tuple[str, int], ...]:
        """The counts by severity, the most severe first."""
        return (("error", self.error), ("warn", self.warn), ("info", self.info))

    @property
    def worst(self) -> str | None:
        """The most severe level with an open alert (`error`, `warn`, `info`), or None when none is open."""
        return next((s for s, n in self.by_severity() if n), None)


# An RL run has no loss: the overview (`collector runs`, the dashboard's Runs page) shows what it is judged by in
# its loss columns, marked (`RunSummary.loss_cells`), and says this under the table.
RL_JUDGED = "r: an RL run's latest reward, s: its latest validation score (what it is judged by, not a loss)."

# What an open incident whose alerts all cleared is, in one sentence that every surface says alike: the CLI's
# `runs` and `run`, the dashboard's overview, run page and alert review (each adds where it is listed).
CLEARED_OPEN = (
    "An incident whose alerts all cleared stays open until the run goes on past it without the trouble coming "
    "back."
)


class RunSummary(Answer):
    """One run of `GET /api/runs`."""

    id: str
    path: str | None
    format: str | None
    status: str
    root_state: str
    last_step: int | None
    total_steps: int | None
    updated_at: float | None
    last_point_at: float | None
    train_loss: float | None
    val_loss: float | None
    open_alerts: OpenAlerts
    recommended_step: int | None
    judged_to: int | None
    anomaly_detected: bool
    anomaly_reason: str | None
    # incidents still open though every alert of them cleared: each waits out its keep-firing window while the
    # run goes on (the Alerts queue lists them as open; `open_alerts` counts none of their alerts)
    cleared_open_incidents: int = 0
    kind: str | None = None  # "rl" (a metric of an RL-only role), "sft", or None (no metric yet)
    reward: float | None = None  # the latest reward (an RL run has no loss: it is judged by this)
    val_score: float | None = None  # the latest validation score (higher is better)

    @property
    def progress(self) -> float | None:
        """How far the run is, 0..1 (`last_step` over `total_steps`); a completed run is done whatever its
        planned steps said; None when its planned steps are not known."""
        if self.status == "completed":
            return 1.0
        if self.last_step is None or not self.total_steps:
            return None
        return max(0.0, min(1.0, self.last_step / self.total_steps))

    @property
    def judged_by_score(self) -> bool:
        """Whether `loss_cells` shows this run's reward or validation score (an RL run that logs one)."""
        return self.kind == "rl" and (self.reward is not None or self.val_score is not None)

    def loss_cells(self, number: Callable[[float | None], str]) -> tuple[str, str]:
        """The overview's train-loss and val-loss cells, each value written by `number` (None too): the
        losses; for an RL run, in each column where it logs it, what it is judged by instead, marked: its
        reward (`r:0.42`) and its validation score (`s:0.61`). `RL_JUDGED` says so under the table."""
        rl = self.kind == "rl"
        return (
            f"r:{number(self.reward)}" if rl and self.reward is not None else number(self.train_loss),
            f"s:{number(self.val_score)}" if rl and self.val_score is not None else number(self.val_loss),
        )


class MetricInfo(Answer):
    """A metric of a run as the run page draws it: `role` picks its panel, `scale` turns a stored value into
    the real quantity (`train/lr(1e-3)` logs thousandths), `label` is its name in real units."""

    metric: str
    points: int
    last_step: int | None
    last_value: float | None = None
    role: str | None
    scale: float = 1.0
    label: str = ""
    constant: float | None = None  # the one value it holds at every step
    same_as: str | None = None  # the metric it repeats, value for value
    summary_only: bool = False  # one value at the end of a run that logs series: a figure, not a chart


class Source(Answer):
    path: str
    format: str | None
    offset: int | None
    lines: int | None
    segment: int | None
    state: str | None
    points: int | None
    bad_lines: int | None
    warning: str | None


class SkippedFile(Answer):
    path: str
    reason: str
    bytes: int | None
    copy_: bool = Field(alias="copy")  # a copy of metrics the run reads from another file
    expected: bool = False  # no problem to show: such a copy, or runwatch's own stop request (runwatch.stop)


class FailingFile(Answer):
    path: str
    reason: str
    attempts: int
    since: float | None
    last_failed_at: float | None
    next_try_at: float | None


class Decoration(Answer):
    """What a chart of one role draws beside its data, from the run's thresholds."""

    normal_band: list[float] | None = None  # [low, high]
    warning_line: float | None = None


class PanelInfo(Answer):
    """A role panel of the run page, as `collector.core.panels` declares it: its title, the roles whose
    metrics it draws, its y axis title, whether it marks checkpoints, needs a log axis, may be smoothed."""

    title: str
    roles: list[str]
    y_title: str = ""
    checkpoints: bool = False
    always_log: bool = False
    smooth: bool = True


class RunDetail(RunSummary):
    """`GET /api/runs/{run}`."""

    config: dict[str, Any] | None
    status_info: dict[str, Any] | None
    metrics: list[MetricInfo]
    sources: list[Source]
    skipped_files: list[SkippedFile]
    failing_files: list[FailingFile]
    decorations: dict[str, Decoration]
    panels: list[PanelInfo] = []  # the role panels that draw a role of the run's metrics, in the page's order
    stop: StopState | None = None  # the last stop request and what became of it; None when none is known


class Series(Answer):
    """One metric's points: raw, or buckets by step range (`downsampled`: then `min`, `max`, `first`,
    `last` and `nonfinite` per bucket too)."""

    metric: str
    steps: list[int]
    values: list[float | None]
    downsampled: bool
    total_points: int
    run: str | None = None
    min: list[float | None] | None = None
    max: list[float | None] | None = None
    first: list[float | None] | None = None
    last: list[float | None] | None = None
    nonfinite: list[int] | None = None


class SeriesAnswer(Answer):
    """`GET /api/runs/{run}/metrics`."""

    run: str
    series: list[Series]


class EpochRow(Answer):
    epoch: int
    mean: float | None
    std: float | None
    min: float | None
    max: float | None
    points: int


class Epochs(Answer):
    """`GET /api/runs/{run}/epochs`."""

    run: str
    metric: str
    epoch_metric: str | None
    epochs: list[EpochRow]


class QuarantinedLine(Answer):
    path: str
    segment: int | None
    line: int | None
    reason: str
    text: str | None


class ReplacedPoint(Answer):
    step: int
    value: float | None
    segment: int | None
    source_id: int | None
    replaced_at: float | None


class ConfigDifference(Answer):
    key: str
    values: dict[str, Any]


class StopInForce(Answer):
    """The stop request in force (`RUN_DIR/runwatch.stop`, see `collector.core.stop_request`); one written by
    hand may hold any fields."""

    reason: str | None = None
    by: str | None = None  # rule, person


class StopAnswer(Answer):
    """`POST /api/runs/{run}/stop`."""

    run: str
    path: str
    request: StopInForce
    written: bool


# ---- advice -------------------------------------------------------------------------------------------


class Checkpoint(Answer):
    """A checkpoint of the advice; an inferred one (a save the run's files imply, no folder seen) may have no
    `complete`/`bytes`."""

    step: int
    path: str | None = None
    complete: bool | None = None
    bytes: int | None = None
    value: float | None = None
    inferred: bool = False
    inferred_from: str | None = None
    evaluated_at: int | None = None


class Recommended(Answer):
    step: int
    path: str | None
    reason: str
    tie: dict | None = None  # the tie the choice broke: {"steps", "noise", "rule"}


class Kept(Answer):
    """A seen checkpoint that is not safe to delete, and why (`the grad_spike action resumes from it`)."""

    step: int
    why: str


class Advice(Answer):
    """`GET /api/runs/{run}/checkpoints`."""

    recommended: Recommended | None
    checkpoints: list[Checkpoint]
    deletable: list[int]
    kept: list[Kept] = []  # (an older collector's answer has none)
    frees_bytes: int | None
    metric: str | None
    direction: str | None
    no_recommendation: str | None
    never_learned: bool | None = None
    interrupted_save: int | None = None
    status: str | None = None  # status.json's state, when there is one


class ChecklistItem(Answer):
    """One item of `GET /api/runs/{run}/health`."""

    id: str
    phase: str  # start, checkpoint, end
    title: str
    state: str  # pass, fail, unknown
    evidence: str


# ---- alerts -------------------------------------------------------------------------------------------


class Action(Answer):
    """What to do about an alert: the checkpoint to go back to, the command that resumes from it; `keep`,
    `run` and `why` say it in three short lines (the command itself is `command`), `text` in one paragraph."""

    checkpoint: Checkpoint | None
    trainer: str
    trainer_evidence: str
    command: str | None
    restart_step: int | None
    skip_steps: list[int] | None
    advice_step: int | None
    text: str
    keep: str
    run: str
    why: str


class Alert(Answer):
    """One alert of `GET /api/alerts`."""

    id: int
    run: str
    rule: str
    severity: str  # info, warn, error
    metric: str | None
    first_step: int
    last_step: int
    state: str  # open, acked, resolved
    message: str
    value: float | None
    note: str | None
    active: bool | None = None
    evidence: dict[str, Any] | None = None
    created_at: float | None
    updated_at: float | None
    action: Action | None = None


class HistoryEntry(Answer):
    at: float | None
    event: str
    state: str
    note: str | None


class AlertDetail(Alert):
    """`GET /api/alerts/{id}`, and the answer of ack and resolve (without `action`)."""

    history: list[HistoryEntry]


class Escalation(Answer):
    step: int
    severity: str


class Incident(Answer):
    """One incident of `GET /api/incidents`: one trouble of one run, its alerts as evidence."""

    id: int
    run: str
    rule: str  # the cause
    metric: str | None
    severity: str
    state: str
    first_step: int
    last_step: int
    message: str
    rules: list[str]
    metrics: list[str]
    alert_count: int
    alert_ids: list[int]
    steps: list[int]
    worst_value: float | None
    worst_step: int | None
    points: int
    escalations: list[Escalation]
    action: Action | None = None
    change: AlertChangeState | None = None  # team: the last ack or resolve asked through the lake


class IncidentChange(Answer):
    """The answer of acknowledging or resolving an incident (all of its alerts): the alerts whose state
    changed, and the incident afterwards."""

    changed: list[int]
    incident: Incident
    # On a team's lake (`serve --store` without roots): the alerts whose change was asked of the collector that
    # owns the run, and the state asked; `changed` is empty there.
    requested: list[int] | None = None
    state_requested: str | None = None


# ---- answers that combine the above ---------------------------------------------------------------------


class RunView(RunDetail):
    """`GET /api/runs/{run}/view`: the run page's first view."""

    series: list[Series]
    alerts: list[Alert]
    incidents: list[Incident] = []
    checkpoint_steps: list[int]


class Compare(Answer):
    """`GET /api/compare`."""

    runs: list[RunDetail]
    config_diff: list[ConfigDifference]


# ---- the training platform's monitoring routes (collector.api.routes.monitoring) ---------------------------


class JobMetrics(Answer):
    """`GET /api/monitoring/{job_id}/metrics`: one record per step (`step`, `timestamp`, the step's metrics)."""

    job_id: str
    start_step: int
    end_step: int | None
    metrics: list[dict[str, Any]]
    total: int
    truncated: bool
    next_start_step: int | None


class JobAnomalies(Answer):
    """`GET /api/monitoring/{job_id}/metrics/anomalies`: the run's incidents."""

    job_id: str
    anomalies: list[Incident]


class JobSync(Answer):
    """`POST /api/monitoring/{job_id}/metrics/sync`."""

    job_id: str
    queued: list[str]


# `GET /api/runs/{run}/stream` answers server-sent events, not one JSON document: its 200 is text, one
# `data: {...}` line per event (live: `{"step", "metric", "value"}`; a playback: the events of
# `collector.api.playback`, each named by an `event:` line).
EVENT_STREAM = {
    "type": "string",
    "description": 'text/event-stream: `data: {"step", "metric", "value"}` per point (live), or a '
    "playback's events (playback_info, point, alert, progress, playback_complete)",
}
