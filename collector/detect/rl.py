"""RL rules: what a PPO/GRPO run's reward signals do.

`reward_collapse` (the reward's rolling median falling far below its best, every sample of a group getting
the same reward). Each class is fed one finite point at a time; see `collector.detect.base`.
"""

from __future__ import annotations

import math
from collections import deque
from statistics import median

from collector.core.facts import RunFacts
from collector.core.severity import Severity
from collector.detect.base import (
    HOLD,
    MAD_TO_SIGMA,
    Finding,
    Verdict,
    fmt,
)
from collector.detect.config import RewardCollapseRule
from collector.detect.trends import ZeroStreak


class RewardCollapse:
    """The reward's rolling median falling well below its best for `patience` points (RL)."""

    rule_id = "reward_collapse"
    unsafe_checkpoint = False

    def __init__(self, metric: str, cfg: RewardCollapseRule) -> None:
        self.metric, self.cfg = metric, cfg
        self.clear_after = cfg.clear_after
        self.recent: deque[float] = deque(maxlen=max(2, cfg.window))
        self.best: float | None = None
        self.best_step = 0
        self.low: float | None = None
        self.falling = 0
        self.first_falling = 0

    def rewind(self, step: int) -> None:
        self.recent.clear()
        self.falling = 0

    def feed(self, step: int, value: float, facts: RunFacts) -> Verdict:
        cfg = self.cfg
        self.recent.append(value)
        if len(self.recent) < self.recent.maxlen:
            return HOLD
        values = list(self.recent)
        rolling = median(values)
        if self.best is None or rolling > self.best:
            self.best, self.best_step = rolling, step
        self.low = rolling if self.low is None else min(self.low, rolling)
        spread = median(abs(v - rolling) for v in values) * MAD_TO_SIGMA
        # the rolling median of n points wobbles by about 1.25 sigma / sqrt(n)
        noise = 1.25 * spread / math.sqrt(len(values))
        needed = max(cfg.drop_sigma * noise, cfg.min_rel_drop * (self.best - self.low), 1e-12)
        if rolling >= self.best - needed:
            self.falling = 0
            return None
        if self.falling == 0:
            self.first_falling = step
        self.falling += 1
        if self.falling < cfg.patience:
            return HOLD
        return Finding(
            Severity.WARN,
            value,
            f"{self.metric} is trending down: rolling median {fmt(rolling)} at step {step}, below its best "
            f"{fmt(self.best)} (step {self.best_step}) for {self.falling} points. Likely causes: policy collapse "
            f"or reward hacking turned against the reward model, lr too high, KL penalty too weak, entropy "
            f"collapse. Check sampled responses, entropy and KL; keep the checkpoint near step {self.best_step}.",
            {
                "best_rolling_median": self.best,
                "best_step": self.best_step,
                "rolling_median": rolling,
                "noise": noise,
            },
            first_step=self.first_falling,
        )


class RewardStdCollapse(ZeroStreak):
    """Reward spread at zero: every sample in a group got the same reward, so there is no learning signal."""

    rule_id = "reward_collapse"
    unsafe_checkpoint = False

    def is_zero(self, value: float) -> bool:
        return not value > self.cfg.std_zero

    def points_needed(self) -> int:
        return self.cfg.std_for

    def finding(self, value: float, points: int, since: int) -> Finding:
        return Finding(
            Severity.WARN,
            value,
            f"{self.metric} = {fmt(value)} for {points} points (since step {since}): every sampled "
            f"response gets the same reward, so the advantages are zero and the policy stops learning. Likely "
            f"causes: the task is too easy or too hard for the model, a reward function returning a constant, "
            f"sampling temperature too low. Check the reward function on a few responses.",
            {"threshold": self.cfg.std_zero, "points": points},
            first_step=since,
        )
