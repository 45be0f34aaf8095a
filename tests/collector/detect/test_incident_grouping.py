"""Incidents from alerts (`collector.detect.incidents`, issue 22): one incident per trouble per run, a cause
first, escalation and resolution with a keep-firing window, the same answer whatever order the alerts come in."""

from __future__ import annotations

import math
import random

from collector.detect.engine import detect_series
from collector.detect.incidents import RunSteps, changes, incidents, told


def alert(
    id_, rule, first, last=None, severity="info", metric="grad_norm", state="resolved", value=1.0, **ev
):
    return {"id": id_, "run": "r", "rule": rule, "metric": metric, "first_step": first,
            "last_step": first if last is None else last, "severity": severity, "state": state, "value": value,
            "message": f"{rule} at {first}", "evidence": ev}  # fmt: skip


def test_recurring_spikes_of_one_rule_on_one_metric_are_one_incident_with_count_steps_and_worst():
    spikes = [alert(i, "grad_spike", 100 * i, value=float(i % 7 + 5), severity="error" if i % 3 else "warn",
                    peak_step=100 * i + 1) for i in range(1, 49)]  # fmt: skip
    found = incidents(spikes, {"r": RunSteps(log_interval=10, last_step=10_000, running=False)})
    assert len(found) == 1
    (one,) = found
    assert one.rule == "grad_spike" and one.alert_count == 48 and one.steps == [100 * i for i in range(1, 49)]
    assert one.severity == "error" and one.worst_value == 11.0 and one.state == "resolved"
    assert one.escalations == [{"step": 100, "severity": "error"}]
    assert one.id == 1 and one.alert_ids == list(range(1, 49))


def test_a_trouble_that_resolves_and_comes_back_within_the_keep_firing_window_is_the_same_incident():
    steps = {"r": RunSteps(log_interval=10, last_step=5000, running=False)}
    near = [alert(1, "val_loss_rise", 1000, 1100, metric="val/loss"),
            alert(2, "val_loss_rise", 1250, 1300, metric="val/loss", severity="warn")]  # fmt: skip
    (one,) = incidents(near, steps)  # 150 steps later: within 20 points of 10 steps
    assert one.alert_count == 2 and one.severity == "warn"
    assert one.escalations == [{"step": 1000, "severity": "info"}, {"step": 1250, "severity": "warn"}]
    far = [near[0], alert(2, "val_loss_rise", 1400, 1450, metric="val/loss")]
    assert [i.first_step for i in incidents(far, steps)] == [1000, 1400]  # 300 steps: a new incident


def test_a_cause_names_the_incident_and_its_consequences_join_it():
    rl = [alert(1, "reward_collapse", 40, 200, severity="warn", metric="critic/score/mean", state="open"),
          alert(2, "no_learning", 60, 200, severity="error", metric="actor/grad_norm", state="open"),
          alert(3, "grad_spike", 30, 31, metric="actor/grad_norm"),
          alert(4, "loss_spike", 32, 33, severity="warn", metric="loss"),
          alert(5, "kl_rise", 50, 90, severity="warn", metric="actor/kl_loss", state="open"),
          alert(6, "kl_spike", 70, 71, severity="error", metric="actor/kl_loss"),
          alert(7, "kl_spike", 80, 81, severity="error", metric="actor/kl_loss")]  # fmt: skip
    found = {i.rule: i for i in incidents(rl, {"r": RunSteps(1, 200)})}
    assert set(found) == {"reward_collapse", "grad_spike", "kl_rise"}
    assert found["reward_collapse"].rules == ["reward_collapse", "no_learning"]
    assert found["reward_collapse"].severity == "error" and found["reward_collapse"].state == "open"
    assert found["grad_spike"].rules == ["grad_spike", "loss_spike"] and found["grad_spike"].alert_count == 2
    assert found["kl_rise"].rules == ["kl_rise", "kl_spike"] and found["kl_rise"].alert_count == 3


def test_a_cause_dated_after_the_consequence_it_explains_takes_its_incident_in():
    # Sunshine535/nips-grpo-dynamics adabalance (TRL GRPO, a log every 5 steps): gradients exactly 0 from step
    # 70, the reward's collapse to 0 dated 100 (its rolling median crosses its line late), the reward's spread
    # at 0 from 145 (two stray 0.1 rewards broke its streak): one trouble
    rl = [alert(1, "no_learning", 70, 200, severity="warn", metric="grad_norm", state="open"),
          alert(2, "reward_collapse", 100, 200, severity="error", metric="reward", state="open"),
          alert(3, "no_learning", 150, 200, severity="warn", metric="loss", state="open"),
          alert(4, "reward_collapse", 145, 195, severity="warn", metric="reward_std")]  # fmt: skip
    [one] = incidents(rl, {"r": RunSteps(5, 200)})
    assert one.rules == ["reward_collapse", "no_learning"] and one.metric == "reward"
    assert one.metrics == ["reward", "grad_norm", "reward_std", "loss"]
    assert one.id == 1 and one.first_step == 70 and one.severity == "error" and one.alert_count == 4
    assert one.escalations == [{"step": 70, "severity": "warn"}, {"step": 100, "severity": "error"}]
    # more than a rolling window (10 logged points) before the cause: apart
    apart = [rl[0] | {"first_step": 45}, rl[1]]
    assert [i.rule for i in incidents(apart, {"r": RunSteps(5, 200)})] == ["no_learning", "reward_collapse"]
    # a rule that does not declare one trouble across metrics keeps one incident per metric
    two = [
        alert(1, "val_loss_rise", 100, 200, metric="val/a"),
        alert(2, "val_loss_rise", 120, 200, metric="val/b"),
    ]
    assert len(incidents(two, {"r": RunSteps(5, 200)})) == 2
    # a cause dated where it happened (a gradient spike) explains nothing before it
    spikes = [alert(1, "loss_spike", 30, 31, metric="loss"), alert(2, "grad_spike", 32, 33)]
    assert [i.rule for i in incidents(spikes, {"r": RunSteps(1, 100)})] == ["loss_spike", "grad_spike"]


def test_a_consequence_long_after_its_cause_stopped_firing_is_its_own_incident():
    apart = [alert(1, "grad_spike", 30, 31), alert(2, "loss_spike", 500, 501, metric="loss", severity="warn")]
    assert [i.rule for i in incidents(apart, {"r": RunSteps(1, 1000)})] == ["grad_spike", "loss_spike"]


def test_resolved_alerts_keep_their_incident_open_until_the_run_goes_past_the_window():
    one = [alert(1, "loss_plateau", 100, 200, metric="loss")]
    assert incidents(one, {"r": RunSteps(1, 210, running=True)})[0].state == "open"  # still firing
    assert incidents(one, {"r": RunSteps(1, 221, running=True)})[0].state == "resolved"
    assert incidents(one, {"r": RunSteps(1, 210, running=False)})[0].state == "resolved"  # the run ended
    acked = [alert(1, "loss_plateau", 100, 200, metric="loss", state="acked")]
    assert incidents(acked, {"r": RunSteps(1, 210)})[0].state == "acked"


def test_the_incidents_do_not_depend_on_the_order_the_alerts_come_in():
    rng = random.Random(5)
    rules = ["grad_spike", "loss_spike", "nonfinite", "loss_plateau", "val_loss_rise", "kl_rise", "kl_spike"]
    pool = [alert(i, rng.choice(rules), rng.randrange(0, 2000), severity=rng.choice(["info", "warn", "error"]),
                  metric=rng.choice(["loss", "grad_norm"])) for i in range(60)]  # fmt: skip
    want = [i.to_dict() for i in incidents(pool, {"r": RunSteps(5, 2000)})]
    for _ in range(5):
        rng.shuffle(pool)
        assert [i.to_dict() for i in incidents(pool, {"r": RunSteps(5, 2000)})] == want
    assert sum(i["alert_count"] for i in want) == 60  # every alert is the evidence of exactly one incident


def test_notifications_are_one_per_incident_and_its_escalation_reopening_and_resolution():
    steps = {"r": RunSteps(1, 100)}
    first = incidents([alert(1, "grad_spike", 50, severity="info", state="open")], steps)
    assert [e for _, e in changes({}, first)] == ["opened"]
    more = incidents(
        [alert(1, "grad_spike", 50, state="resolved"), alert(2, "grad_spike", 70, state="open")], steps
    )
    assert changes(told(first), more) == []  # a spike more: the incident's count, nothing to tell
    worse = incidents(
        [alert(1, "grad_spike", 50), alert(2, "grad_spike", 70, severity="error", state="open")], steps
    )
    assert [e for _, e in changes(told(more), worse)] == ["escalated"]
    done = incidents(
        [alert(1, "grad_spike", 50), alert(2, "grad_spike", 70, severity="error")], {"r": RunSteps(1, 200)}
    )
    assert [e for _, e in changes(told(worse), done)] == ["auto_resolved"]
    again = incidents([*[alert(1, "grad_spike", 50), alert(2, "grad_spike", 70, severity="error")],
                       alert(3, "grad_spike", 300, severity="warn", state="open")], {"r": RunSteps(1, 300)})  # fmt: skip
    assert [e for _, e in changes(told(done), again)] == ["reopened"]


def test_a_run_with_48_recurring_grad_spikes_that_damage_the_loss_is_one_error_incident():
    # the storm of issue 22: a spike every 60 logs, the loss jumping after each: 48 grad_spike errors
    rng = random.Random(3)
    steps = list(range(10, 30010, 10))
    grad = [0.33 * math.exp(rng.gauss(0, 0.2)) for _ in steps]
    loss = [0.55 - 0.000003 * s + rng.gauss(0, 0.01) for s in steps]
    for k in range(48):
        at = 150 + k * 60
        grad[at] = 40.0 + 20 * rng.random()
        loss[at + 1 : at + 4] = [1.5, 1.4, 1.2]
    events = detect_series({"grad_norm": (steps, grad), "loss": (steps, loss)})
    errors = [e for e in events if e.severity == "error"]
    assert len(errors) == 48 and {e.rule for e in errors} == {"grad_spike"}
    alerts = [
        e.to_dict() | {"id": n + 1, "state": "open" if e.active else "resolved"} for n, e in enumerate(events)
    ]
    found = incidents(alerts, {"run": RunSteps(10, steps[-1], running=False)})
    errors_found = [i for i in found if i.severity == "error"]
    assert len(errors_found) == 1 and errors_found[0].alert_count == 48
    assert errors_found[0].rules == ["grad_spike", "loss_spike"] and len(found) <= 3
