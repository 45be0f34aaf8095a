"""RL metrics are noisy per step (one batch each): a rule fires on what lasts or matters, not on one batch.
Shapes from real TRL GRPO / verl logs a reviewer checked (docs/real-runs-checked.md, 2026-11-24): a KL
that starts at 0 and wanders at 0.005-0.05, an entropy that wobbles over its first three points, a batch of
long answers now and then. Series written here."""

from __future__ import annotations

import random

from collector.detect.engine import detect_series


def _of(events, rule):
    return [e for e in events if e.rule == rule]


def test_a_kl_spike_at_a_tiny_level_says_nothing_and_one_that_matters_warns():
    rng = random.Random(3)
    steps = list(range(1, 201))
    kl = [0.0 if s < 3 else 0.0004 * rng.uniform(0.5, 1.5) for s in steps]  # GRPO's first KL is 0
    kl[80] = 0.02  # 50x its median, still nothing to act on
    assert not _of(detect_series({"train/kl": (steps, kl)}), "kl_spike")
    kl[150] = 0.3  # far above its median and at a level that matters (UnslothGRPO's 0.935 at step 206)
    [spike] = _of(detect_series({"train/kl": (steps, kl)}), "kl_spike")
    assert spike.first_step == 151 and str(spike.severity) == "warn"


def _blocks(*medians: float) -> list[float]:
    return [m for m in medians for _ in range(5)]  # 5-point blocks, verl's default kl_rise block


def test_kl_rise_needs_the_next_block_to_stay_up():
    # three accelerating blocks by chance, then back down: one noisy block is not a trend
    kl = _blocks(0.04, 0.04, 0.04, 0.05, 0.06, 0.09, 0.04, 0.04, 0.04, 0.04)
    steps = list(range(1, len(kl) + 1))
    assert not _of(detect_series({"actor/kl_loss": (steps, kl)}), "kl_rise")
    # the same climb goes on, past a level that matters (0.1, as kl_spike's) and stays up: a warning at the
    # check confirming the climb 0.09 -> 0.12 -> 0.2 (to step 40)
    kl = _blocks(0.04, 0.04, 0.04, 0.05, 0.06, 0.09, 0.12, 0.2, 0.3, 0.4)
    [rise] = _of(detect_series({"actor/kl_loss": (steps, kl)}), "kl_rise")
    assert str(rise.severity) == "warn" and rise.first_step == 45
    assert "accelerating" in rise.message


def test_a_healthy_grpo_kl_creeping_up_at_a_low_level_is_no_acceleration():
    # a healthy GRPO run: KL 0.028 -> 0.03 -> 0.07 and stays about there (below the 0.1 that matters)
    kl = _blocks(0.02, 0.025, 0.028, 0.03, 0.07, 0.075, 0.07, 0.072, 0.07, 0.074)
    steps = list(range(1, len(kl) + 1))
    assert not _of(detect_series({"actor/kl_loss": (steps, kl)}), "kl_rise")


def test_an_entropy_above_its_first_points_once_is_a_notice_and_lasting_a_warning():
    steps = list(range(1, 61))
    entropy = [0.3] * 60
    entropy[30] = 1.2  # one batch 4x the first three points' level
    [once] = _of(detect_series({"actor/entropy": (steps, entropy)}), "entropy_collapse")
    assert str(once.severity) == "info"
    for i in range(30, 34):
        entropy[i] = 1.2
    [lasting] = _of(detect_series({"actor/entropy": (steps, entropy)}), "entropy_collapse")
    assert str(lasting.severity) == "warn" and lasting.first_step == 31


def test_one_batch_of_cut_answers_is_a_notice_two_a_warning():
    steps = list(range(1, 61))
    clip = [0.1] * 60
    clip[20] = 0.95
    [once] = _of(detect_series({"response_length/clip_ratio": (steps, clip)}), "response_truncation")
    assert str(once.severity) == "info"
    clip[21] = 0.96
    [twice] = _of(detect_series({"response_length/clip_ratio": (steps, clip)}), "response_truncation")
    assert str(twice.severity) == "warn" and twice.first_step == 21


def test_zero_variance_groups_are_the_rewards_error_not_frozen_weights():
    # the reward falls to 0 with zero spread in every group from step 200: every advantage, so every
    # gradient, is exactly 0. reward_collapse is the error, said as the reward reaches its floor; the zero
    # gradients are a warning naming the reward, never "no trainable parameters"
    from tests.collector.detect.synth import healthy_ppo

    series = healthy_ppo(seed=5)
    for name, floor in (("critic/score/mean", 0.0), ("critic/score/std", 0.0), ("actor/grad_norm", 0.0)):
        steps, values = series[name]
        series[name] = (steps, [v if s < 200 else floor for s, v in zip(steps, values, strict=True)])
    events = detect_series(series)
    collapse = [e for e in events if e.rule == "reward_collapse" and e.metric == "critic/score/mean"]
    assert collapse and str(collapse[0].severity) == "error", [(e.rule, e.metric, e.severity) for e in events]
    assert 200 <= collapse[0].first_step <= 210  # as the window reaches the floor, not 20 points later
    assert "collapsed to a constant 0" in collapse[0].message
    zero = [e for e in events if e.rule == "no_learning"]
    assert all(str(e.severity) == "warn" for e in zero) and zero
    assert all("no trainable parameters" not in e.message.split("Only if")[0] for e in zero)
    assert "the same reward" in zero[0].message


def _level(rng, mean, spread, n):
    return [
        round(min(1.0, max(0.0, rng.gauss(mean, spread))) * 40) / 40 for _ in range(n)
    ]  # 40 samples a step


def test_a_short_grpo_runs_reward_that_stays_down_for_its_last_logs_warns_and_a_short_dip_does_not():
    # Sunshine535/nips-grpo-dynamics exp1a (TRL GRPO, 200 steps logged every 5: 40 points): rho=5's reward
    # ~0.82 to step 115, then ~0.55 for its last 17 logs; rho=0.1's one dip of 4 logs that recovers. Series
    # of those shapes. 20 points below the line (`patience`) is half such a run: a quarter of it will do.
    rng = random.Random(7)
    steps = list(range(5, 201, 5))
    fell = _level(rng, 0.82, 0.09, 23) + _level(rng, 0.55, 0.11, 17)
    [warn] = _of(detect_series({"reward": (steps, fell)}), "reward_collapse")
    assert str(warn.severity) == "warn" and 110 <= warn.first_step <= 130
    dip = _level(rng, 0.85, 0.08, 40)
    dip[20:24] = [0.625, 0.625, 0.7, 0.65]
    assert not _of(detect_series({"reward": (steps, dip)}), "reward_collapse")
    # a long run is held to `patience`: the same 17 low logs after 100 good ones say nothing yet
    steps = list(range(5, 5 * 118, 5))
    late = _level(rng, 0.82, 0.09, 100) + fell[23:]
    assert not _of(detect_series({"reward": (steps, late)}), "reward_collapse")
