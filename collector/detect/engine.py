"""The per-run detection engine: feeds points to the rules as they arrive and turns verdicts into episodes.

Stable interface (the collector calls this; see docs/architecture.md):

- `AlertEvent`: one event for one episode (rule, severity, metric, first_step, last_step, value, message,
  active, evidence). Episode identity is (run, rule, metric, first_step): every event of one episode carries
  the same first_step, so the store upserts. `active=False` means the condition cleared (auto-resolve).
  Spike rules (`grad_spike`, `loss_spike`, `kl_spike`, `step_time_spike`) report the episode's peak:
  `value` and the message are the highest point's, with `evidence.peak` and `evidence.peak_step`.
- `RunDetector(run_id, config=None, run_info=None)`: `config` a `RuleSettings` (None: the defaults; the
  collector passes runwatch.toml's `collector.settings.config.DetectConfig`, which is one):
  - `update(points) -> list[AlertEvent]`: incremental; points arrive in file order in batches; state per
    metric is bounded (windows of a few dozen points). A point for a step already seen replaces it: the
    same value again (a whole-file re-read of trainer_state.json, or TensorBoard's float32 copy of its float64
    value) is skipped; a different value rewinds that metric's windows to the step (a resumed run rewriting its
    history). One event per changed episode per call.
  - `set_run_info(run_info)`: run.json / trainer_state info (scheduler, warmup, total steps, vocab size,
    save_freq / test_freq...).
  - `note_checkpoints(steps)`: steps with a saved checkpoint (their slow steps are normal).
  - `tick(now, status, last_point_wall) -> list[AlertEvent]`: time-based rules (`stalled`).
  - `note_outcome(status, status_info) -> list[AlertEvent]`: `run_failed` while the run's files say it failed.
  - `open_episodes() -> list[AlertEvent]`: the episodes open now.
  - `note_times(walls)`: the run's pace from its latest points' wall times, without judging them.
  - `resume_episodes(alerts)`: reattach stored open episodes (the daemon does so for `run_failed` and
    `stalled` once it has judged a run's stored points again after a restart).
  Pure: no I/O, no clock; time is passed in.
- `detect_series(series, config=None, run_info=None) -> list[AlertEvent]`: every episode (open or closed) of a
  run given as plain lists, `{metric: (steps, values)}`; for tests and one-off reports.
"""

from __future__ import annotations

from collections import deque
from math import isfinite
from statistics import median

from collector.core.facts import RunFacts
from collector.core.model import Points, same_point
from collector.core.roles import RL_ROLES, role_of, value_scale
from collector.core.severity import Severity
from collector.detect.base import HOLD, Finding, Rule
from collector.detect.episodes import AlertEvent, Episodes
from collector.detect.rule_settings import RuleSettings
from collector.detect.rules import rules_for
from collector.detect.runlevel import (
    NONFINITE,
    RUN_FAILED,
    STALLED,
    nonfinite_finding,
    run_failed_finding,
    stall_finding,
)

__all__ = ["AlertEvent", "RunDetector", "detect_series"]

_RECENT = 64  # per metric: steps remembered to recognise a re-read point
_RECENT_LIMIT = 2 * _RECENT


class _Metric:
    """Per-metric bookkeeping: the rules that read it and the recent steps (to recognise re-reads)."""

    __slots__ = ("rules", "judged", "nonfinite_key", "role", "scale", "last_step", "recent", "noted")

    def __init__(self, metric: str, rules: list[Rule], role: str | None, scale: float) -> None:
        self.set_rules(metric, rules)
        self.nonfinite_key = (NONFINITE, metric)
        self.role = role
        self.scale = scale
        # whether the run-level facts read this metric's values (loss level, lr, step times, eval steps)
        self.noted = role in ("loss", "lr", "step_time", "val_loss", "val_score", "eval_metric")
        self.last_step: int | None = None
        self.recent: dict[int, float] = {}

    def set_rules(self, metric: str, rules: list[Rule]) -> None:
        self.rules = rules
        # (rule, its episode key, clear_after) built once: a backfill judges millions of points
        self.judged = [(rule, (rule.rule_id, metric), rule.clear_after) for rule in rules]


class RunDetector:
    """Incremental detection for one run. Pure: no I/O, no clock."""

    def __init__(self, run_id: str, config: RuleSettings | None = None, run_info: dict | None = None) -> None:
        self.run_id = run_id
        self.config = config or RuleSettings()
        self._metrics: dict[str, _Metric] = {}
        self.episodes = Episodes(run_id)
        # what the rules know of the run beyond their metric; filled here, read by the rules
        self.facts = RunFacts(self.config.rules.val_loss_rise.train_window, self.episodes.open_by_key)
        self.last_step: int | None = None
        self._last_wall: float | None = None
        self._intervals: deque[float] = deque(maxlen=50)
        self._step_times: deque[float] = deque(maxlen=50)
        self._step_gaps: deque[int] = deque(maxlen=50)
        if run_info:
            self.set_run_info(run_info)

    # ----- facts the rules read -----

    def set_run_info(self, run_info: dict) -> None:
        """Take run settings (scheduler, warmup, total steps, vocab size, save/eval frequency) from run info."""
        self.facts.set_run_info(run_info)

    def note_checkpoints(self, steps: list[int]) -> None:
        """Remember steps with a saved checkpoint: a slow step there is the save, not trouble."""
        self.facts.note_checkpoints(steps)

    def set_config(self, config: RuleSettings) -> None:
        """Judge from now on with these thresholds (a runwatch.toml changed). Open episodes stay open; each
        metric's rules start afresh, so their windows refill from the next points before they judge."""
        if config is self.config or config == self.config:
            return
        self.config = config
        self.facts.set_train_window(config.rules.val_loss_rise.train_window)
        for metric, state in self._metrics.items():
            state.set_rules(metric, rules_for(metric, state.role, config))

    def resume_episodes(self, alerts: list[dict]) -> None:
        """Reattach episodes the store still holds open (after a restart), as dicts with rule, severity,
        metric, first_step, last_step, value, message (and evidence): a finding of the same rule on the same
        metric continues that episode, with its first_step, instead of opening a second alert; if the
        condition has cleared, the replayed points close it (an event with active=False).
        """
        self.episodes.resume(alerts)

    def open_episodes(self) -> list[AlertEvent]:
        """The episodes open now, latest state of each."""
        return self.episodes.open_events()

    # ----- the incremental path -----

    def update(self, points: Points, flush: bool = True) -> list[AlertEvent]:
        """Feed a batch of points (file order); return one event per episode opened, changed or closed.

        `flush=False` keeps the events for the next call (the batch goes on: an incident's episodes not
        handed out yet still fold into one).
        """
        facts = self.facts
        if not facts.is_rl:
            facts.is_rl = any(role_of(m) in RL_ROLES for m in set(points.metric))
        fed = False
        metrics = self._metrics
        is_open = self.episodes.open_by_key  # misses only matter to open episodes: skip the call otherwise
        nonfinite_on = self.config.rules.nonfinite.enabled
        nonfinite_cfg = self.config.rules.nonfinite
        nonfinite_clear = nonfinite_cfg.clear_after
        for step, metric, value, wall in zip(
            points.step, points.metric, points.value, points.wall_time, strict=True
        ):
            state = metrics.get(metric)
            if state is None:
                role = role_of(metric)
                state = metrics[metric] = _Metric(
                    metric, rules_for(metric, role, self.config), role, value_scale(metric)
                )
            if state.last_step is not None and step <= state.last_step:
                seen = state.recent.get(step)
                if seen is None or same_point(seen, value):
                    continue  # a re-read of what we judged (or older than we remember)
                for rule in state.rules:
                    rule.rewind(step)
                state.recent = {s: v for s, v in state.recent.items() if s < step}
            state.last_step = step
            state.recent[step] = value
            if len(state.recent) > _RECENT_LIMIT:  # pruned in bulk: cheaper than one deletion per point
                state.recent = dict(list(state.recent.items())[-_RECENT:])
            if self.last_step is None or step > self.last_step:
                self._note_step(step, wall)
            fed = True
            if not isfinite(value):
                if nonfinite_on:
                    finding = nonfinite_finding(
                        metric, step, value, nonfinite_cfg, state.role, facts.is_rl, facts.settings,
                        self.episodes.run_of(state.nonfinite_key, step), facts.last_train_loss() == 0.0,
                    )  # fmt: skip
                    if not self.episodes.join_incident(state.nonfinite_key, finding, step):
                        self.episodes.hit(state.nonfinite_key, finding, step)
                continue
            if state.nonfinite_key in is_open:
                self.episodes.miss(state.nonfinite_key, nonfinite_clear)
            if state.judged or state.noted:  # most logged metrics (mfu, tokens, memory) have no rule
                self._judge(metric, state, step, value)
        if fed:
            self.episodes.close((STALLED, ""))  # points arrived: the run is moving again
        return self.episodes.flush() if flush else []

    def tick(self, now: float, status: dict | None, last_point_wall: float | None) -> list[AlertEvent]:
        """Time-based rules: `stalled` when the status says running but no point came for far too long."""
        cfg = self.config.rules.stalled
        key = (STALLED, "")
        state = str((status or {}).get("status", (status or {}).get("state", ""))).lower()
        finding = None
        if last_point_wall is None:
            # no point yet: the status file's own time says when the trainer last wrote
            updated = (status or {}).get("updated_at")
            last_point_wall = float(updated) if isinstance(updated, int | float) else None
        if cfg.enabled and state == "running" and last_point_wall is not None:
            last = self.last_step
            pause = last is not None and (
                self.facts.is_save_or_eval_step(last) or self.facts.is_save_or_eval_step(last + 1)
            )
            finding = stall_finding(cfg, now - last_point_wall, self._usual_interval(), pause, last)
        if finding is None:
            self.episodes.close(key)
        else:
            self.episodes.hit(key, finding, self.last_step or 0)
        return self.episodes.flush()

    def note_outcome(self, status: str | None, status_info: dict | None) -> list[AlertEvent]:
        """`run_failed` (an error quoting the error line) while the run's status facts say it failed (a log
        ending in an error, status.json `failed`); the episode closes when they no longer do (the log went on
        after a traceback that did not end the run)."""
        key = (RUN_FAILED, "")
        finding = None
        if self.config.rules.run_failed.enabled:
            finding = run_failed_finding(status, status_info, self.last_step)
        if finding is None:
            self.episodes.close(key)
        elif not self.episodes.is_open(key):
            self.episodes.hit(key, finding, self.last_step or 0)
        return self.episodes.flush()

    def note_times(self, walls: list[float | None]) -> None:
        """Learn the run's pace from its latest points' wall times (one a step, in step order) without judging
        them: a run judged again from stored points through the backlog path sees no time."""
        for wall in walls:
            if wall is None or wall != wall:
                continue
            if self._last_wall is not None and wall > self._last_wall:
                self._intervals.append(wall - self._last_wall)
            self._last_wall = wall

    def _usual_interval(self) -> float | None:
        """Seconds between logged points: from the points' wall times, else from the logged time per step."""
        if len(self._intervals) >= 3:
            return median(self._intervals)
        if len(self._step_times) >= 3:
            return median(self._step_times) * self._log_interval()
        return None

    def _note_step(self, step: int, wall: float | None) -> None:
        """A new latest step (called only when `step` is past `last_step`)."""
        if wall is not None and self._last_wall is not None and wall > self._last_wall:
            self._intervals.append(wall - self._last_wall)
        if wall is not None:
            self._last_wall = wall
        if self.last_step is not None:
            self._step_gaps.append(step - self.last_step)
        self.last_step = step

    def _judge(self, metric: str, state: _Metric, step: int, value: float) -> None:
        """Feed one finite point to the metric's rules and turn their verdicts into episodes."""
        episodes = self.episodes
        is_open = episodes.open_by_key
        if state.scale != 1.0:
            value *= state.scale
        facts = self.facts
        if state.noted:  # the run-level facts other rules read: loss level, lr, step times, evaluations
            role = state.role
            if role == "loss":
                facts.note_train_loss(value, self.config.rules.no_learning.ln_vocab_rel)
            elif role == "lr":
                facts.note_lr(value)
            elif role == "step_time":
                self._step_times.append(value)
            elif role in ("val_loss", "val_score", "eval_metric"):
                facts.note_eval(step, value if role == "val_loss" else None)
                facts.note_chosen(metric, step, value)
        for rule, key, clear_after in state.judged:
            verdict = rule.feed(step, value, facts)
            if verdict is HOLD:
                continue
            if verdict is None:
                if key in is_open:
                    episodes.miss(key, clear_after)
                continue
            self._found(rule, key, verdict, step, metric)

    def _found(self, rule: Rule, key: tuple[str, str], verdict: Finding, step: int, metric: str) -> None:
        """A rule's finding at `step` becomes (part of) an episode. What joins one alert is declared on the
        rule's class: `one_alert_across_metrics` (its findings on several metrics from one step are one alert)
        and `follows` (a finding within a few logged points after an episode of those rules, on the same
        metric when `follows_same_metric`, joins it: one alert names both)."""
        episodes = self.episodes
        # a user's custom rule declares none of these (it is no `Rule` subclass): the defaults
        if getattr(rule, "one_alert_across_metrics", False) and episodes.join_incident(key, verdict, step):
            return  # the same condition on another metric from the same step: one alert names both
        heads = getattr(rule, "follows", ())
        if heads:
            horizon = self.config.rules.grad_spike.loss_jump_window * max(1, self._log_interval())
            same_metric = getattr(rule, "follows_same_metric", False)
            joined = episodes.join_related(
                key, verdict, step, heads, metric if same_metric else None, horizon
            )
            if joined is not None:
                # a loss that jumped for more than one point (a warning) after a gradient spike: damage
                if key[0] == "loss_spike" and joined != Severity.INFO:
                    episodes.escalate_grad_spikes(verdict.at_step or step, metric, horizon)
                return
        if key[0] == "grad_spike" and episodes.adopt_same_step(key, verdict, step, "loss_spike"):
            return  # the loss logged first jumped at this very step: one incident, headed by the grad norm
        episodes.hit(key, verdict, step)
        # a loss that jumped for more than one point (a warning) after a gradient spike: the spike did damage
        if key[0] == "loss_spike" and episodes.open_by_key[key].event.severity != Severity.INFO:
            horizon = self.config.rules.grad_spike.loss_jump_window * max(1, self._log_interval())
            episodes.escalate_grad_spikes(verdict.at_step or step, metric, horizon)

    def _log_interval(self) -> int:
        """Steps between logged points (median of recent gaps; 1 before any)."""
        return int(median(self._step_gaps)) if self._step_gaps else 1


def detect_series(
    series: dict[str, tuple[list[int], list[float]]],
    config: RuleSettings | None = None,
    run_info: dict | None = None,
    run_id: str = "run",
    checkpoints: list[int] | None = None,
) -> list[AlertEvent]:
    """Every episode (open and closed, final state) of a run given as plain lists, points fed in step order."""
    detector = RunDetector(run_id, config, run_info)
    if checkpoints:
        detector.note_checkpoints(checkpoints)
    rows = sorted(
        (s, order, m, v)
        for order, (m, (steps, values)) in enumerate(series.items())
        for s, v in zip(steps, values, strict=True)
    )
    points = Points()
    for s, _, m, v in rows:
        points.add(s, m, v)
    latest: dict[tuple[str, str, int], AlertEvent] = {}
    for event in detector.update(points):
        latest[(event.rule, event.metric, event.first_step)] = event
    return sorted(latest.values(), key=lambda e: (e.first_step, e.rule, e.metric))
