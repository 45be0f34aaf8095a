"""The incremental engine: batches, re-reads, rewrites, episode lifecycle, the stalled rule, custom rules."""

from __future__ import annotations

import json
import math
import random

import pytest

from collector.core.model import Points
from collector.detect.custom import CustomRule
from collector.detect.engine import AlertEvent, RunDetector, detect_series
from collector.settings.config import DetectConfig, load_config
from tests.collector.detect.synth import healthy_sft, replace_values


def rows_of(series):
    return sorted(
        (s, i, m, v)
        for i, (m, (steps, values)) in enumerate(series.items())
        for s, v in zip(steps, values, strict=True)
    )


def points_of(series, start=None, end=None, wall=None, rows=None):
    """The series as one batch of points in step order (optionally only steps in [start, end))."""
    points = Points()
    for s, _, m, v in rows if rows is not None else rows_of(series):
        if (start is None or s >= start) and (end is None or s < end):
            points.add(s, m, v, wall(s) if wall else None)
    return points


def batches(series, size):
    """The series cut into batches of `size` steps, in order."""
    by_step: dict[int, Points] = {}
    for s, _, m, v in rows_of(series):
        by_step.setdefault(s // size, Points()).add(s, m, v)
    return [by_step[k] for k in sorted(by_step)]


def final_states(events: list[AlertEvent]) -> dict:
    latest = {}
    for e in events:
        latest[(e.rule, e.metric, e.first_step)] = (e.severity, e.last_step, e.active)
    return latest


def troubled_series():
    series = healthy_sft(seed=30)
    series = replace_values(series, "train/grad_norm", {400: math.nan, 900: 40.0, 1300: 35.0})
    series = replace_values(series, "train/loss", {902: 5.0})
    return series


def test_batches_of_any_size_give_the_same_episodes_as_one_pass():
    series = troubled_series()
    events = RunDetector("r").update(points_of(series))
    whole = final_states(events)
    # the loss jump right after the grad spike is the same incident: one alert names both
    assert {k[0] for k in whole} == {"nonfinite", "grad_spike"}
    assert {r for e in events for r in e.evidence.get("rules", [e.rule])} >= {"grad_spike", "loss_spike"}
    for size in (1, 7, 250):
        detector = RunDetector("r")
        events = []
        for batch in batches(series, size):
            events += detector.update(batch)
        assert final_states(events) == whole, f"batch size {size}"


def test_one_event_per_episode_per_batch_and_the_same_first_step_throughout():
    series = replace_values(healthy_sft(seed=31), "train/grad_norm", {s: 30.0 for s in range(700, 720)})
    detector = RunDetector("r")
    events = []
    for points in batches(series, 2):
        batch = detector.update(points)
        keys = [(e.rule, e.metric, e.first_step) for e in batch]
        assert len(keys) == len(set(keys))
        events += batch
    spikes = [e for e in events if e.rule == "grad_spike"]
    assert {e.first_step for e in spikes} == {700}
    assert spikes[0].severity == "warn" and spikes[-1].severity == "error"  # escalated while it lasted
    assert spikes[-1].active is False and all(e.active for e in spikes[:-1])


def test_whole_file_re_read_raises_nothing_new():
    series = troubled_series()
    detector = RunDetector("r")
    first = detector.update(points_of(series))
    assert first
    assert detector.update(points_of(series)) == []  # trainer_state.json re-read from offset 0


def test_rewritten_history_replaces_values_and_rewinds():
    series = healthy_sft(seed=32)
    detector = RunDetector("r")
    assert detector.update(points_of(series, end=1000)) == []
    # a resumed run rewrites steps 950.. with a NaN at 960: the new value replaces the old one and is judged
    rewritten = replace_values(series, "train/loss", {960: math.nan})
    events = detector.update(points_of(rewritten, start=950, end=1100))
    assert [(e.rule, e.metric, e.first_step) for e in events] == [("nonfinite", "train/loss", 960)]


def test_rl_runs_do_not_judge_the_policy_loss_as_a_language_model_loss():
    steps = list(range(1, 300))
    loss = [0.01 * math.sin(s) for s in steps]
    loss[150] = 1.0
    assert detect_series({"loss": (steps, loss), "reward": (steps, [1.0 + s / 300 for s in steps])}) == []
    assert "loss_spike" in {e.rule for e in detect_series({"loss": (steps, [1.0 + v for v in loss])})}


def test_stalled_when_running_and_silent_for_many_step_intervals():
    series = healthy_sft(total=95, seed=33)  # last step 95: neither a save nor a validation step
    detector = RunDetector("r")
    detector.update(points_of(series, wall=lambda s: 1000.0 + 2.0 * s))  # a step every 2 s
    last = 1190.0
    running = {"state": "running"}
    assert detector.tick(last + 50, running, last) == []  # 50 s: under the 60 s floor
    events = detector.tick(last + 90, running, last)
    assert [(e.rule, e.severity, e.first_step) for e in events] == [("stalled", "warn", 95)]
    assert "no new point for 1.5 min" in events[0].message and events[0].evidence["usual_interval_s"] == 2
    assert detector.tick(last + 200, running, last)[0].severity == "error"  # > 3x the limit
    assert detector.tick(last + 200, {"state": "completed"}, last)[0].active is False


def test_a_long_pause_after_a_save_or_validation_step_is_expected():
    series = healthy_sft(total=100, seed=36)  # step 100 validates and saves
    detector = RunDetector("r")
    detector.update(points_of(series, wall=lambda s: 1000.0 + 2.0 * s))
    assert detector.tick(1200.0 + 600, {"status": "running"}, 1200.0) == []  # 10 min: the save may be slow
    assert detector.tick(1200.0 + 1300, {"status": "running"}, 1200.0)[0].evidence["limit_s"] == 1200


def test_stalled_resolves_when_points_arrive_again():
    detector = RunDetector("r")
    p = Points()
    for s in range(1, 50):
        p.add(s, "train/loss", 2.0 - s / 100, 100.0 + s)
    detector.update(p)
    assert detector.tick(10_000, {"status": "running"}, 149.0)[0].active
    more = Points()
    more.add(50, "train/loss", 1.5, 10_001)
    events = detector.update(more)
    assert [(e.rule, e.active) for e in events] == [("stalled", False)]


def test_stalled_uses_the_logged_time_per_step_when_points_carry_no_wall_time():
    detector = RunDetector("r")
    series = healthy_sft(total=50, seed=35)
    steps, _ = series["train/time(s)"]
    series["train/time(s)"] = (steps, [60.0] * len(steps))  # a minute per step: the limit is 10 minutes
    series = {m: (st[:-1], vs[:-1]) for m, (st, vs) in series.items()}  # ends at step 49, not a save step
    detector.update(points_of(series))
    assert detector.tick(500.0, {"status": "running"}, 0.0) == []
    (event,) = detector.tick(700.0, {"status": "running"}, 0.0)
    assert event.evidence["limit_s"] == 600 and event.evidence["usual_interval_s"] == 60


def test_stalled_uses_the_default_limit_when_no_interval_is_known():
    detector = RunDetector("r")
    series = healthy_sft(total=50, seed=34)
    series.pop("train/time(s)")
    detector.update(points_of(series))
    assert detector.tick(1000.0, {"status": "running"}, 0.0) == []
    assert detector.tick(2000.0, {"status": "running"}, 0.0)[0].evidence["limit_s"] == 1800


def test_custom_rules_accuracy_zero_and_falling():
    config = DetectConfig(
        custom=(
            CustomRule(
                id="acc0", metric="val/*accuracy*", op="==", value=0.0, for_points=20, severity="error"
            ),
            CustomRule(id="fall", metric="epoch_reward", op="falling", for_points=10, severity="warn"),
        )
    )
    steps = list(range(1, 41))
    acc = [0.3] * 10 + [0.0] * 30
    reward = [float(s) for s in range(1, 21)] + [20.0 - s for s in range(1, 21)]
    events = detect_series({"val/answer_accuracy": (steps, acc), "epoch_reward": (steps, reward)}, config)
    found = {(e.rule, e.severity, e.first_step) for e in events}
    assert found == {("custom:acc0", "error", 11), ("custom:fall", "warn", 21)}


def test_events_serialise_to_json_safe_dicts():
    events = detect_series({"train/grad_norm": ([1, 2, 3], [1.0, math.inf, 1.0])})
    d = events[0].to_dict()
    assert (
        d["value"] == "inf"
        and d["run"] == "run"
        and set(d) >= {"rule", "severity", "first_step", "last_step", "active"}
    )


def test_replay_after_a_restart_continues_stored_episodes_and_ignores_a_cut_baseline():
    series = replace_values(healthy_sft(seed=37), "train/grad_norm", {s: 0.0 for s in range(1500, 2001)})
    full = RunDetector("r")
    (stored,) = [e for e in full.update(points_of(series)) if e.active]
    assert (stored.rule, stored.first_step) == ("no_learning", 1500)
    # restart: a fresh detector, the stored open alert, and a tail of 256 points per metric
    tail = {m: (st[-256:], vs[-256:]) for m, (st, vs) in series.items()}
    tail["train/grad_norm"] = (
        tail["train/grad_norm"][0],
        [5.0, *tail["train/grad_norm"][1][1:]],
    )  # odd first point
    again = RunDetector("r")
    again.resume_episodes([stored.to_dict()])
    events = again.update(points_of(tail))
    assert [(e.rule, e.first_step, e.active) for e in events] == [("no_learning", 1500, True)]


def test_a_resumed_episode_whose_condition_cleared_while_down_is_closed():
    series = healthy_sft(seed=38)
    detector = RunDetector("r")
    detector.resume_episodes(
        [
            {
                "rule": "grad_spike",
                "severity": "warn",
                "metric": "train/grad_norm",
                "first_step": 700,
                "last_step": 702,
                "value": 30.0,
                "message": "m",
            }
        ]
    )
    events = detector.update(points_of(series, start=800))
    assert [(e.rule, e.first_step, e.active) for e in events] == [("grad_spike", 700, False)]


@pytest.mark.parametrize("seed", range(6))
def test_garbage_in_never_raises(seed):
    # one bad file must never crash the collector: random values (NaN, inf, negative, huge, zero), steps out
    # of order and repeated, odd run info, tiny windows
    rng = random.Random(seed)
    names = ["train/loss", "train/grad_norm", "train/lr", "train/lr(1e-3)", "train/time(s)", "val/loss", "actor/ppo_kl",
             "critic/score/mean", "critic/score/std", "eval_loss", "x/unknown", "loss", "reward"]  # fmt: skip
    specials = [math.nan, math.inf, -math.inf, 0.0, -1.0, 1e308, -1e308, 1e-320]
    config = load_config(None, None)
    info = rng.choice(
        [
            {},
            {"algorithm": ["ppo"]},
            {"optim": {"lr": "high", "total_training_steps": 10}},
            {"vocab_size": -3},
        ]
    )
    detector = RunDetector("fuzz", config, info)
    for _ in range(30):
        points = Points()
        for _ in range(rng.randint(0, 60)):
            value = rng.choice(specials) if rng.random() < 0.2 else rng.gauss(1, 3)
            points.add(rng.randint(-5, 80), rng.choice(names), value, rng.choice([None, rng.uniform(0, 1e9)]))
        for event in detector.update(points):
            assert event.severity in ("info", "warn", "error") and event.first_step <= event.last_step
            json.dumps(event.to_dict(), allow_nan=False)
        detector.tick(
            rng.uniform(0, 2e9),
            rng.choice([None, {}, {"state": "running"}, {"status": 3}]),
            rng.choice([None, 0.0, 1e9]),
        )
        detector.note_checkpoints([rng.randint(0, 80)])
    detect_series({"train/loss": ([1, 1, 2], [math.nan, 1.0, math.inf])})


def test_to_dict_is_strict_json_even_with_non_finite_evidence():
    event = AlertEvent(
        "r", "warn", "m", 1, 2, math.nan, "x", evidence={"z": math.inf, "values": [[1, math.nan]]}
    )
    assert json.loads(json.dumps(event.to_dict(), allow_nan=False))["evidence"] == {
        "z": "inf",
        "values": [[1, "nan"]],
    }
