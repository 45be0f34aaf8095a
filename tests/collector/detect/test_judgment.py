"""Issue 12's misjudgments on real runs, each on a fixture of the same shape written here (the real files stay
in ../shared; tests/collector/detect/real_runs_expected.toml labels them and scripts/label_eval.py scores them)."""

from __future__ import annotations

import math
import random

from collector.detect.engine import detect_series


def rules(events, at_least: str = "warn") -> set[tuple[str, str]]:
    rank = {"info": 0, "warn": 1, "error": 2}
    return {(e.rule, str(e.severity)) for e in events if rank[str(e.severity)] >= rank[at_least]}


def test_per_step_noise_of_small_batches_raises_no_warning():
    # a LoRA run logged every step with a small batch: loss noise spans about 2x around its median, single
    # blips up to 8x come back the next step, grad norms 0.2-2.2 with a rare 5x (DigitalIntelligence, adu3110)
    rng = random.Random(7)
    steps = list(range(1, 3001))
    loss = [0.3 + 2.0 * math.exp(-s / 300) for s in steps]
    loss = [v * math.exp(rng.gauss(0, 0.35)) for v in loss]
    for s in (700, 1500, 2400):
        loss[s] = 8 * loss[s - 1]
    grad = [0.6 * math.exp(rng.gauss(0, 0.45)) for _ in steps]
    grad[2000] = 5.2 * 0.6
    lr = [2e-4 * min(1.0, s / 100) for s in steps]
    events = detect_series({"loss": (steps, loss), "grad_norm": (steps, grad), "learning_rate": (steps, lr)})
    assert rules(events) == set(), [(e.rule, e.severity, e.first_step) for e in events]


def test_a_loss_converged_near_zero_is_not_no_learning():
    # a fine-tune whose training loss converged to about 1e-4 (printed to 4 digits it stops moving) while
    # its eval loss rose: overfitting is val_loss_rise's job, not "nothing is being learned" (Hahaazaza)
    steps = list(range(10, 9000, 10))
    loss = [max(1e-4, 1.0 * math.exp(-s / 400)) for s in steps]
    events = detect_series({"loss": (steps, [round(v, 4) for v in loss])})
    assert not [e for e in events if e.rule == "no_learning"]
    # a loss printed with 2 decimals falls slowly and looks flat for 10 logs (CqGao112 ds_pretrain): it learned
    slow = [round(10.5 * math.exp(-s / 2000) + 3.9, 1) for s in steps[:100]]
    assert not [e for e in detect_series({"loss": (steps[:100], slow)}) if e.rule == "no_learning"]
    # a loss stuck at exactly 0 from the first log is still nothing learned (Rishikarpe)
    stuck = detect_series({"loss": (steps, [0.0] * len(steps))})
    assert {e.rule for e in stuck} == {"no_learning"}


def test_grad_norms_that_jump_routinely_are_the_series_noise():
    # late in a run the grad norm is bimodal: 0.001-0.01 with one log in six between 1 and 4 (Hahaazaza): a
    # spike now and then is a notice at most, never a warning
    rng = random.Random(3)
    steps = list(range(10, 9000, 10))
    grad = [rng.uniform(0.2, 0.4) * math.exp(-s / 1500) + 0.003 for s in steps[:300]]
    grad += [rng.uniform(1, 4) if rng.random() < 1 / 6 else rng.uniform(0.001, 0.01) for _ in steps[300:]]
    loss = [1.0 * math.exp(-s / 2000) + 0.01 for s in steps]
    events = detect_series({"grad_norm": (steps, grad), "loss": (steps, loss)})
    # the onset of the new regime may warn once; after it the jumps are the series' noise
    warned = [e.first_step for e in events if e.rule == "grad_spike" and str(e.severity) != "info"]
    assert len(warned) <= 1 and all(s < 3200 for s in warned), warned
    assert not [e for e in events if str(e.severity) == "error"]


def test_kl_that_starts_at_its_level_is_not_a_spike():
    # a later stage of a multi-stage GRPO run: KL to the first stage's reference sits around 1.0 from step 1
    rng = random.Random(5)
    steps = list(range(1, 160))
    kl = [max(0.5, rng.gauss(1.0, 0.25)) for _ in steps]
    events = detect_series({"kl": (steps, kl), "reward": (steps, [0.1 * math.log(s + 1) for s in steps])})
    assert not [e for e in events if e.rule in ("kl_spike", "kl_rise")]
    # one that climbs from 0.002 to 1.5 is trouble
    climbing = [0.002 * 1.06**s for s in steps]
    events = detect_series({"kl": (steps, climbing)})
    # KL accelerating and KL above its ceiling on one metric are one incident: one alert names both
    assert {"kl_spike", "kl_rise"} <= {r for e in events for r in e.evidence.get("rules", [e.rule])}


def test_rl_signals_as_verl_and_trl_name_them():
    steps = [10, 20, 30]
    # TRL GRPO: entropy 1.03 -> 0.11 -> 0.0085, clipped ratio 0.30 -> 0.97 -> 0.995 (JuncyLu)
    events = detect_series(
        {
            "train/entropy": (steps, [1.028, 0.113, 0.0085]),
            "train/completions/clipped_ratio": (steps, [0.30, 0.966, 0.995]),
        }
    )
    found = {(e.rule, e.first_step) for e in events}
    assert ("entropy_collapse", 30) in found and ("response_truncation", 20) in found
    # verl: response_length/clip_ratio 0.97 and 0.91 at steps 1-2 (HappynessI)
    events = detect_series({"response_length/clip_ratio": ([1, 2], [0.969, 0.906])})
    assert [(e.rule, e.first_step, str(e.severity)) for e in events] == [("response_truncation", 1, "warn")]
    # an entropy that levels off at a quarter of its start as the reward converges is not a collapse (verl gsm8k)
    s = list(range(1, 106))
    entropy = [0.085 + 0.25 * math.exp(-x / 25) for x in s]
    kl = [0.055 * (1 - math.exp(-x / 30)) + 0.002 for x in s]
    events = detect_series({"actor/entropy": (s, entropy), "actor/kl_loss": (s, kl)})
    assert not [e for e in events if e.rule in ("entropy_collapse", "kl_rise", "kl_spike")]


def test_val_loss_rise_agrees_with_the_runs_own_checkpoint_choice():
    # the run keeps checkpoints by WER (best at its last evaluation, 15000) while its eval_loss turned at
    # 12000: the alert says which checkpoint the advice keeps and why it differs (anthonyrathe, issue 12)
    evals = list(range(1000, 15001, 1000))
    loss = [0.5 - 0.02 * (s // 1000) if s <= 12000 else 0.26 + 0.04 * ((s - 12000) // 1000) for s in evals]
    train = list(range(100, 15001, 100))
    info = {"best_metric": 9.6, "best_model_checkpoint": "/x/checkpoint-15000", "best_checkpoint_step": 15000}
    series = {"eval_loss": (evals, loss), "loss": (train, [1.0 / (1 + s / 1000) for s in train])}
    (alert,) = [e for e in detect_series(series, run_info=info) if e.rule == "val_loss_rise"]
    assert str(alert.severity) == "info" and "15000" in alert.message and "differs" in alert.message
    # the same rise in a run that keeps checkpoints by this loss: a warning naming the loss's best step
    info = {"best_metric": loss[11], "best_checkpoint_step": 12000}
    (alert,) = [e for e in detect_series(series, run_info=info) if e.rule == "val_loss_rise"]
    assert str(alert.severity) == "warn" and "step 12000" in alert.message


def test_an_eval_loss_that_nearly_doubles_after_the_first_evaluation_warns():
    # eval loss 1.0 at the first evaluation, then 1.9, 1.95 (HF run with several eval sets: each judged)
    evals = [100, 200, 300]
    train = list(range(10, 301, 10))
    series = {
        "eval_books_loss": (evals, [1.0, 1.9, 1.95]),
        "eval_news_loss": (evals, [1.1, 2.1, 2.2]),
        "loss": (train, [2.0 - s / 300 for s in train]),
    }
    found = {(e.rule, e.metric, str(e.severity)) for e in detect_series(series)}
    assert found == {
        ("val_loss_rise", "eval_books_loss", "warn"),
        ("val_loss_rise", "eval_news_loss", "warn"),
    }


def test_one_nan_step_in_an_rl_run_is_one_incident_worded_for_rl():
    # verl: policy loss, KL and their neighbours all null at one step -> one error naming them, RL causes
    steps = list(range(1, 31))
    names = ["actor/pg_loss", "actor/ppo_kl", "actor/kl_loss", "actor/entropy", "actor/grad_norm"]
    series = {n: (steps, [math.nan if s == 17 else 0.1 + 0.001 * s for s in steps]) for n in names}
    series["critic/score/mean"] = (steps, [0.2 + 0.01 * s for s in steps])
    found = [e for e in detect_series(series) if e.rule == "nonfinite"]
    assert len(found) == 1, [(e.metric, e.first_step) for e in found]
    (alert,) = found
    assert str(alert.severity) == "error" and alert.first_step == 17
    assert sorted(alert.evidence["metrics"]) == sorted(names)
    assert "RL run" in alert.message and "fp16" not in alert.message


def test_a_training_score_that_wanders_by_a_few_percent_is_not_a_collapse():
    # a PPO run whose score only wanders by a couple of percent around its level (issue 12)
    rng = random.Random(11)
    steps = list(range(1, 401))
    score = [0.62 + 0.01 * math.sin(s / 40) + rng.gauss(0, 0.01) for s in steps]
    assert not [
        e for e in detect_series({"critic/score/mean": (steps, score)}) if e.rule == "reward_collapse"
    ]
    # a reward of a few discrete levels (k of 8 samples right), noisy and slowly rising (ijinyu): no collapse
    levels = [min(7, max(0, round(rng.gauss(2 + s / 400, 1.6)))) / 8 for s in steps]
    assert not [e for e in detect_series({"reward": (steps, levels)}) if e.rule == "reward_collapse"]
    # a real collapse: from 0.6 down to 0.1 and staying there
    falling = [0.6 if s < 200 else 0.1 + rng.gauss(0, 0.01) for s in steps]
    collapsed = [e for e in detect_series({"reward": (steps, falling)}) if e.rule == "reward_collapse"]
    assert collapsed and all(e.first_step >= 200 for e in collapsed)


def test_a_nan_loss_heads_its_incident_over_a_skipped_grad_step():
    # grad_norm logged before the loss at the step both are NaN: the alert is the loss's error, naming both
    steps = list(range(1, 31))
    series = {
        "train/grad_norm": (steps, [math.nan if s == 12 else 1.0 for s in steps]),
        "train/loss": (steps, [math.nan if s == 12 else 2.0 - s / 30 for s in steps]),
    }
    (alert,) = [e for e in detect_series(series) if e.rule == "nonfinite"]
    assert (alert.metric, str(alert.severity), alert.first_step) == ("train/loss", "error", 12)
    assert alert.evidence["metrics"] == ["train/loss", "train/grad_norm"]
    assert "also: train/grad_norm" in alert.message


def _overfit(evals: dict[int, float], last: int) -> dict:
    train = list(range(50, last + 1, 50))
    return {
        "eval_loss": (list(evals), list(evals.values())),
        "loss": (train, [1.2 / (1 + s / 100) for s in train]),
    }


def test_a_val_loss_rise_that_lasts_and_is_large_becomes_an_error():
    # the MelDashti shape: eval every 200, best 0.3213 at the first, then up 12 evaluations to +73% while the
    # training loss keeps falling
    rising = [0.3213, 0.3256, 0.379, 0.3788, 0.415, 0.4152, 0.423, 0.45, 0.458, 0.489, 0.527, 0.542, 0.5547]
    series = _overfit(dict(zip(range(200, 2601, 200), rising, strict=True)), 2750)
    (alert,) = [e for e in detect_series(series) if e.rule == "val_loss_rise"]
    assert str(alert.severity) == "error" and "step 200" in alert.message
    assert "12 evaluations" in alert.message and "far beyond the evaluations' own wobble" in alert.message
    # the same rise cut after 4 evaluations above the best: not lasting yet, a warning
    short = _overfit(dict(zip(range(200, 1001, 200), rising[:5], strict=True)), 1000)
    (alert,) = [e for e in detect_series(short) if e.rule == "val_loss_rise"]
    assert str(alert.severity) == "warn"


def test_a_lasting_but_small_val_loss_rise_stays_a_warning():
    # +12 % for 9 evaluations (yongshuaiy's shape): overfitting, worth a warning, not an error
    values = [1.061, 1.052, 1.07, 1.075, 1.08, 1.078, 1.167, 1.17, 1.175, 1.179, 1.178]
    series = _overfit(dict(zip(range(50, 551, 50), values, strict=True)), 560)
    (alert,) = [e for e in detect_series(series) if e.rule == "val_loss_rise"]
    assert str(alert.severity) == "warn"


def test_one_reward_logged_under_two_names_collapses_in_one_alert():
    # TRL logs `reward` and `rewards/<func>/mean`, the same numbers when there is one reward function (verl:
    # critic/score/mean and critic/rewards/mean). Before, a collapse was two reward_collapse alerts. The shape is
    # Sunshine535/nips-grpo-dynamics results/logs/exp2/adabalance_seed42.log (commit 2cd2efce1c0622bfd77899c555
    # 357107706a0c54): ~0.9 to step 65, then 0.6, 0.2, 0.125 and 0 to step 200, logged every 5 steps
    values = [
        0.9,
        0.725,
        0.875,
        0.975,
        0.825,
        0.975,
        0.925,
        0.95,
        0.975,
        0.825,
        0.9,
        0.775,
        0.975,
        0.6,
        0.2,
        0.125,
    ]
    values += [0.0] * 24
    steps = [5 * i for i in range(1, len(values) + 1)]
    series = {"reward": (steps, values), "rewards/reward_fn/mean": (steps, list(values))}
    found = [e for e in detect_series(series) if e.rule == "reward_collapse"]
    assert len(found) == 1, [(e.metric, e.first_step) for e in found]
    assert sorted(found[0].evidence["metrics"]) == ["reward", "rewards/reward_fn/mean"]
    assert str(found[0].severity) == "error"


def test_a_loss_that_jumps_to_exactly_zero_is_nothing_learned_but_one_rounded_to_zero_learned():
    # LLaMA-Factory's trainer_log.jsonl of AolinGuo/graduate_agent (commit 787eda9c79): a loss of 122.14 at
    # step 10, then exactly 0.0 at every log 20-370 of a 375-step run (no grad_norm logged). A loss never falls
    # from 122 to exactly 0: HF's NaN filter logs a window of only NaN losses as 0, or every label is masked.
    # Before, "it fell from where it started" excused it and the run was called healthy.
    steps = list(range(10, 380, 10))
    loss = [122.1416] + [0.0] * (len(steps) - 1)
    lr = [1e-4 * min(1.0, s / 40) for s in steps]
    (alert,) = [e for e in detect_series({"loss": (steps, loss), "learning_rate": (steps, lr)})]
    assert (alert.rule, str(alert.severity), alert.first_step) == ("no_learning", "error", 20)
    assert "jumped to exactly 0" in alert.message and "logging_nan_inf_filter" in alert.message
    # a loss that got small first and then prints as 0.0 at 4 decimals has converged: no alert
    rounded = [round(2.0 * math.exp(-s / 20), 4) for s in steps]
    assert rounded[-1] == 0.0 and rounded.count(0.0) >= 10
    assert not [e for e in detect_series({"loss": (steps, rounded)}) if e.rule == "no_learning"]
