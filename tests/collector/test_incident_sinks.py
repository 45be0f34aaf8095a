"""The sinks and the stop rules speak in incidents (issue 22 item 1): a run whose gradient spikes keep coming
back is told once when its incident opens and once per escalation, not once per spike; every event carries its
incident; a [stop] rule naming a cause stops on a trouble its incident explains."""

from __future__ import annotations

import json
import math
import random

from collector.core.runtime import Settings
from collector.daemon.service import Collector
from collector.settings.stop import StopSettings, stops_run
from collector.store import alerts as store_alerts
from collector.store.db import Store
from tests.collector.test_daemon_support import Told


def test_recurring_spikes_are_told_once_per_incident_change_not_once_per_spike(tmp_path):
    run = tmp_path / "root" / "spiky"
    run.mkdir(parents=True)
    rng = random.Random(11)
    with (run / "metrics.jsonl").open("w") as f:
        for s in range(1, 3001):
            grad = 60.0 if s % 250 == 0 else math.exp(rng.gauss(0, 0.2))
            loss = 0.6 + 2 * math.exp(-s / 800) + rng.gauss(0, 0.01)
            f.write(json.dumps({"step": s, "data": {"train/grad_norm": grad, "train/loss": loss}}) + "\n")
    told = Told()
    collector = Collector(Settings(db=tmp_path / "rw.duckdb", roots=[tmp_path / "root"]), sinks=[told])
    try:
        collector.ingest_once()
    finally:
        collector.close()
    store = Store(tmp_path / "rw.duckdb")
    try:
        spikes = [a for a in store_alerts.list_alerts(store) if a["rule"] == "grad_spike"]
    finally:
        store.close()
    assert len(spikes) >= 8  # the evidence: a spike every 250 steps
    about = [e for e in told if e["incident"]["rule"] == "grad_spike"]
    assert 1 <= len(about) <= 3, [(e["event"], e["severity"], e["first_step"]) for e in about]
    assert about[0]["event"] == "opened" and {e["event"] for e in about[1:]} <= {"escalated", "auto_resolved"}
    incident = about[-1]["incident"]
    assert incident["alert_count"] == len(spikes) and incident["steps"] == sorted(
        a["first_step"] for a in spikes
    )
    for event in told:  # the documented fields stay, the incident is added
        assert {"run", "rule", "severity", "metric", "first_step", "last_step", "value", "message", "active",
                "evidence", "id", "state", "event", "action", "incident"} <= set(event)  # fmt: skip


def test_a_stop_rule_naming_the_cause_stops_on_a_trouble_its_incident_explains():
    settings = StopSettings(on=("reward_collapse",), severity="error", after_points=3)
    zero_grads = {"rule": "no_learning", "severity": "error", "active": True, "evidence": {"points": 1}}
    assert not stops_run(settings, zero_grads)  # alone, the alert names another rule
    incident = {"rules": ["reward_collapse", "no_learning"], "severity": "error", "points": 12}
    assert stops_run(settings, zero_grads | {"incident": incident})
    assert not stops_run(settings, zero_grads | {"incident": incident | {"severity": "warn"}})
    assert not stops_run(settings, zero_grads | {"incident": incident | {"points": 2}})
