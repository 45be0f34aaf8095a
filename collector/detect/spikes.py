"""Spike rules: a point far above its metric's recent robust baseline (median and MAD over a window).

`grad_spike` (and vanishing gradients), `loss_spike` (and divergence), `step_time_spike` (`kl_spike` is in
`collector.detect.rl`).
Each class is fed one finite point at a time; see `collector.detect.base` for the verdict protocol.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

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
from collector.detect.screens import GradSpikeScreen, StepTimeSpikeScreen
from collector.detect.screens_loss import LossSpikeScreen


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
class LossSpikeRule:
    enabled: bool = True
    window: int = 50
    min_history: int = 5
    level_points: int = 10  # the baseline level: median of the last 10 points (the loss trends)
    z: float = 6.0  # noise sigmas above that level (noise from point-to-point differences over `window`)
    rel_jump: float = 0.5  # and at least 50 % above the level...
    abs_jump: float = 0.1  # ...and 0.1 nats above it
    diverge_window: int = 10  # rolling median length for the divergence check
    diverge_rel: float = 0.3  # rolling median this much above its best so far = diverging
    diverge_for: int = 10  # for this many points
    diverge_error_points: int = (
        4  # a divergence found at this many trend checks (every half block) is an error
    )
    # a level shift: every one of the three blocks this much above the best (relative, and abs_jump) without
    # climbing: the loss jumped to a new level and stayed there; a warning at once, an error after this many
    # more trend checks (every half block)
    shift_rel: float = 1.0
    shift_error_points: int = 6
    tail_ratio: float = 1.5  # and a jump above this many times the `tail_quantile` of the window's own jumps
    tail_quantile: float = 0.95
    settle_points: int = 10  # the first logged points only fill the baseline
    warn_after_points: int = 2  # one high point is a notice (info); this many in one episode a warning
    # (0: never by count) a spike episode this long is an error; by default the damage is told on the gradient
    # spike before it (grad_spike turns error), and a loss that keeps rising is the divergence check's
    error_after_points: int = 0
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


class LossSpike(Rule):
    """The training loss far above its recent robust baseline, or diverging: rising block after block while
    far above its best, or jumped to a new level far above its best and staying there (a level shift)."""

    rule_id = "loss_spike"
    roles = ("loss",)
    settings = LossSpikeRule
    severities = (Severity.INFO, Severity.WARN, Severity.ERROR)
    screen = LossSpikeScreen()
    action = Action.SKIP_BATCHES
    meaning = "the loss had jumped there"
    recurs = True
    caused_by = ("grad_spike",)  # incidents: a loss jump after a gradient spike is that spike's incident
    follows = ("grad_spike",)  # one alert: a finding within a few points after a grad spike joins it
    follows_same_metric = False

    def __init__(self, metric: str, cfg: LossSpikeRule) -> None:
        self.metric, self.cfg = metric, cfg
        self.clear_after = cfg.clear_after
        self.window = Window(cfg.window, keep_sorted=False)  # only its point-to-point noise is read
        self.block = max(2, cfg.diverge_window)
        self.stride = max(1, self.block // 2)  # the trend is judged every half block: it moves slowly
        # three blocks of raw values: a rising trend is three block medians in increasing order, which a
        # single spike passing through a rolling window cannot fake
        self.recent: deque[float] = deque(maxlen=3 * self.block)
        self.level: deque[float] = deque(maxlen=max(1, cfg.level_points))
        self.seen = 0
        self.best_rolling: float | None = None
        self.best_step = 0
        self.rising = 0

    def rewind(self, step: int) -> None:
        self.window.rewind(step)
        self.recent.clear()
        self.level.clear()
        self.level.extend(self.window.values()[-self.level.maxlen :])
        self.rising = 0

    def feed(self, step: int, value: float, facts: RunFacts) -> Verdict:
        if facts.is_rl:
            return HOLD  # in RL runs "loss" is a policy loss: neither spikes nor trends mean much
        cfg = self.cfg
        enough = len(self.window.vals) >= cfg.min_history
        # the loss trends (fast, early on): its baseline is the median of the last few points, and its noise
        # comes from point-to-point differences, which a trend does not inflate
        if enough:
            mid = median_of_sorted(sorted(self.level))
            self.window.noise_due()
        else:
            mid = 0.0
        self.window.add(step, value)
        self.level.append(value)
        self.recent.append(value)
        self.seen += 1
        stride = self.stride
        latest = None  # the median of the newest block, at a trend check
        if len(self.recent) == self.recent.maxlen and self.seen % stride == 0:
            values = list(self.recent)
            latest = median_of_sorted(sorted(values[2 * self.block :]))
            if self.best_rolling is None or latest < self.best_rolling:
                self.best_rolling, self.best_step = latest, step
        if not enough:
            return HOLD
        jump = value - mid
        # the noise is worked out only for a jump big enough to matter
        big = jump >= cfg.rel_jump * abs(mid) and jump >= cfg.abs_jump
        if big:  # the noise model: above what the last `window` points reached, by a margin
            vals = list(self.window.vals)[:-1]  # the window holds this point already
            # jumps the loss made before (a trend moves every point the same way and inflates none of them)
            jumps = sorted(abs(b - a) for a, b in zip(vals, vals[1:], strict=False))
            tail = (
                jumps[min(len(jumps) - 1, int(cfg.tail_quantile * (len(jumps) - 1) + 0.5))] if jumps else 0.0
            )
            big = jump > cfg.tail_ratio * tail
        sigma = self.window.diff_noise() if big else 0.0
        z = (value - mid) / max(sigma, 0.01 * abs(mid), 1e-12) if big else 0.0
        if big and z >= cfg.z:
            if self.seen <= cfg.settle_points or facts.settling(step, 1.0):
                return HOLD  # start-up: the loss falls fast and jumps with it
            return Finding(
                Severity.INFO,
                value,
                f"{self.metric} peaked at {fmt(value)} at step {step}, {fmt(value / mid if mid else float('inf'))}x "
                f"its recent median {fmt(mid)} (robust z {fmt(z)}, a jump of {fmt(jump)}). Likely causes: a gradient spike just before, a bad batch, lr too high. "
                f"Check grad_norm around this step and the batch; if the loss does not come back within a few "
                f"steps, resume from the last good checkpoint with a lower lr.",
                {"baseline_median": mid, "noise_sigma": sigma, "z": z, "jump": jump},
                warn_after_points=cfg.warn_after_points,
                error_after_points=cfg.error_after_points or None,
                peak=True,
            )
        best = self.best_rolling
        if (
            latest is not None
            and best is not None
            and latest > best + max(cfg.diverge_rel * abs(best), cfg.abs_jump)
        ):
            k = self.block
            blocks = (
                median_of_sorted(sorted(values[:k])),
                median_of_sorted(sorted(values[k : 2 * k])),
                latest,
            )
            # each block above the one before by more than a block median's own wobble (~1.25 sigma / sqrt(k)):
            # three noisy medians fall in rising order by chance one time in six
            wobble = 1.25 * self.window.diff_noise() / math.sqrt(k)
            climbing = blocks[1] - blocks[0] > wobble and blocks[2] - blocks[1] > wobble
            # jumped to a new level and stayed: every block far above the best and not falling back (a spike's
            # recovery drops by a good part of its excess over two blocks; a level only wobbles)
            falling = blocks[0] - blocks[2] > max(2 * wobble, 0.1 * (blocks[0] - best))
            shifted = not falling and min(blocks) > best + max(cfg.shift_rel * abs(best), cfg.abs_jump)
            if not (climbing or shifted):
                self.rising = 0
                return HOLD  # far above its best but not climbing: recovering from a spike, not diverging
            self.rising += stride
            if self.rising >= cfg.diverge_for and not climbing:
                return self._level_shift(step, value, blocks)
            if self.rising >= cfg.diverge_for:
                return Finding(
                    Severity.INFO,
                    value,
                    f"{self.metric} is diverging: block medians {fmt(blocks[0])} -> {fmt(blocks[1])} -> "
                    f"{fmt(blocks[2])} to step {step}, far above its best {fmt(best)} at step {self.best_step}. "
                    f"Likely causes: lr too high, optimizer state corrupted after a spike, numerical instability. "
                    f"Stop the run and resume from the checkpoint near step {self.best_step} with a lower lr.",
                    {
                        "best_median": best,
                        "best_step": self.best_step,
                        "block_medians": list(blocks),
                        "kind": "diverging",
                    },
                    warn_after_points=2,  # still rising at the next trend check
                    error_after_points=cfg.diverge_error_points,
                )
            return HOLD
        if latest is None and self.rising:
            return HOLD  # between trend checks: keep the verdict of the last one
        self.rising = 0
        return None

    def _level_shift(self, step: int, value: float, blocks: tuple[float, float, float]) -> Finding:
        """The loss jumped to a new level, far above its best, and stays there: a divergence told once, a
        warning that becomes an error as it lasts."""
        best = self.best_rolling or 0.0
        times = f"{fmt(blocks[2] / best)}x " if best > 0 else ""
        return Finding(
            Severity.WARN,
            value,
            f"{self.metric} jumped to a new level and stays there: block medians {fmt(blocks[0])} -> "
            f"{fmt(blocks[1])} -> {fmt(blocks[2])} to step {step}, {times}its best {fmt(best)} at step "
            f"{self.best_step}. A loss that jumps and stays far above its best is a divergence (an update wrecked "
            f"the weights: lr too high, optimizer state corrupted after a spike, a broken data shard), not a "
            f"spike. Stop the run and resume from the checkpoint near step {self.best_step} with a lower lr.",
            {
                "best_median": best,
                "best_step": self.best_step,
                "block_medians": list(blocks),
                "kind": "level_shift",
            },
            error_after_points=self.cfg.shift_error_points,
        )


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
