"""Incidents, not storms (issue 12 item 6), and the run's own spike sizes as its noise: fixtures of the shapes
of the real runs that misjudged (Miguel-Alessio's grad burst with the loss jumping after it, Ning-Guo's GRPO KL
accelerating then staying above its ceiling, Hahaazaza's grad norms that spike to 5-12 every few dozen logs
with no harm to the loss), written here."""

from __future__ import annotations

import math
import random

from collector.detect.engine import detect_series

RANK = {"info": 0, "warn": 1, "error": 2}


def warned(events, rule: str | None = None) -> list:
    return [e for e in events if RANK[str(e.severity)] >= 1 and (rule is None or e.rule == rule)]


def test_a_grad_spike_then_a_loss_jump_is_one_alert_naming_both():
    rng = random.Random(3)
    steps = list(range(10, 4010, 10))
    grad = [0.33 * math.exp(rng.gauss(0, 0.2)) for _ in steps]
    loss = [0.55 - 0.00003 * s + rng.gauss(0, 0.01) for s in steps]
    at = steps.index(2680)
    grad[at - 1 : at + 3] = [12.2, 131.0, 41.4, 17.0]  # the burst
    loss[at + 1 : at + 5] = [0.95, 1.51, 1.08, 0.9]  # the loss jumps right after, then comes back
    events = detect_series({"grad_norm": (steps, grad), "loss": (steps, loss)})
    alerts = warned(events)
    assert len(alerts) == 1, [(e.rule, e.metric, e.severity, e.first_step) for e in events]
    incident = alerts[0]
    assert incident.rule == "grad_spike" and str(incident.severity) == "error"
    assert incident.evidence["metrics"] == ["grad_norm", "loss"]
    assert incident.evidence["rules"] == ["grad_spike", "loss_spike"]
    assert "Same incident: loss_spike on loss" in incident.message
    assert incident.first_step <= 2680 <= incident.last_step and incident.last_step >= 2690


def test_a_loss_jump_long_after_a_grad_spike_is_its_own_alert():
    rng = random.Random(4)
    steps = list(range(1, 1001))
    grad = [0.5 * math.exp(rng.gauss(0, 0.1)) for _ in steps]
    loss = [1.0 + rng.gauss(0, 0.01) for _ in steps]
    grad[300:302] = [30.0, 40.0]
    loss[700:704] = [3.0, 3.2, 3.1, 3.3]
    events = detect_series({"grad_norm": (steps, grad), "loss": (steps, loss)})
    assert {e.rule for e in warned(events)} == {"grad_spike", "loss_spike"}
    assert all("Same incident" not in e.message for e in events)


def test_kl_accelerating_then_above_its_ceiling_is_one_alert():
    # a GRPO run logged every ~20 steps: kl 0.002 -> 0.8 by the 5th log, then 2-3 to the end (Ning-Guo)
    rng = random.Random(5)
    steps = list(range(1, 94))
    kl = [0.002 * 2.2**s if s < 9 else 2.5 + rng.gauss(0, 0.3) for s in steps]
    reward = [0.66 + rng.gauss(0, 0.02) for _ in steps]
    events = detect_series({"kl": (steps, kl), "reward": (steps, reward)})
    kl_alerts = [e for e in events if e.rule in ("kl_rise", "kl_spike")]
    assert len(kl_alerts) == 1, [(e.rule, e.severity, e.first_step, e.last_step) for e in kl_alerts]
    assert set(kl_alerts[0].evidence["rules"]) == {"kl_rise", "kl_spike"}


def test_grad_spikes_the_size_the_run_often_reaches_are_a_notice_not_a_warning():
    # a near-zero-loss classifier: grad norms ~0.01 with spikes to 2-12 every few dozen logs, two in a row
    # now and then, the loss never reacting (Hahaazaza)
    rng = random.Random(6)
    steps = list(range(10, 9010, 10))
    grad = [0.02 * math.exp(rng.gauss(0, 1.0)) for _ in steps]
    for i in range(20, len(grad) - 1, 12):
        grad[i] = rng.uniform(2.0, 8.0)
        if i % 5 == 0:
            grad[i + 1] = rng.uniform(2.0, 8.0)
    grad[600], grad[601] = 10.6, 11.9  # the largest yet, barely: the run's own noise
    loss = [max(0.0003, 0.5 * math.exp(-s / 800)) + abs(rng.gauss(0, 0.005)) for s in steps]
    events = detect_series({"grad_norm": (steps, grad), "loss": (steps, loss)})
    # (the first spikes, before the run has shown its habit, may warn: they are news then)
    later = [e for e in warned(events, "grad_spike") if e.first_step > steps[200]]
    assert not later, [(e.severity, e.first_step, e.value) for e in later]
    # a spike many times beyond anything the run has shown is still a warning
    grad[800], grad[801] = 300.0, 280.0
    events = detect_series({"grad_norm": (steps, grad), "loss": (steps, loss)})
    assert [e.first_step for e in warned(events, "grad_spike") if e.first_step > steps[200]] == [steps[800]]


def test_a_loss_logged_before_the_grad_norm_of_the_same_blown_up_step_is_the_same_incident():
    # verl logs train/loss before train/grad_norm: an lr x40 step makes both jump at the next step, the loss
    # first in the line; one alert, headed by the grad spike (the cause), names the loss too
    rng = random.Random(8)
    steps = list(range(1, 1501))
    loss = [1.0 + 2.0 * math.exp(-s / 200) + rng.gauss(0, 0.02) for s in steps]
    grad = [0.8 * math.exp(rng.gauss(0, 0.1)) for _ in steps]
    for i in range(1001, 1005):
        grad[i] = 12.0
    for i in range(1001, 1060):
        loss[i] += 8.0 * math.exp(-(i - 1001) / 30)
    events = detect_series({"train/loss": (steps, loss), "train/grad_norm": (steps, grad)})
    alerts = warned(events)
    assert len(alerts) == 1, [(e.rule, e.metric, str(e.severity), e.first_step) for e in alerts]
    incident = alerts[0]
    assert (incident.rule, incident.metric, str(incident.severity)) == (
        "grad_spike",
        "train/grad_norm",
        "error",
    )
    assert (
        incident.evidence["metrics"] == ["train/grad_norm", "train/loss"]
        and incident.first_step == steps[1001]
    )
