"""Alert delivery: small classes with `send(alert)` and `close()` (torchtitan's metric-logger shape).

- `ConsoleSink(stream=sys.stdout)`: one line per event: severity, run, rule, steps, metric, message.
- `JsonlSink(path)`: append-only `alerts.jsonl`, one JSON object per event (non-finite numbers as strings).
- `WebhookSink(url, timeout=5, retries=3)`: Slack-compatible JSON body (`text` plus `blocks`), POSTed from a
  background thread through a bounded queue: `send` never blocks ingest; when the queue is full the event is
  dropped with a logged warning. Each POST has a timeout and is retried with a short backoff.
- `StopFileSink(run_dir)`: off unless the collector is configured to use it; on an active error alert it
  writes `RUN_DIR/STOP` (the reason, as JSON) for a trainer that polls for it. It never deletes the file.
- `deliver(sinks, alert)`: send one alert to every sink; a failing sink is logged, never raised.

`alert` is `AlertEvent.to_dict()`: run, rule, severity, metric, first_step, last_step, value, message,
active, evidence.
"""

from __future__ import annotations

import json
import logging
import math
import os
import queue
import sys
import threading
import time
from pathlib import Path
from typing import IO, Protocol

log = logging.getLogger("runwatch.sinks")


class Sink(Protocol):
    def send(self, alert: dict) -> None: ...
    def close(self) -> None: ...


def alert_line(alert: dict) -> str:
    """The one-line human form of an alert event."""
    state = "" if alert.get("active", True) else " (resolved)"
    steps = f"step {alert.get('first_step')}"
    if alert.get("last_step") != alert.get("first_step"):
        steps = f"steps {alert.get('first_step')}-{alert.get('last_step')}"
    return (
        f"[{str(alert.get('severity', '?')).upper()}] run {alert.get('run')}: {alert.get('rule')}{state} "
        f"on {alert.get('metric')}, {steps}: {alert.get('message')}"
    )


def _json_safe(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


class ConsoleSink:
    """One line per alert event on a stream (the headless collector's console)."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stdout

    def send(self, alert: dict) -> None:
        self.stream.write(alert_line(alert) + "\n")
        self.stream.flush()

    def close(self) -> None:
        self.stream.flush()


class JsonlSink:
    """Append-only JSON lines file; every event is one line, written and flushed before `send` returns."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 -- held open across sends, closed in close()
        self._lock = threading.Lock()

    def send(self, alert: dict) -> None:
        line = json.dumps(_json_safe(alert), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()


def slack_body(alert: dict) -> dict:
    """A Slack incoming-webhook body: `text` (the fallback line) and one markdown section block."""
    line = alert_line(alert)
    return {"text": line, "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": line[:2900]}}]}


class WebhookSink:
    """POSTs alerts as Slack-compatible JSON from a background thread; never blocks the caller."""

    def __init__(
        self, url: str, timeout: float = 5.0, retries: int = 3, queue_size: int = 100, backoff: float = 0.5
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"webhook url must start with http:// or https://, got {url!r}")
        self.url, self.timeout, self.retries, self.backoff = url, timeout, max(0, retries), backoff
        self.sent = self.failed = self.dropped = 0
        self._queue: queue.Queue[dict | None] = queue.Queue(maxsize=max(1, queue_size))
        self._thread = threading.Thread(target=self._work, name="runwatch-webhook", daemon=True)
        self._thread.start()

    def send(self, alert: dict) -> None:
        try:
            self._queue.put_nowait(alert)
        except queue.Full:
            self.dropped += 1
            log.warning(
                "webhook %s: queue full (%d waiting); dropped the %s alert for run %s (it is still in alerts.jsonl)",
                self.url, self._queue.maxsize, alert.get("rule"), alert.get("run"),
            )  # fmt: skip

    def close(self, wait: float | None = None) -> None:
        """Deliver what is queued (bounded by `wait` seconds, default: one full retry cycle), then stop."""
        if wait is None:
            wait = (self.timeout + self.backoff * self.retries) * (self.retries + 1) + 1
        try:
            self._queue.put(None, timeout=wait)
        except queue.Full:
            log.warning(
                "webhook %s: could not stop cleanly, %d alert(s) undelivered", self.url, self._queue.qsize()
            )
            return
        self._thread.join(wait)

    def _work(self) -> None:
        while True:
            alert = self._queue.get()
            if alert is None:
                return
            self._deliver(alert)

    def _deliver(self, alert: dict) -> None:
        import urllib.error  # here: only a webhook needs the HTTP client (a fiftieth of a second to load)
        import urllib.request

        body = json.dumps(_json_safe(slack_body(alert)), allow_nan=False).encode()
        error = ""
        for attempt in range(self.retries + 1):
            request = urllib.request.Request(
                self.url, data=body, headers={"Content-Type": "application/json"}, method="POST"
            )
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    if 200 <= response.status < 300:
                        self.sent += 1
                        return
                    error = f"HTTP {response.status}"
            except urllib.error.HTTPError as exc:
                error = f"HTTP {exc.code}"
            except (urllib.error.URLError, TimeoutError, OSError) as exc:
                error = str(getattr(exc, "reason", exc)) or type(exc).__name__
            if attempt < self.retries:
                time.sleep(self.backoff * (attempt + 1))
        self.failed += 1
        log.warning(
            "webhook %s: gave up on the %s alert for run %s after %d attempt(s): %s",
            self.url, alert.get("rule"), alert.get("run"), self.retries + 1, error,
        )  # fmt: skip


class StopFileSink:
    """Writes RUN_DIR/STOP with the reason on an active error alert (off by default; the trainer may poll it)."""

    def __init__(self, run_dir: Path | str, severity: str = "error") -> None:
        self.run_dir, self.severity = Path(run_dir), severity

    def send(self, alert: dict) -> None:
        if not alert.get("active", True) or alert.get("severity") != self.severity:
            return
        path = self.run_dir / "STOP"
        if path.exists():
            return  # the first reason stands; a person removes the file to let a run continue
        reason = {
            "reason": alert_line(alert),
            "rule": alert.get("rule"),
            "run": alert.get("run"),
            "step": alert.get("last_step"),
        }
        tmp = self.run_dir / ".STOP.tmp"
        tmp.write_text(json.dumps(_json_safe(reason)) + "\n", encoding="utf-8")
        os.replace(tmp, path)
        log.warning("wrote %s: %s", path, reason["reason"])

    def close(self) -> None:
        pass


def deliver(sinks: list[Sink], alert: dict) -> None:
    """Send one alert to every sink; a sink that raises is logged and skipped, never fatal to the collector."""
    for sink in sinks:
        try:
            sink.send(alert)
        except Exception as exc:  # a broken sink must not stop ingest or the other sinks
            log.warning(
                "alert sink %s failed for the %s alert of run %s: %s",
                type(sink).__name__,
                alert.get("rule"),
                alert.get("run"),
                exc,
            )
