"""Each rule on synthetic series: the trouble it must catch, and the healthy shapes it must leave alone."""

from __future__ import annotations

import math
import random

import pytest

from collector.detect.engine import detect_series
from tests.collector.detect.synth import healthy_sft, replace_values, rules_of

VERL_INFO = {
    "trainer": {"total_training_steps": 2000, "save_freq": 200, "test_freq": 100},
    "optim": {"lr": 1e-4, "lr_warmup_steps_ratio": 0.05, "lr_scheduler_type": "cosine"},
}
HF_NAMES = {"loss": "loss", "grad_norm": "grad_norm", "lr": "learning_rate", "val_loss": "eval_loss"}


def only(events, rule):
    found = [e for e in events if e.rule == rule]
    assert len(found) == 1, (
        f"expected one {rule} episode, got {[(e.rule, e.first_step, e.last_step) for e in events]}"
    )
    return found[0]


# ----- healthy runs stay quiet -----


@pytest.mark.parametrize("log_every", [1, 10])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_healthy_verl_run_raises_nothing(log_every, seed):
    series = healthy_sft(log_every=log_every, seed=seed)
    assert detect_series(series, run_info=VERL_INFO) == []
    assert detect_series(series) == []  # nothing known about the run: still quiet


@pytest.mark.parametrize("seed", [1, 2])
def test_healthy_hf_run_logging_every_10_steps_raises_nothing(seed):
    series = healthy_sft(log_every=10, seed=seed, names=HF_NAMES)
    series.pop("train/time(s)")  # HF logs no time per step
    assert detect_series(series, run_info={"max_steps": 2000, "logging_steps": 10, "save_steps": 200}) == []


def test_periodic_step_time_spikes_at_save_steps_are_normal():
    # saves every 150 steps, evals every 100: the save steps are not eval steps, so only knowing them excuses them
    series = healthy_sft(save_every=150, seed=4)
    info = {"trainer": {"save_freq": 150, "test_freq": 100}}
    assert detect_series(series, run_info=info) == []
    assert detect_series(series, checkpoints=list(range(150, 2001, 150))) == []
    unexplained = detect_series(series)  # nobody said these are save steps: they are spikes
    assert rules_of(unexplained) == {"step_time_spike"}


# ----- nonfinite -----


def test_nonfinite_burst_is_one_episode_naming_metric_and_steps():
    # issue 12 (KG-LLM): a few non-finite grad norms with a finite loss are steps the loss scaler skipped: a notice
    series = healthy_sft(seed=5)
    series = replace_values(series, "train/grad_norm", {300: math.nan, 301: math.inf, 305: math.nan})
    alert = only(detect_series(series), "nonfinite")
    assert (alert.severity, alert.metric, alert.first_step, alert.last_step) == (
        "info",
        "train/grad_norm",
        300,
        305,
    )
    assert alert.active is False  # finite values came back: auto-resolved
    assert "fp16" in alert.message and "step 305" in alert.message
    # many in one episode: the scale collapsed
    burst = replace_values(healthy_sft(seed=5), "train/grad_norm", {s: math.nan for s in range(300, 306)})
    assert only(detect_series(burst), "nonfinite").severity == "warn"
    # a non-finite loss is an error from its first point
    lost = replace_values(healthy_sft(seed=5), "train/loss", {300: math.nan})
    alert = only(detect_series(lost), "nonfinite")
    assert (alert.severity, alert.metric, alert.first_step) == ("error", "train/loss", 300)


def test_an_undefined_correlation_is_a_notice_not_an_error():
    # make demo-rl (2026-11-26): verl's rollout-vs-actor probability correlation was NaN at steps 122 and 127
    # of a GRPO run whose losses, rewards and grad norms stayed finite and whose accuracy then rose; it was an
    # error telling people to resume from step 100. A careful engineer expects a notice at most.
    corr = "training/rollout_actor_probs_pearson_corr"
    series = healthy_sft(seed=5)
    steps = series["train/loss"][0]
    series[corr] = (steps, [math.nan if s in (122, 127) else 0.999 for s in steps])
    alert = only(detect_series(series, run_info={"kind": "rl"}), "nonfinite")
    assert (alert.severity, alert.metric, alert.first_step) == ("info", corr, 122)
    assert "a correlation is undefined" in alert.message
    # an infinite correlation is no undefined one, and a word that only starts like it is no correlation
    # and a correlation that is trained (Deep CCA's loss) going NaN is training's: an error
    trained = (("train/corr_loss", math.nan), ("rewards/pearson_corr_reward", math.nan))
    for name, value in ((corr, math.inf), ("rewards/mixed_correctness_reward_func", math.nan), *trained):
        wrong = replace_values(healthy_sft(seed=5), "train/loss", {})
        wrong[name] = (steps, [value if s == 122 else 0.5 for s in steps])
        assert only(detect_series(wrong), "nonfinite").severity == "error", name


# ----- grad_spike -----


def test_single_grad_spike_warns_and_resolves():
    series = replace_values(healthy_sft(seed=6), "train/grad_norm", {700: 25.0})
    alert = only(detect_series(series), "grad_spike")
    assert (alert.severity, alert.first_step, alert.last_step, alert.active) == ("warn", 700, 700, False)
    assert alert.evidence["baseline_median"] == pytest.approx(1.0, rel=0.2)


def test_sustained_grad_spike_is_an_error():
    series = replace_values(
        healthy_sft(seed=7), "train/grad_norm", {s: 30.0 + s % 3 for s in range(700, 710)}
    )
    alert = only(detect_series(series), "grad_spike")
    assert alert.severity == "error" and alert.first_step == 700 and alert.last_step >= 705


def test_grad_spike_followed_by_loss_jump_is_an_error():
    series = replace_values(healthy_sft(seed=8), "train/grad_norm", {700: 40.0})
    series = replace_values(series, "train/loss", {702: 4.0, 703: 3.5})
    events = detect_series(series)
    incident = only(events, "grad_spike")  # one alert for the incident: the spike and the loss jump after it
    assert incident.severity == "error" and incident.evidence["rules"] == ["grad_spike", "loss_spike"]
    assert "loss_spike on train/loss at step 702" in incident.message
    assert "loss_spike" not in rules_of(events)


def test_grad_norm_above_100_for_several_points_is_an_error_even_without_baseline():
    steps = list(range(1, 11))
    events = detect_series({"actor/grad_norm": (steps, [150.0] * 10)})
    alert = only(events, "grad_spike")
    assert alert.severity == "error" and alert.first_step == 3  # the third point above 100


def test_vanishing_gradients_warn():
    series = replace_values(healthy_sft(seed=9), "train/grad_norm", {s: 1e-5 for s in range(800, 900)})
    alert = only(detect_series(series), "grad_spike")
    assert alert.evidence["kind"] == "vanishing" and alert.severity == "warn"


# ----- loss_spike -----


def test_one_loss_blip_is_a_notice_and_a_jump_that_stays_warns():
    # issue 12: per-step logs of small batches blip for one point and come back (no damage): a notice
    series = replace_values(healthy_sft(seed=10), "train/loss", {900: 5.0})
    alert = only(detect_series(series), "loss_spike")
    assert (alert.severity, alert.first_step) == ("info", 900)
    series = replace_values(healthy_sft(seed=10), "train/loss", {900: 5.0, 901: 4.5})
    alert = only(detect_series(series), "loss_spike")
    assert (alert.severity, alert.first_step) == ("warn", 900)


def test_diverging_loss_is_an_error():
    series = healthy_sft(seed=11)
    steps, values = series["train/loss"]
    series["train/loss"] = (
        steps,
        [v * (1 + max(0, s - 1000) / 150) for s, v in zip(steps, values, strict=True)],
    )
    # one alert from where it began to the end: the episode holds between trend checks while the loss stays far
    # above its best, and its evidence is the latest check's (a ramp whose blocks level off reads as a level)
    (alert,) = [e for e in detect_series(series) if e.rule == "loss_spike"]
    assert alert.severity == "error" and 1000 < alert.first_step < 1300 and alert.last_step == steps[-1]
    assert alert.evidence["kind"] in ("diverging", "level_shift")


def test_a_divergence_whose_blocks_wobble_stays_one_alert():
    # keanuspies/lyric-generator-llm outputs/checkpoint-3000/trainer_state.json (commit 5471b6209b), logged every
    # step: the loss jumps from ~6 to 21-25 for 800 steps with per-step noise of +-30 %. A trend check that found
    # the blocks falling a little reset the divergence, the points between checks cleared it, and it came back as
    # a new alert: 23 alerts for 4 divergences. Now an alert ends only once a check finds the loss back near its
    # best.
    series = healthy_sft(seed=11)
    steps, values = series["train/loss"]
    rng = random.Random(5)
    level = [
        v * (4.0 if 1000 <= s < 1600 else 1.0) * (1 + rng.uniform(-0.3, 0.3))
        for s, v in zip(steps, values, strict=True)
    ]
    series["train/loss"] = (steps, level)
    found = [e for e in detect_series(series) if e.rule == "loss_spike" and e.severity != "info"]
    assert len(found) == 1 and 1000 <= found[0].first_step < 1100 and found[0].last_step < 1700, [
        (e.severity, e.first_step, e.last_step) for e in found
    ]


# ----- val_loss_rise -----


def test_overfitting_names_the_best_step():
    series = healthy_sft(seed=12)
    steps, values = series["val/loss"]
    series["val/loss"] = (
        steps,
        [v if s <= 800 else values[7] * (1 + (s - 800) / 2000) for s, v in zip(steps, values, strict=True)],
    )
    alert = only(detect_series(series), "val_loss_rise")
    assert alert.evidence["best_step"] == 800 and alert.first_step == 900 and "step 800" in alert.message
    # a rise that lasts (past 2x patience evaluations) and is large (> 20 %): an error, no longer a warning
    assert alert.severity == "error" and alert.active and alert.evidence["evaluations_above"] >= 6


def test_single_eval_bump_is_not_overfitting():
    series = replace_values(healthy_sft(seed=13), "val/loss", {1200: 2.0})
    assert "val_loss_rise" not in rules_of(detect_series(series))


def test_val_rise_while_train_loss_also_rises_is_a_divergence_said_not_silenced():
    series = healthy_sft(seed=14)
    for name in ("val/loss", "train/loss"):
        steps, values = series[name]
        series[name] = (
            steps,
            [v if s <= 1000 else v + (s - 1000) / 500 for s, v in zip(steps, values, strict=True)],
        )
    alert = only(detect_series(series), "val_loss_rise")
    assert "the training loss rose too" in alert.message and "diverging, not overfitting" in alert.message
    assert "is overfitting" not in alert.message and alert.severity in ("warn", "error")


def level_shift(seed: int, at: int, factor: float, series=None) -> dict:
    """The QLoRA SFT shape: the training loss jumps to `factor` x its level at `at` and stays there; the eval
    loss goes up with it."""
    series = series or healthy_sft(seed=seed)
    rng = random.Random(seed)
    for name, times in (("train/loss", factor), ("val/loss", factor * 1.2)):
        steps, values = series[name]
        level = values[max(i for i, s in enumerate(steps) if s < at)]
        series[name] = (
            steps,
            [
                v if s < at else level * times * (1 + rng.uniform(-0.03, 0.03))
                for s, v in zip(steps, values, strict=True)
            ],
        )
    return series


def test_a_loss_that_jumps_to_a_new_level_and_stays_is_a_divergence_told_once():
    events = detect_series(level_shift(seed=15, at=1000, factor=4.0))
    shifts = [e for e in events if e.rule == "loss_spike" and e.evidence.get("kind") == "level_shift"]
    assert len(shifts) == 1, [(e.rule, e.first_step, e.severity) for e in events]
    shift = shifts[0]
    # a warning within a few blocks of the jump, an error once it lasts; names the best step before the jump
    # (from the jump itself: the first point above the noise, which the divergence then holds on to)
    assert 1000 <= shift.first_step <= 1000 + 60 * 10 and shift.severity == "error" and shift.active
    assert f"step {shift.evidence['best_step']}" in shift.message and shift.evidence["best_step"] < 1000
    assert "jumped to a new level and stays there" in shift.message
    # the validation loss that rose with it is said too, as a divergence
    val = only(events, "val_loss_rise")
    assert "diverging" in val.message


def test_a_jump_that_comes_back_down_is_no_level_shift():
    # 25 points at 3x, then back: a spike episode, not a new level (a level holds three blocks of 10 points)
    series = healthy_sft(seed=16)
    steps, values = series["train/loss"]
    series["train/loss"] = (
        steps,
        [v if s < 1000 or s >= 1025 else v * 3 for s, v in zip(steps, values, strict=True)],
    )
    events = detect_series(series)
    assert not [e for e in events if e.evidence.get("kind") == "level_shift"]


# ----- loss_plateau -----


def flat_after(series, start, level, seed):
    rng = random.Random(seed)
    steps, values = series["train/loss"]
    series["train/loss"] = (
        steps,
        [v if s < start else level * (1 + rng.gauss(0, 0.03)) for s, v in zip(steps, values, strict=True)],
    )


def test_flat_loss_with_lr_still_high_is_a_plateau_notice():
    series = healthy_sft(seed=15)
    flat_after(series, 300, 2.0, seed=15)
    steps = series["train/loss"][0]
    series.pop("val/loss")
    series.pop("train/time(s)")
    series["train/lr"] = (steps, [1e-4] * len(steps))
    alert = only(detect_series(series), "loss_plateau")
    assert alert.severity == "info" and alert.first_step > 300


def test_flat_loss_at_the_end_of_a_decayed_schedule_is_not_a_plateau():
    series = healthy_sft(seed=16)
    flat_after(series, 1500, 0.95, seed=16)
    series.pop("val/loss")
    assert "loss_plateau" not in rules_of(detect_series(series))


# ----- no_learning -----


def test_zero_grad_norm_is_no_learning():
    series = replace_values(healthy_sft(seed=17), "train/grad_norm", {s: 0.0 for s in range(500, 600)})
    alert = only(detect_series(series), "no_learning")
    assert (alert.severity, alert.metric, alert.first_step) == ("error", "train/grad_norm", 500)
    assert alert.active is False  # the gradients came back at 600


def test_a_few_zero_grad_norms_in_rl_are_not_no_learning():
    steps = list(range(10, 510, 10))
    grads = [0.0 if i % 4 == 0 else 0.8 for i in range(len(steps))]
    assert "no_learning" not in rules_of(
        detect_series({"grad_norm": (steps, grads), "reward": (steps, [1.0] * len(steps))})
    )


def test_loss_stuck_at_ln_vocab_is_no_learning():
    steps = list(range(1, 200))
    loss = [math.log(32000) * (1 + 0.002 * math.sin(s)) for s in steps]
    events = detect_series({"train/loss": (steps, loss)}, run_info={"model": {"vocab_size": 32000}})
    alert = only(events, "no_learning")
    assert "ln(vocab size 32000)" in alert.message and alert.first_step == 1


def test_training_from_scratch_leaves_ln_vocab_quickly_and_is_fine():
    steps = list(range(1, 300))
    loss = [math.log(504) * math.exp(-s / 60) + 1.0 for s in steps]
    assert detect_series({"train/loss": (steps, loss)}, run_info={"vocab_size": 504}) == []


# ----- kl_spike, reward_collapse (RL) -----


def test_kl_above_one_warns():
    steps = list(range(1, 101))
    kl = [0.01 + 0.001 * (s % 5) for s in steps]
    kl[60] = 2.5
    alert = only(detect_series({"actor/ppo_kl": (steps, kl)}), "kl_spike")
    assert alert.first_step == 61 and alert.evidence["threshold"] == 1.0


def test_kl_far_above_its_baseline_warns():
    steps = list(range(1, 101))
    kl = [0.01 + 0.001 * (s % 5) for s in steps]
    kl[70] = 0.3
    assert only(detect_series({"actor/kl_loss": (steps, kl)}), "kl_spike").first_step == 71


def test_reward_falling_after_its_peak_is_collapse():
    steps = list(range(1, 301))
    reward = [min(s, 150) / 150 - max(0, s - 150) / 100 + 0.05 * math.sin(s * 1.7) for s in steps]
    alert = only(detect_series({"critic/score/mean": (steps, reward)}), "reward_collapse")
    assert 150 < alert.first_step < 200 and alert.evidence["best_step"] <= 160


def test_a_reward_sliding_down_is_dated_from_where_it_began_not_where_the_drop_grew_past_the_noise():
    # ijinyu1113's shape: a GRPO reward of 8 samples a step, logged every other step, about 0.2 to step 280,
    # about 0.07 from 281 to 480 (a partial collapse), then recovered. The rolling median crosses the line only
    # into the dip (dated by those crossings: two alerts, at 295 and 373): the trouble began at ~281, one
    # alert says so, and the action goes back to the checkpoint before that
    rng = random.Random(3)
    steps = list(range(1, 1001, 2))
    chance = [0.2 if s <= 280 else 0.07 if s <= 480 else 0.3 for s in steps]
    reward = [sum(rng.random() < p for _ in range(8)) / 8 for p in chance]
    alert = only(detect_series({"critic/score/mean": (steps, reward)}), "reward_collapse")
    assert str(alert.severity) == "warn" and 260 <= alert.first_step <= 300 and alert.last_step >= 440


def test_noisy_rising_reward_is_fine():
    steps = list(range(1, 301))
    reward = [s / 300 + 0.3 * math.sin(s * 2.3) for s in steps]
    assert detect_series({"critic/score/mean": (steps, reward)}) == []


def test_reward_std_at_zero_is_collapse():
    steps = list(range(1, 51))
    std = [0.5] * 20 + [0.0] * 30
    alert = only(detect_series({"critic/score/std": (steps, std)}), "reward_collapse")
    assert alert.first_step == 21 and alert.metric == "critic/score/std"


# ----- step_time_spike -----


def test_step_time_spike_off_save_steps_warns():
    series = replace_values(healthy_sft(seed=18), "train/time(s)", {777: 9.0})
    alert = only(detect_series(series, run_info=VERL_INFO), "step_time_spike")
    assert alert.first_step == 777


def test_step_time_over_30s_warns_when_steps_are_usually_short():
    steps = list(range(1, 101))
    times = [20.0 + (s % 3) for s in steps]
    times[50] = 45.0
    alert = only(detect_series({"timing_s/step": (steps, times)}), "step_time_spike")
    assert alert.first_step == 51


# ----- lr_anomaly -----


def test_lr_zero_mid_run_is_an_error():
    series = replace_values(healthy_sft(seed=19), "train/lr", {s: 0.0 for s in range(1000, 1100)})
    alert = only(detect_series(series, run_info=VERL_INFO), "lr_anomaly")
    assert alert.severity == "error" and alert.first_step == 1002


def test_lr_zero_before_warmup_starts_is_fine():
    # fp16 overflow at the first steps keeps the scheduler at 0 (the KG-LLM run): not an anomaly
    series = replace_values(healthy_sft(seed=20), "train/lr", {1: 0.0, 2: 0.0})
    assert detect_series(series, run_info=VERL_INFO) == []


def test_constant_lr_when_config_says_cosine_warns():
    series = healthy_sft(seed=21)
    steps, _ = series["train/lr"]
    series["train/lr"] = (steps, [1e-4] * len(steps))
    found = [e for e in detect_series(series, run_info=VERL_INFO) if e.rule == "lr_anomaly"]
    # no warmup (steps 1-74, until the warmup line comes within 25 %), then no decay (from a third of the run)
    assert [e.first_step for e in found][0] <= 10 and found[-1].first_step > 600
    assert all(e.severity == "warn" and "cosine schedule" in e.message for e in found)


def test_scaled_lr_key_is_read_times_1e_minus_3():
    series = healthy_sft(seed=22)
    steps, values = series.pop("train/lr")
    series["train/lr(1e-3)"] = (steps, [v * 1000 for v in values])
    assert detect_series(series, run_info=VERL_INFO) == []


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_healthy_ppo_run_raises_nothing(seed):
    from tests.collector.detect.synth import healthy_ppo

    assert (
        detect_series(
            healthy_ppo(seed=seed),
            run_info={"trainer": {"test_freq": 20}, "algorithm": {"adv_estimator": "grpo"}},
        )
        == []
    )


def test_slow_steps_on_a_rhythm_of_unknown_cause_are_at_most_a_notice():
    # every 16th step is slow (an epoch boundary of a small data set, say) and nobody told us why
    series = healthy_sft(seed=23)
    series.pop("val/loss")
    steps, values = series["train/time(s)"]
    series["train/time(s)"] = (steps, [3.0 if s % 16 == 1 else 0.5 for s in steps])
    events = detect_series(series, run_info={"trainer": {"save_freq": 200}})
    assert {(e.rule, e.severity) for e in events} <= {("step_time_spike", "info")}
    assert len(events) <= 2  # the first slow steps, before the rhythm is known


def test_a_run_that_stays_slow_is_a_warning():
    series = replace_values(healthy_sft(seed=24), "train/time(s)", {s: 4.0 for s in range(1011, 1020)})
    alert = only(detect_series(series, run_info=VERL_INFO), "step_time_spike")
    assert alert.severity == "warn" and alert.first_step == 1011


def test_a_loss_recovering_after_an_lr_spike_is_a_spike_not_divergence_nor_plateau():
    # the trainer's `spike` scenario: lr x40 for 3 steps; grad_norm and loss jump, then the loss slowly recovers
    series = healthy_sft(seed=25)
    series = replace_values(series, "train/grad_norm", {1000: 12.0, 1001: 9.0, 1002: 10.0, 1003: 8.0})
    steps, values = series["train/loss"]
    series["train/loss"] = (
        steps,
        [v if s < 1001 else v + 8.0 * math.exp(-(s - 1001) / 60) for s, v in zip(steps, values, strict=True)],
    )
    events = detect_series(series, run_info=VERL_INFO)
    incident = only(events, "grad_spike")  # followed by the loss jump: one alert names both
    assert incident.severity == "error" and "loss_spike on train/loss at step 1001" in incident.message
    assert "diverging" not in incident.message and "loss_spike" not in rules_of(events)
    assert "loss_plateau" not in rules_of(events)


def test_loss_jump_while_the_loss_still_falls_fast_is_caught():
    # the demo's lr spike at step 51, while the loss was still falling from 6 to 1: a wide window's median
    # would sit far above the current level and hide the jump
    rng = random.Random(26)
    steps = list(range(1, 120))
    loss = [
        5.0 * math.exp(-s / 15) + 1.0 + rng.gauss(0, 0.08) + (3.0 if 51 <= s <= 54 else 0.0) for s in steps
    ]
    alert = only(detect_series({"train/loss": (steps, loss)}), "loss_spike")
    assert alert.first_step == 51 and alert.severity == "warn" and not alert.active


def test_no_warmup_when_the_config_asks_for_one_warns():
    series = healthy_sft(seed=27)
    steps, values = series["train/lr"]
    series["train/lr"] = (
        steps,
        [max(v, 1e-4) if s <= 100 else v for s, v in zip(steps, values, strict=True)],
    )
    alert = only(detect_series(series, run_info=VERL_INFO), "lr_anomaly")
    assert alert.first_step <= 10 and "expects" in alert.message


def test_linear_and_constant_schedules_are_followed_too():
    from tests.collector.detect.synth import cosine_lr

    series = healthy_sft(seed=28)
    steps, _ = series["train/lr"]
    linear = {
        "trainer": {"total_training_steps": 2000},
        "optim": {"lr": 1e-4, "lr_warmup_steps_ratio": 0.05, "lr_scheduler_type": "linear"},
    }
    series["train/lr"] = (steps, [1e-4 * s / 100 if s <= 100 else 1e-4 * (2000 - s) / 1900 for s in steps])
    assert detect_series(series, run_info=linear) == []
    series["train/lr"] = (steps, [cosine_lr(s, 2000, 100) for s in steps])
    assert detect_series(series, run_info=linear) == []  # cosine stays within 10 % of linear: close enough
    series["train/lr"] = (steps, [1e-4 * s / 100 if s <= 100 else 1e-4 for s in steps])  # never decays
    assert only(detect_series(series, run_info=linear), "lr_anomaly").first_step > 500
    constant = {"optim": {"lr": 1e-4, "lr_scheduler_type": "constant", "total_training_steps": 2000}}
    series["train/lr"] = (steps, [1e-4] * len(steps))
    assert detect_series(series, run_info=constant) == []


def test_a_lasting_grad_norm_level_shift_becomes_the_new_baseline():
    series = healthy_sft(seed=29)
    steps, values = series["train/grad_norm"]
    series["train/grad_norm"] = (
        steps,
        [v * 5 if s >= 800 else v for s, v in zip(steps, values, strict=True)],
    )
    alert = only(detect_series(series, run_info=VERL_INFO), "grad_spike")
    assert alert.first_step == 800 and alert.severity == "error" and not alert.active  # closed once adopted
    assert alert.last_step < 1000


def test_a_grad_norm_climbing_to_a_new_level_as_the_loss_falls_is_no_spike_but_a_point_far_above_it_is():
    # a public LoRA run (EthanFeng-coder/saveing): grad_norm ~0.3 while the loss sits, then over a dozen steps it
    # climbs to 4-6x that as the loss starts to fall, one point 8x the old median (2.4x the points before it)
    series = healthy_sft(seed=31)
    steps, values = series["train/grad_norm"]
    climbed = {
        s: v * (1 + 4 * min(1.0, (s - 700) / 12)) for s, v in zip(steps, values, strict=True) if s >= 700
    }
    climbed[715] = 2.4 * climbed[715]
    series = replace_values(series, "train/grad_norm", climbed)
    assert "grad_spike" not in rules_of(detect_series(series, run_info=VERL_INFO))
    # a single point far above the new level is still a spike
    series = replace_values(series, "train/grad_norm", {760: 15 * climbed[760]})
    alert = only(detect_series(series, run_info=VERL_INFO), "grad_spike")
    assert alert.first_step == 760 and alert.severity == "warn"


def test_one_step_ten_times_slower_is_a_warning():
    # the trainer's `stall` scenario: the process sleeps 20 s inside step 10 of 0.5 s steps
    series = replace_values(healthy_sft(seed=30), "train/time(s)", {10: 20.0})
    alert = only(detect_series(series, run_info=VERL_INFO), "step_time_spike")
    assert (alert.first_step, alert.severity) == (10, "warn")


def test_a_long_overfit_keeps_its_first_step_and_counts_every_evaluation():
    steps = list(range(100, 3100, 100))
    val = [2.0 - s / 1000 if s <= 1000 else 1.0 + (s - 1000) / 5000 for s in steps]
    train = ([s for s in range(1, 3001)], [3.0 - s / 1500 for s in range(1, 3001)])
    alert = only(detect_series({"val/loss": (steps, val), "train/loss": train}), "val_loss_rise")
    assert (
        alert.first_step == 1100
        and alert.evidence["evaluations_above"] == 20
        and "for 20 evaluations" in alert.message
    )


def test_streak_counts_points_in_a_row_and_remembers_where_they_began():
    from collector.detect.base import Streak

    streak = Streak()
    assert [streak.hit(s) for s in (5, 6, 7)] == [1, 2, 3] and streak.since == 5
    streak.reset()
    assert streak.count == 0 and streak.hit(9) == 1 and streak.since == 9
