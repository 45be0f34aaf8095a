"""The alerts the collector delivers while it runs carry the same `action` as the API: a real `collector serve`
subprocess tailing a verl-shaped run with `global_step_N/` checkpoints, a real HTTP server receiving the
webhook, the real `DB.alerts.jsonl`, the real console; and a real damaged database that cannot build the
action, which must still deliver the alert.
"""

from __future__ import annotations

import io
import json
import logging
import random
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from collector.advice.action import needs_action
from collector.core.runtime import Settings, alerts_log_path
from collector.daemon.service import Collector
from collector.daemon.sinks import ConsoleSink, JsonlSink
from collector.store import alerts as store_alerts
from tests.collector.test_daemon_support import Daemon, cli, cli_json, wait_for
from tests.collector.test_sinks import Server

SPIKE = (300, 303)  # the grad norm x80 and the loss x6, then the loss x3 for seven steps: a grad_spike error


def lines(first: int, last: int) -> str:
    """verl file-logger lines for steps first..last of a run whose update at SPIKE does damage."""
    out = []
    for s in range(first, last + 1):
        rng = random.Random(s)
        loss, grad = 2.0 - s * 0.002 + rng.gauss(0, 0.02), 1.0 + rng.gauss(0, 0.05)
        if SPIKE[0] <= s <= SPIKE[1]:
            loss, grad = loss * 6, grad * 80
        elif SPIKE[1] < s <= SPIKE[1] + 7:
            loss *= 3
        out.append(json.dumps({"step": s, "data": {"train/loss": loss, "train/grad_norm": grad}}) + "\n")
    return "".join(out)


def save_checkpoint(run: Path, step: int) -> None:
    """A complete verl checkpoint folder (its huggingface/ export) and the latest-checkpoint marker."""
    hf = run / f"global_step_{step}" / "huggingface"
    hf.mkdir(parents=True)
    (hf / "config.json").write_text("{}")
    (hf / "tokenizer.json").write_text("{}")
    save_file({"w": np.zeros((4, 4), dtype=np.float32)}, str(hf / "model.safetensors"))
    (run / "latest_checkpointed_iteration.txt").write_text(str(step))


def verl_run(root: Path, last_step: int) -> Path:
    run = root / "spiky"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text(lines(1, last_step))
    for step in (100, 200, 250):
        save_checkpoint(run, step)
    return run


@pytest.fixture
def hook():
    server = Server(["ok"] * 50)  # a real webhook receiver on 127.0.0.1
    yield server
    server.close()


def events(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_a_live_error_alert_reaches_every_sink_with_the_apis_action(tmp_path, hook):
    root, db = tmp_path / "root", tmp_path / "rw.duckdb"
    run = verl_run(root, SPIKE[0] - 1)
    daemon = Daemon(db, [root], "--webhook", hook.url).start()
    try:
        client = daemon.client()
        wait_for(
            lambda: [c["step"] for c in client.get("/api/runs/spiky/checkpoints")["checkpoints"]] == [100, 200, 250],
            "the three checkpoints to be indexed",
        )  # fmt: skip
        with (run / "metrics.jsonl").open("a") as f:  # the trouble arrives while the collector watches
            f.write(lines(SPIKE[0], 360))
        wait_for(lambda: client.get("/api/runs/spiky")["last_step"] == 360, "step 360 to be stored")
        log = alerts_log_path(db)
        spike = wait_for(
            lambda: next((e for e in events(log) if e["rule"] == "grad_spike" and e["action"]), None),
            "a grad_spike event with an action in alerts.jsonl",
        )
        wait_for(
            lambda: any(b.get("action") and "grad_spike" in b["text"] for b in hook.bodies),
            "the webhook to receive the grad_spike event",
        )
        api = client.get("/api/alerts", params={"run": "spiky"})
    finally:
        daemon.ensure_stopped()
    delivered = events(log)
    assert delivered, "nothing was delivered"
    by_id = {a["id"]: a for a in api}
    for event in delivered:
        alert = by_id[event["id"]]
        # every event says whether an action is due the way the API does; one that is due carries it
        assert "action" in event and (event["action"] is not None) == needs_action(alert)
    # The spike's lines arrive in one write, so its alert's last change was delivered: the API gives that
    # alert the very action the sinks were given.
    last = {e["id"]: e for e in delivered}
    for alert_id, event in last.items():
        assert event["action"] == by_id[alert_id]["action"], by_id[alert_id]["rule"]
    action = spike["action"]
    assert action == by_id[spike["id"]]["action"]
    # step 200: the last checkpoint at least 100 steps before the spike; the advice would keep step 250
    assert action["restart_step"] == 200 and action["advice_step"] == 250 and action["trainer"] == "verl"
    assert action["checkpoint"]["path"] == str(run.resolve() / "global_step_200")
    assert (
        action["command"]
        == f"trainer.resume_mode=resume_path trainer.resume_from_path={run.resolve()}/global_step_200"
    )
    assert action["skip_steps"] == [spike["first_step"], spike["last_step"]] == [300, 304]

    body = next(b for b in hook.bodies if b.get("action") and b["action"] == action)
    first_line, second_line = body["text"].split("\n")
    assert first_line.startswith("[ERROR] run spiky: grad_spike")
    assert second_line == f"Action: {action['text']}"
    assert [b["text"]["text"] for b in body["blocks"]] == [first_line, second_line]
    assert action["command"] in second_line  # the command a person woken by it needs, in the message itself

    console = daemon.log.read_text().splitlines()
    at = next(i for i, x in enumerate(console) if x.startswith("[ERROR] run spiky: grad_spike"))
    assert console[at + 1] == f"    action: {action['text']}"


def test_a_one_shot_ingest_delivers_the_action_alerts_json_gives(tmp_path):
    root, db = tmp_path / "root", tmp_path / "rw.duckdb"
    verl_run(root, 360)  # the whole run is there before runwatch first looks
    cli(db, "ingest", str(root))
    (event,) = [e for e in events(alerts_log_path(db)) if e["rule"] == "grad_spike"]
    (alert,) = [a for a in cli_json(db, "alerts") if a["id"] == event["id"]]
    # the checkpoints are indexed before the points are judged, so the action names one
    assert event["action"] == alert["action"] and event["action"]["restart_step"] == 200


def test_an_action_that_cannot_be_built_never_stops_delivery(tmp_path, caplog):
    root, db = tmp_path / "root", tmp_path / "rw.duckdb"
    run = verl_run(root, SPIKE[0] - 1)
    stream, log = io.StringIO(), tmp_path / "alerts.jsonl"
    collector = Collector(Settings(db=db, roots=[root]), sinks=[ConsoleSink(stream), JsonlSink(log)])
    try:
        collector.ingest_once()
        assert not [e for e in events(log) if needs_action(e)]
        # A damaged database: the checkpoint index the action reads is gone (the points and alerts are not).
        with collector.store.transaction() as cur:
            cur.execute("DROP TABLE checkpoints")
        with (run / "metrics.jsonl").open("a") as f:
            f.write(lines(SPIKE[0], 360))
        with caplog.at_level(logging.WARNING, logger="collector.detect"):
            collector.ingestor.ingest([str(run / "metrics.jsonl")])
        stored = store_alerts.list_alerts(collector.store, run="spiky", rule="grad_spike")
        assert [a["severity"] for a in stored] == ["error"]  # the alert itself is stored as ever
    finally:
        collector.close()
    spike = next(e for e in events(log) if e["rule"] == "grad_spike" and e["severity"] == "error")
    assert spike["action"] is None  # delivered all the same, without the action
    assert "run spiky: the action for the grad_spike alert(s) could not be built" in caplog.text
    assert "delivered without it" in caplog.text
    assert "[ERROR] run spiky: grad_spike" in stream.getvalue() and "action:" not in stream.getvalue()
