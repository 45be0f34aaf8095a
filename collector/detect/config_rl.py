"""Thresholds of the RL rules (KL, reward, entropy, response length), with their seed defaults; part of
`collector.detect.config.DetectConfig` (`[rules.kl_spike]`, `[rules.reward_collapse]`, ...)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KlSpikeRule:
    enabled: bool = True
    max_value: float = 1.0
    window: int = 50
    min_history: int = 5
    z: float = 8.0
    ratio: float = 5.0
    error_after_points: int = 5  # points above `max_value` in one episode that make it an error
    tail_ratio: float = 1.5  # a relative spike is also above this many times the window's `tail_quantile`
    tail_quantile: float = 0.95
    # a relative spike counts from this KL on: GRPO's KL starts at 0 and wanders at 0.001-0.05, where 20x
    # its early median is still nothing to act on (the `max_value` ceiling is judged whatever the level)
    min_level: float = 0.1
    clear_after: int = 3


@dataclass(frozen=True)
class RewardCollapseRule:
    enabled: bool = True
    window: int = 10  # rolling median length
    patience: int = 20  # points the rolling median has been falling below its best
    # drop counted only beyond this many noise sigmas (the best of many rolling medians already sits about two
    # of them high by chance: a noisy reward that merely wanders must not look collapsed)
    drop_sigma: float = 5.0
    noise_points: int = 100  # the noise is also measured over this many recent points
    min_rel_drop: float = 0.1  # and 10 % of the reward's observed range
    std_zero: float = 1e-6  # reward std at or below this: every sample got the same reward
    std_for: int = 10
    clear_after: int = 3


@dataclass(frozen=True)
class EntropyCollapseRule:
    enabled: bool = True
    collapse_fraction: float = 0.05  # policy entropy below this fraction of its highest so far: collapsed
    min_peak: float = (
        0.05  # ...once it has been at least this high (a run that starts near 0 is judged on rises)
    )
    explode_ratio: float = (
        3.0  # above this many times its starting level (median of the first points): exploding
    )
    start_points: int = 3
    error_after_points: int = 10  # collapsed (or exploding) for this many points: an error
    # an explosion is judged against the first few points only: one point above it is a notice, this many a
    # warning (a collapse warns at once)
    explode_warn_after: int = 3
    clear_after: int = 3


@dataclass(frozen=True)
class ResponseTruncationRule:
    enabled: bool = True
    clip_ratio: float = 0.9  # this share of responses (or more) cut at the length limit
    warn_after_points: int = 2  # one batch of long answers is a notice; two in one episode a warning
    error_after_points: int = 20
    clear_after: int = 3


@dataclass(frozen=True)
class KlRiseRule:
    enabled: bool = True
    block: int = 5  # points per block; the KL accelerates when three block medians climb by growing steps
    growth: float = 1.5  # and the newest block's median is this many times the oldest's...
    min_level: float = 0.05  # ...and at least this high (GRPO/PPO KL usually stays below 0.01-0.1)
    clear_after: int = 2


@dataclass(frozen=True)
class ValScoreDeclineRule:
    """A validation score (reward, accuracy, exact match: verl `val-core/...`, `val/test_score/...`, HF
    `eval_<score>`) falling from its best and staying down: on by default for RL runs only."""

    enabled: bool = True
    all_runs: bool = False  # judge the validation scores of SFT runs too (an SFT's val loss is judged anyway)
    patience: int = 3  # evaluations in a row below the best by more than both margins below
    min_rel_drop: float = 0.03  # below the best by 3 % of |best| (or of the score's observed range if larger)
    noise_sigmas: float = 2.0  # and by this many sigmas of the evaluations' own wobble
    noise_evals: int = 10  # (from the differences between the last this-many evaluations)
    min_evals: int = 5  # evaluations seen before any verdict (fewer give no wobble to judge against)
    error_after: int = 10  # evaluations of one decline that make it an error (example-runwatch.toml's 10)
    clear_after: int = 1  # one evaluation back near the best ends the episode
