"""`val_score_decline` (issue 12 item 3): a validation score that falls from its best and stays down is an
alert for RL runs; a plateau's wobble, a one-evaluation dip, SFT runs (by default) and a score's spread are not.
Fixtures written here in the shape of the real runs (../shared stays read-only). Its backlog screen against the
rule fed point by point (`screen_check.screened_as_fed`)."""

from __future__ import annotations

import random

from collector.detect.engine import detect_series
from collector.detect.val_scores import ValScoreDecline, is_validation_score
from collector.settings.config import DetectConfig, apply_document
from tests.collector.detect.screen_check import calm, drawn, screen_property, screened_as_fed

VAL = "val-core/openai/gsm8k/reward/mean@1"


def rl_run(val_steps: list[int], val: list[float], seed: int = 0) -> dict:
    """A verl GRPO run: a noisy training score each step (so the run is RL), and the validation score given."""
    rng = random.Random(seed)
    last = val_steps[-1]
    steps = list(range(1, last + 1))
    return {
        "critic/score/mean": (steps, [0.5 + rng.gauss(0, 0.03) for _ in steps]),
        VAL: (val_steps, val),
    }


def declines(events) -> list:
    return [e for e in events if e.rule == "val_score_decline"]


def test_a_validation_reward_that_declines_by_a_few_percent_over_a_few_hundred_steps_warns():
    # rises to 0.62 by step 200, then slides by ~1 % per evaluation (every 20 steps) to 0.56 at step 400
    rng = random.Random(1)
    val_steps = list(range(0, 401, 20))
    val = [0.2 + 0.42 * min(1.0, s / 200) + rng.gauss(0, 0.002) for s in val_steps]
    val = [v - (0.006 * (s - 200) / 20 if s > 200 else 0.0) for s, v in zip(val_steps, val, strict=True)]
    found = declines(detect_series(rl_run(val_steps, val)))
    assert len(found) == 1, found
    alert = found[0]
    assert str(alert.severity) == "warn" and alert.metric == VAL
    assert 220 <= alert.first_step <= 300 and alert.evidence["best_step"] in (180, 200, 220)
    assert "below its best" in alert.message and f"step {alert.evidence['best_step']}" in alert.message


def test_a_decline_that_lasts_ten_evaluations_is_an_error():
    val_steps = list(range(0, 601, 20))
    val = [min(0.6, 0.2 + s / 500) - (0.01 * (s - 200) / 20 if s > 200 else 0.0) for s in val_steps]
    found = declines(detect_series(rl_run(val_steps, val)))
    assert [str(e.severity) for e in found] == ["error"]


def test_a_plateau_that_wobbles_and_a_single_dip_raise_nothing():
    # gsm8k-like: 0.21 -> 0.89, then 0.889-0.901 for the second half, one evaluation dipping 2 % and back
    rng = random.Random(2)
    val_steps = list(range(0, 106, 5))
    val = [0.21 + 0.68 * min(1.0, s / 50) + rng.uniform(-0.006, 0.006) for s in val_steps]
    val[15] -= 0.02
    assert declines(detect_series(rl_run(val_steps, val))) == []
    # tiny, noisy accuracies of four evaluations (0.007, 0.019, 0.015, 0.014): too few to judge
    assert declines(detect_series(rl_run([0, 10, 20, 30], [0.007, 0.019, 0.015, 0.014]))) == []


def test_an_sft_runs_validation_score_is_judged_only_when_asked():
    steps = list(range(100, 2001, 100))
    acc = [min(0.86, 0.6 + s / 2000) - (0.02 * (s - 1000) / 100 if s > 1000 else 0.0) for s in steps]
    series = {"loss": (steps, [1.0 / s for s in steps]), "eval_accuracy": (steps, acc)}
    assert declines(detect_series(series)) == []
    config = apply_document(DetectConfig(), {"rules": {"val_score_decline": {"all_runs": True}}})
    assert len(declines(detect_series(series, config=config))) == 1


def test_which_metrics_are_validation_scores():
    for name in (
        VAL,
        "val/test_score/logic",
        "eval_accuracy",
        "eval_reward",
        "eval_exact_match",
        "val_acc",
    ):
        assert is_validation_score(name), name
    for name in ("val-core/math_dapo/acc/best@32/std", "eval_loss", "eval_rewards/chosen", "accuracy",
                 "mean_token_accuracy", "eval_runtime", "critic/score/mean", "val-aux/x/length"):  # fmt: skip
        assert not is_validation_score(name), name


@screen_property
def test_val_score_decline_screen_takes_only_what_feeding_gives(seed: int, n: int, horizon: int) -> None:
    """A validation score is fed in full; a training accuracy it does not judge is taken in bulk."""
    metric = (VAL, "val/test_score/accuracy", "mean_token_accuracy", "train/accuracy")[seed % 4]
    steps, values, facts, excused = drawn(seed, metric, min(n, 300))
    rule = ValScoreDecline(metric, ValScoreDecline.settings(all_runs=seed % 3 == 0))
    screened_as_fed(rule, steps, values, facts, excused, horizon)


def test_a_score_it_does_not_judge_is_taken_in_bulk() -> None:
    steps, values, facts, excused = calm([0.5 + 0.001 * i for i in range(500)])
    rule = ValScoreDecline("mean_token_accuracy", ValScoreDecline.settings())
    assert screened_as_fed(rule, steps, values, facts, excused) == 500
