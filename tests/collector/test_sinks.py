"""Alert delivery against real things: a file, a stream, and a real HTTP server on 127.0.0.1 in a thread.

No timed assertions: the tests wait on events the server sets, with generous upper bounds that only matter
when something is broken.
"""

from __future__ import annotations

import io
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from collector.daemon.sinks import (
    ConsoleSink,
    JsonlSink,
    StopFileSink,
    WebhookSink,
    alert_line,
    deliver,
    slack_body,
)
from collector.settings.stop import StopSettings, stops_run

ALERT = {
    "run": "sft/run1",
    "rule": "grad_spike",
    "severity": "error",
    "metric": "train/grad_norm",
    "first_step": 2650,
    "last_step": 2745,
    "value": 131.0,
    "message": "train/grad_norm = 131 at step 2680, 400x its recent median 0.33.",
    "active": True,
    "evidence": {"baseline_median": 0.33, "z": float("inf")},
}


class Server:
    """A local webhook receiver. `plan` says what to do per request: "ok", "fail" (HTTP 500) or "hang"."""

    def __init__(self, plan):
        self.plan = list(plan)
        self.bodies: list[dict] = []
        self.attempts = 0
        self.delivered = threading.Event()
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                action = server.plan[min(server.attempts, len(server.plan) - 1)]
                server.attempts += 1
                if action == "hang":
                    server.release.wait(30)  # longer than the sink's timeout
                    return
                if action == "fail":
                    self.send_response(500)
                    self.end_headers()
                    return
                server.bodies.append(json.loads(body))
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"ok")
                server.delivered.set()

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server_factory():
    made = []

    def make(plan):
        made.append(Server(plan))
        return made[-1]

    yield make
    for s in made:
        s.close()


def test_webhook_posts_a_slack_compatible_body(server_factory):
    server = server_factory(["ok"])
    sink = WebhookSink(server.url, timeout=5, retries=0)
    sink.send(ALERT)
    assert server.delivered.wait(30)
    sink.close()
    (body,) = server.bodies
    assert body["text"] == alert_line(ALERT) and body["text"].startswith("[ERROR] run sft/run1: grad_spike")
    assert body["blocks"][0]["type"] == "section" and body["blocks"][0]["text"]["type"] == "mrkdwn"
    assert sink.sent == 1 and sink.failed == 0


def test_webhook_retries_after_a_failed_attempt(server_factory):
    server = server_factory(["fail", "ok"])
    sink = WebhookSink(server.url, timeout=5, retries=3, backoff=0.01)
    sink.send(ALERT)
    assert server.delivered.wait(30)
    sink.close()
    assert server.attempts == 2 and sink.sent == 1 and sink.failed == 0


def test_webhook_times_out_on_a_hanging_server_and_gives_up_with_a_warning(server_factory, caplog):
    server = server_factory(["hang"])
    sink = WebhookSink(server.url, timeout=0.3, retries=1, backoff=0.01)
    with caplog.at_level(logging.WARNING, logger="runwatch.sinks"):
        sink.send(ALERT)  # returns at once: delivery is on the sink's thread
        sink.close(wait=120)  # waits for the two attempts to time out (the bound only matters if broken)
    assert sink.failed == 1 and sink.sent == 0 and server.attempts == 2
    assert "gave up on the grad_spike alert for run sft/run1 after 2 attempt(s)" in caplog.text


def test_webhook_never_blocks_and_drops_with_a_warning_when_the_queue_is_full(server_factory, caplog):
    server = server_factory(["hang"])
    sink = WebhookSink(server.url, timeout=5, retries=0, queue_size=2)
    with caplog.at_level(logging.WARNING, logger="runwatch.sinks"):
        for _ in range(10):
            sink.send(ALERT)  # the first is stuck on the server, two wait, the rest are dropped
    assert sink.dropped >= 7
    assert "queue full" in caplog.text and "still in alerts.jsonl" in caplog.text
    server.release.set()
    sink.close(wait=120)


def test_webhook_refuses_a_url_that_is_not_http():
    with pytest.raises(ValueError, match="http"):
        WebhookSink("file:///etc/passwd")


def test_jsonl_is_append_only_one_object_per_event(tmp_path):
    path = tmp_path / "db.alerts.jsonl"
    path.write_text('{"earlier": true}\n')
    sink = JsonlSink(path)
    sink.send(ALERT)
    sink.send(ALERT | {"active": False})
    sink.close()
    lines = path.read_text().splitlines()
    assert json.loads(lines[0]) == {"earlier": True}
    assert [json.loads(x)["active"] for x in lines[1:]] == [True, False]
    assert json.loads(lines[1])["evidence"]["z"] == "inf"  # strict JSON: no bare Infinity


def test_console_prints_one_line_per_event():
    stream = io.StringIO()
    ConsoleSink(stream).send(ALERT | {"active": False, "first_step": 5, "last_step": 5})
    (line,) = stream.getvalue().splitlines()
    assert line.startswith("[ERROR] run sft/run1: grad_spike (resolved) on train/grad_norm, step 5: ")


def test_an_alert_opened_and_resolved_in_one_pass_prints_two_different_lines():
    # a collector restarted after a kill -9 reads the backlog at once: `opened` and `auto_resolved` of one
    # alert come together, both inactive; they once printed the same line twice
    stream = io.StringIO()
    over = ALERT | {"active": False, "first_step": 61, "last_step": 64}
    ConsoleSink(stream).send(over | {"event": "opened"})
    ConsoleSink(stream).send(over | {"event": "auto_resolved"})
    opened, resolved = stream.getvalue().splitlines()
    assert opened.startswith(
        "[ERROR] run sft/run1: grad_spike (opened, already over) on train/grad_norm, steps 61-64"
    )
    assert resolved.startswith("[ERROR] run sft/run1: grad_spike (resolved) on train/grad_norm, steps 61-64")


ACTION = {
    "checkpoint": {
        "step": 2500,
        "path": "/runs/sft/run1/global_step_2500",
        "complete": True,
        "inferred": False,
    },
    "trainer": "verl",
    "trainer_evidence": "its checkpoints are verl's global_step_N folders",
    "command": "trainer.resume_mode=resume_path trainer.resume_from_path=/runs/sft/run1/global_step_2500",
    "restart_step": 2500,
    "skip_steps": [2650, 2745],
    "advice_step": 2600,
    "text": "Go back to step 2500. To resume from it, add to your verl command `trainer.resume_mode=...`.",
}


def test_an_event_with_an_action_carries_it_to_every_sink(tmp_path, server_factory):
    alert = ALERT | {"id": 7, "state": "open", "event": "opened", "action": ACTION}
    stream = io.StringIO()
    ConsoleSink(stream).send(alert)
    assert stream.getvalue().splitlines() == [alert_line(alert), f"    action: {ACTION['text']}"]
    path = tmp_path / "db.alerts.jsonl"
    sink = JsonlSink(path)
    sink.send(alert)
    sink.close()
    assert json.loads(path.read_text())["action"] == ACTION
    server = server_factory(["ok"])
    hook = WebhookSink(server.url, timeout=5, retries=0)
    hook.send(alert)
    assert server.delivered.wait(30)
    hook.close()
    (body,) = server.bodies
    assert body["text"] == f"{alert_line(alert)}\nAction: {ACTION['text']}" and body["action"] == ACTION
    assert [b["text"]["text"] for b in body["blocks"]] == body["text"].split("\n")


def test_an_event_without_an_action_stays_one_line():
    for alert in (ALERT, ALERT | {"action": None}):
        stream = io.StringIO()
        ConsoleSink(stream).send(alert)
        assert stream.getvalue().splitlines() == [alert_line(alert)]
        body = slack_body(alert)
        assert body["text"] == alert_line(alert) and len(body["blocks"]) == 1 and "action" not in body


def test_stop_request_only_for_the_configured_rules_and_the_first_reason_stands(tmp_path):
    stopped = []
    settings = {
        "sft/run1": StopSettings(on=("grad_spike", "accuracy_zero"), severity="error", after_points=3)
    }
    sink = StopFileSink(
        lambda run: tmp_path if run == "sft/run1" else None,
        lambda run: settings.get(run, StopSettings()),
        lambda alert, request: stopped.append((alert["id"], request)),
    )
    three = {"points": 3}
    sink.send(ALERT | {"id": 1, "severity": "warn", "evidence": three})  # below the severity
    sink.send(ALERT | {"id": 1, "active": False, "evidence": three})  # cleared
    sink.send(ALERT | {"id": 1, "evidence": {"points": 2}})  # not yet after_points
    sink.send(ALERT | {"id": 2, "rule": "loss_spike", "evidence": three})  # not a stop rule
    sink.send(ALERT | {"id": 3, "run": "other", "evidence": three})  # a run without [stop]
    assert not (tmp_path / "runwatch.stop").exists() and not stopped
    sink.send(ALERT | {"id": 4, "evidence": three})
    sink.send(ALERT | {"id": 5, "rule": "custom:accuracy_zero", "evidence": three})  # a second one: no effect
    request = json.loads((tmp_path / "runwatch.stop").read_text())
    assert request["rule"] == "grad_spike" and request["alert_id"] == 4 and request["step"] == 2745
    assert request["by"] == "rule" and "grad_spike" in request["reason"]
    assert [alert_id for alert_id, _ in stopped] == [4]


def test_a_custom_rule_stops_by_its_id():
    settings = StopSettings(on=("accuracy_zero",), severity="warn")
    assert stops_run(settings, ALERT | {"rule": "custom:accuracy_zero", "severity": "warn"})
    assert stops_run(settings, ALERT | {"rule": "custom:accuracy_zero", "severity": "error"})
    assert not stops_run(settings, ALERT | {"rule": "custom:accuracy_zero", "severity": "info"})
    assert not stops_run(StopSettings(), ALERT)  # off by default


def test_deliver_survives_a_broken_sink(tmp_path, caplog):
    class Broken:
        def send(self, alert):
            raise OSError("disk full")

        def close(self):
            pass

    stream = io.StringIO()
    with caplog.at_level(logging.WARNING, logger="runwatch.sinks"):
        deliver([Broken(), ConsoleSink(stream)], ALERT)
    assert "disk full" in caplog.text and stream.getvalue().count("\n") == 1
