"""Spike rules: a point far above its metric's recent robust baseline (median and MAD over a window).

`grad_spike` (and vanishing gradients) and `step_time_spike`, each with its backlog screen before it
(`loss_spike` is in `collector.detect.loss_spike`, `kl_spike` in `collector.detect.kl`).
Each class is fed one finite point at a time; see `collector.detect.base` for the verdict protocol.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from collector.core.facts import RunFacts
from collector.core.model import BEFORE_ALL_STEPS
from collector.core.severity import Severity
from collector.detect.base import (
    HOLD,
    Action,
    Finding,
    Rule,
    Verdict,
    Window,
    fmt,
    median_of_sorted,
    robust_z,
)
from collector.detect.screening import Screen, ScreenContext, extend_window, first, scheduled_medians


@dataclass(frozen=True)
class GradSpikeRule:
    enabled: bool = True
    window: int = 50  # points in the robust baseline (median/MAD)
    min_history: int = 2  # points needed before judging: early spikes matter most
    # ...except for a model trained from a fresh initialisation (its first loss at ln(vocab size)), whose
    # first gradient norms are large and jumpy by nature: it is judged after its warmup steps when the run
    # says how many, else after this many points (an explosion above `abs_max` is never held back)
    fresh_min_points: int = 20
    z: float = 8.0  # robust z-score (MAD scaled to sigma) above the median
    ratio: float = 3.5  # and at least this many times the median...
    # ...and this many times the median of the last `level_points` baseline points: a gradient norm that climbs
    # to a new level over a few steps (as the loss starts to fall) is a level shift, not a spike
    level_points: int = 10
    abs_max: float = (
        100.0  # above this for `abs_for` points is a spike whatever the baseline (the chart's warning line)
    )
    normal_min: float = (
        0.1  # healthy fine-tuning grad norms lie between these (the chart's normal band, health)
    )
    normal_max: float = 10.0
    abs_for: int = 3
    sustained_points: int = 5  # spike points in a row that make it an error
    # the noise model: a point is a spike only when it also exceeds this many times the window's
    # `tail_quantile` (a per-step log of small batches reaches 2-5x its median routinely)
    tail_ratio: float = 1.5
    tail_quantile: float = 0.95
    tail_points: int = 200  # ...of this many recent points, spikes included (a series that often jumps)
    settle_points: int = 10  # the first logged points only fill the baseline (start-up is jumpy)...
    settle_warmup_factor: float = 2.0  # ...and so do the steps up to this many times the lr warmup
    # one spike point is a notice (info); this many times the median (and above `normal_max`), a warning...
    warn_ratio: float = 10.0
    warn_after_points: int = 2  # ...and so are this many spike points in a row, unless the run's recent
    routine_points: int = 3  # points (spikes included) hold this many of at least `routine_fraction` of it:
    routine_fraction: float = 0.5  # a size the run often reaches is its noise (a notice, until it lasts)
    loss_jump_window: int = 10  # a loss spike within this many points after makes it an error
    vanish_ratio: float = 1000.0  # below median / this for `vanish_for` points: vanishing gradients
    vanish_for: int = 5
    clear_after: int = 5


@dataclass(frozen=True)
class StepTimeSpikeRule:
    enabled: bool = True
    window: int = 50
    min_history: int = 5
    ratio: float = 3.0
    z: float = 6.0
    abs_max_seconds: float = 30.0  # over 30 s is a spike when the usual step is much shorter
    abs_ratio: float = 1.5
    warn_ratio: float = 10.0  # a single slow step is a notice (info); this many times the median, a warning
    warn_after_points: int = 3  # slow steps in one episode that make a notice a warning...
    error_after_points: int = 20  # ...and an error
    clear_after: int = 3


class GradSpikeScreen(Screen):
    def ready(self, rule, ctx: ScreenContext) -> bool:
        w, cfg, facts = rule.window, rule.cfg, ctx.facts
        if len(w.vals) != w.vals.maxlen or len(w.vals) < cfg.min_history:
            return False
        if facts.fresh_init is None and (facts.settings.get("vocab_size") or 0) > 1:
            return False  # the first loss may still make it a fresh model, whose first points are held
        if facts.fresh_init and not facts.settings.get("warmup_steps") and len(w.vals) < cfg.fresh_min_points:
            return False
        # a window replaced by the recent points (a new level) happens only with spikes among them
        return 2 * sum(flag for _, _, flag in rule.recent) < rule.recent.maxlen

    def quiet(self, rule, steps, values, ctx) -> int:
        cfg = rule.cfg
        sized = values != 0.0  # an exact zero is quiet and stays out of the window (GradSpike.feed)
        steps, values = steps[sized], values[sized]
        mids = scheduled_medians(rule.window, values)
        hot = (values > cfg.abs_max) | (values > cfg.ratio * mids)
        hot |= (mids > 0) & (values > 0) & (values < mids / cfg.vanish_ratio)
        warmup = ctx.facts.settings.get("warmup_steps")
        if ctx.facts.fresh_init and warmup:
            hot |= steps <= warmup
        at = first(hot)
        return len(sized) if at == len(hot) else int(np.flatnonzero(sized)[at])

    def advance(self, rule, steps, values, ctx) -> None:
        sized = values != 0.0
        steps, values = steps[sized], values[sized]
        extend_window(rule.window, steps, values, median=True, noise=False)
        recent = rule.recent
        m = recent.maxlen
        recent.extend((s, v, False) for s, v in zip(steps[-m:].tolist(), values[-m:].tolist(), strict=True))
        flags = [flag for _, _, flag in recent]
        rule.spikes = sum(flags[1:]) if len(recent) == m else sum(flags)
        h = rule.history.maxlen
        rule.history.extend(zip(steps[-h:].tolist(), values[-h:].tolist(), strict=True))
        rule.above_abs = rule.vanishing = rule.consecutive = 0


class GradSpike(Rule):
    """grad_norm far above its robust baseline, above an absolute ceiling for several points, or vanishing."""

    rule_id = "grad_spike"
    roles = ("grad_norm",)
    settings = GradSpikeRule
    severities = (Severity.INFO, Severity.WARN, Severity.ERROR)
    screen = GradSpikeScreen()
    recurs = True  # incidents: its spikes come back; one incident per metric per run, with a count
    unsafe_checkpoint = True
    action = Action.SKIP_BATCHES
    meaning = "the updates there followed a gradient spike"

    @classmethod
    def decorations(cls, settings: GradSpikeRule) -> dict[str, dict]:
        """The healthy band of a gradient norm and the ceiling above which it is trouble."""
        return {
            "grad_norm": {
                "normal_band": [settings.normal_min, settings.normal_max],
                "warning_line": settings.abs_max,
            }
        }

    def __init__(self, metric: str, cfg: GradSpikeRule) -> None:
        self.metric, self.cfg = metric, cfg
        self.clear_after = cfg.clear_after
        self.window = Window(cfg.window)
        self.above_abs = 0
        self.vanishing = 0
        self.recent: deque[tuple[int, float, bool]] = deque(maxlen=max(2, cfg.window))
        self.spikes = 0  # spike points among `recent`
        self.consecutive = 0  # spike points in a row up to the last one
        self.history: deque[tuple[int, float]] = deque(maxlen=max(2, cfg.tail_points))  # spikes included
        # the last step held back as start-up: the noise model starts after it
        self.settled_after = BEFORE_ALL_STEPS

    def rewind(self, step: int) -> None:
        self.window.rewind(step)
        self.above_abs = self.vanishing = self.spikes = self.consecutive = 0
        self.recent.clear()
        while self.history and self.history[-1][0] >= step:
            self.history.pop()

    def feed(self, step: int, value: float, facts: RunFacts) -> Verdict:
        cfg = self.cfg
        if value == 0.0:
            # an exact zero is a step without an update (a GRPO batch whose groups each got one reward: zero
            # advantages), not a size of the gradient: in the baseline it would drag the median to 0 and make
            # every later gradient "infinitely" above it; `no_learning` judges the steps without updates
            self.above_abs = self.vanishing = self.consecutive = 0
            return None
        self.above_abs = self.above_abs + 1 if value > cfg.abs_max else 0
        enough = len(self.window.vals) >= cfg.min_history
        mid = self.window.median() if enough else 0.0
        verdict = self._verdict(step, value, enough, mid, facts)
        spike = isinstance(verdict, Finding) and verdict.evidence.get("kind") != "vanishing"
        if not isinstance(verdict, Finding):
            self.window.add(step, value)  # flagged points stay out of the baseline they are judged against
        self.recent.append((step, value, spike))
        self.history.append((step, value))
        self.consecutive = self.consecutive + 1 if spike else 0
        self.spikes += spike
        if len(self.recent) == self.recent.maxlen:
            if 2 * self.spikes >= len(self.recent):
                # spiking for half a window or more: this is the new level (unfrozen layers, a new data mix)
                self.window.replace((s, v) for s, v, _ in self.recent)
                self.recent.clear()
                self.spikes = 0
            else:
                self.spikes -= self.recent[0][2]
        return verdict

    def _tail(self) -> float:
        """The `tail_quantile` of the recent values, spikes included (a series that often jumps makes its
        jumps normal: the noise model); the baseline window's when the recent values are fewer."""
        history, after = self.history, self.settled_after
        # the points before the latest few (an episode under way does not raise its own bar), after start-up
        values = sorted(
            history[i][1]
            for i in range(max(0, len(history) - 2 * self.cfg.sustained_points))
            if history[i][0] > after
        )
        if len(values) < max(1, self.cfg.settle_points):
            return self.window.quantile(self.cfg.tail_quantile)
        return values[min(len(values) - 1, int(self.cfg.tail_quantile * (len(values) - 1) + 0.5))]

    def _recent_level(self) -> float:
        """The median of the last `level_points` baseline points (flagged points are not among them, so a
        spike episode does not raise its own bar; the level a series climbed to step by step does)."""
        vals = self.window.vals
        recent = sorted(vals[i] for i in range(max(0, len(vals) - self.cfg.level_points), len(vals)))
        return median_of_sorted(recent) if recent else 0.0

    def _routine(self, value: float) -> bool:
        """Whether the run's recent points (spikes included, the latest few and start-up left out) reached
        `routine_fraction` of `value` at least `routine_points` times: spikes of this size are its noise."""
        history, cfg = self.history, self.cfg
        floor, found = cfg.routine_fraction * value, 0
        for i in range(max(0, len(history) - 2 * cfg.sustained_points)):
            step, seen = history[i]
            if step > self.settled_after and seen >= floor:
                found += 1
                if found >= cfg.routine_points:
                    return True
        return False

    def _finding_its_feet(self, step: int, facts: RunFacts) -> bool:
        """Whether a freshly initialised model is still in its first, naturally jumpy steps."""
        warmup = facts.settings.get("warmup_steps")
        if warmup:
            return step <= warmup
        return len(self.window) < self.cfg.fresh_min_points

    def _verdict(self, step: int, value: float, enough: bool, mid: float, facts: RunFacts) -> Verdict:
        cfg = self.cfg
        if self.above_abs >= cfg.abs_for:
            return Finding(
                Severity.ERROR,
                value,
                f"{self.metric} peaked at {fmt(value)} at step {step}, above {fmt(cfg.abs_max)} for "
                f"{cfg.abs_for} or more logged points in a row: the updates are exploding. Likely causes: learning rate too high, "
                f"no or too loose gradient clipping, bad batches, fp16 overflow. Check: lower the lr or clip "
                f"gradients (max_grad_norm 1.0), inspect the data at these steps, resume from the last good checkpoint.",
                {"ceiling": cfg.abs_max, "points_above": self.above_abs},
                peak=True,
            )
        if not enough or (facts.fresh_init and self._finding_its_feet(step, facts)):
            self.settled_after = step
            return HOLD
        # the MAD is worked out only for a point far enough above the median to be a spike
        high = (
            value > cfg.ratio * mid
            and value > cfg.tail_ratio * self._tail()
            and value > cfg.ratio * self._recent_level()
        )
        mad = self.window.mad() if high else 0.0
        z = robust_z(value, mid, mad, floor=0.05 * abs(mid)) if high else 0.0
        if high and z >= cfg.z:
            self.vanishing = 0
            if len(self.window) < cfg.settle_points or facts.settling(step, cfg.settle_warmup_factor):
                self.settled_after = step
                return HOLD  # start-up and warmup: grad norms are still finding their level
            # one point is a notice; points in a row, or one far above the median, the noise and the normal
            # band, a warning (unless the run often reaches that size); `sustained_points` in a row, an error
            tail, run = self._tail(), self.consecutive + 1
            if run >= cfg.sustained_points:
                severity = Severity.ERROR
            elif not self._routine(value) and (
                run >= cfg.warn_after_points or value >= max(cfg.warn_ratio * max(mid, tail), cfg.normal_max)
            ):
                severity = Severity.WARN
            else:
                severity = Severity.INFO
            return Finding(
                severity,
                value,
                f"{self.metric} peaked at {fmt(value)} at step {step}, {fmt(value / mid if mid else float('inf'))}x "
                f"its median {fmt(mid)} (robust z {fmt(z)}). Likely causes: a bad or unusually long batch, "
                f"learning rate too high for this phase, loss-scale overflow. Check the loss at the next steps; "
                f"if it jumps too, lower the lr or tighten gradient clipping and resume from the checkpoint before.",
                {
                    "baseline_median": mid,
                    "mad": mad,
                    "z": z,
                    "threshold_ratio": cfg.ratio,
                    "window": len(self.window),
                    "tail": self._tail(),
                },
                peak=True,
            )
        if mid > 0 and 0 < value < mid / cfg.vanish_ratio:
            self.vanishing += 1
            if self.vanishing >= cfg.vanish_for:
                return Finding(
                    Severity.WARN,
                    value,
                    f"{self.metric} = {fmt(value)} at step {step}, over {fmt(cfg.vanish_ratio)}x below its recent "
                    f"median {fmt(mid)} for {self.vanishing} points: gradients are vanishing. Likely causes: "
                    f"frozen or detached parameters, a collapsed loss scale, saturated activations. Check which "
                    f"parameters require grad and the loss scale.",
                    {"baseline_median": mid, "kind": "vanishing", "points": self.vanishing},
                )
            return HOLD
        self.vanishing = 0
        return None


def excused(steps: np.ndarray, ctx: ScreenContext) -> np.ndarray:
    """Points whose step (or the step before) may be a save or evaluation step."""
    ex = ctx.excused
    if len(ex):
        hot = ex[np.minimum(np.searchsorted(ex, steps), len(ex) - 1)] == steps
        hot |= ex[np.minimum(np.searchsorted(ex, steps - 1), len(ex) - 1)] == steps - 1
    else:
        hot = np.zeros(len(steps), dtype=bool)
    for freq in ctx.facts._rhythm:
        hot |= ((steps > 0) & (steps % freq == 0)) | ((steps > 1) & ((steps - 1) % freq == 0))
    return hot


class StepTimeSpikeScreen(Screen):
    """Judged one step late: the point fed at i judges the one before it (the pending point)."""

    def ready(self, rule, ctx) -> bool:
        w = rule.window
        return (
            rule.pending is not None and len(w.vals) == w.vals.maxlen and len(w.vals) >= rule.cfg.min_history
        )

    def _judged(self, rule, steps, values) -> tuple[np.ndarray, np.ndarray]:
        s0, v0 = rule.pending
        return (np.concatenate([np.array([s0], dtype=np.int64), steps[:-1]]),
                np.concatenate([np.array([v0], dtype=np.float64), values[:-1]]))  # fmt: skip

    def quiet(self, rule, steps, values, ctx) -> int:
        cfg = rule.cfg
        j_steps, j_values = self._judged(rule, steps, values)
        mids = scheduled_medians(rule.window, j_values)
        # over `abs_max_seconds` counts only well above the median too: an RL step takes a minute every step
        absolute = (j_values > cfg.abs_max_seconds) & (j_values > cfg.abs_ratio * mids)
        hot = (j_values > cfg.ratio * mids) | absolute | excused(j_steps, ctx)
        return first(hot)

    def advance(self, rule, steps, values, ctx) -> None:
        if not len(values):
            return
        j_steps, j_values = self._judged(rule, steps, values)
        extend_window(rule.window, j_steps, j_values, median=True, noise=False)
        rule.pending = (int(steps[-1]), float(values[-1]))


class StepTimeSpike(Rule):
    """Time per step far above its median, judged one step late so a validation at that step is known."""

    rule_id = "step_time_spike"
    roles = ("step_time",)
    settings = StepTimeSpikeRule
    severities = (Severity.INFO, Severity.WARN, Severity.ERROR)
    screen = StepTimeSpikeScreen()
    about_weights = False  # a slow step judges the run, not the weights saved meanwhile
    recurs = True

    def __init__(self, metric: str, cfg: StepTimeSpikeRule) -> None:
        self.metric, self.cfg = metric, cfg
        self.clear_after = cfg.clear_after
        self.window = Window(cfg.window)
        self.pending: tuple[int, float] | None = None
        self.spike_steps: deque[int] = deque(maxlen=8)

    def rewind(self, step: int) -> None:
        self.window.rewind(step)
        if self.pending is not None and self.pending[0] >= step:
            self.pending = None

    def feed(self, step: int, value: float, facts: RunFacts) -> Verdict:
        # a validation record for step N is written after step N's timing: judge N when N+1 arrives
        pending, self.pending = self.pending, (step, value)
        if pending is None:
            return HOLD
        return self._judge(*pending, facts)

    def _judge(self, step: int, value: float, facts: RunFacts) -> Verdict:
        cfg = self.cfg
        excused = facts.is_save_or_eval_step(step)
        if excused:
            return HOLD  # saving a checkpoint or validating makes this step slow by design
        enough = len(self.window.vals) >= cfg.min_history
        mid = self.window.median() if enough else 0.0
        self.window.add(step, value)
        if not enough:
            return HOLD
        absolute = value > cfg.abs_max_seconds and value > cfg.abs_ratio * mid
        high = mid > 0 and value > cfg.ratio * mid
        if not (high or absolute):
            return None  # the MAD matters only for a slow step
        z = robust_z(value, mid, self.window.mad(), floor=0.05 * abs(mid))
        relative = high and z >= cfg.z
        if relative or absolute:
            periodic = self._periodic(step)
            self.spike_steps.append(step)
            if periodic:
                return HOLD  # slow every N steps (epoch ends, periodic logging or saving): the run's rhythm
            # one slow step is a notice; ten times the usual, or a run that stays slow, is a warning
            severity = Severity.WARN if mid > 0 and value >= cfg.warn_ratio * mid else Severity.INFO
            return Finding(
                severity,
                value,
                f"{self.metric} peaked at {fmt(value)} s at step {step}, {fmt(value / mid if mid else float('inf'))}x "
                f"its median {fmt(mid)} s (not a save or validation step). Likely causes: another job on the "
                f"machine, data loading stalls, memory swapping, a slow filesystem. Check the machine's load, "
                f"the data loader workers and free memory.",
                {"baseline_median": mid, "z": z, "abs_max_seconds": cfg.abs_max_seconds},
                warn_after_points=cfg.warn_after_points,
                error_after_points=cfg.error_after_points,
                at_step=step,
                peak=True,
            )
        return None

    def _periodic(self, step: int) -> bool:
        """Whether this slow step falls on the rhythm of the earlier ones (3 or more, a common period >= 4)."""
        if len(self.spike_steps) < 2:
            return False
        steps = list(self.spike_steps)
        period = 0
        for a, b in zip(steps, steps[1:], strict=False):
            period = math.gcd(period, b - a)
        return period >= 4 and (step - steps[-1]) % period == 0
