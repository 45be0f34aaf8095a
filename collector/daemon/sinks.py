"""Alert delivery: small classes with `send(alert)` and `close()` (torchtitan's metric-logger shape).

- `ConsoleSink(stream=sys.stdout)`: one line per event: severity, run, rule, steps, metric, message; an
  event with an action gets a second, indented line: the action's text.
- `JsonlSink(path)`: append-only `alerts.jsonl`, one JSON object per event (non-finite numbers as strings).
- `WebhookSink(url, timeout=5, retries=3)`: Slack-compatible JSON body (`text` plus `blocks`, the action's text
  as a second line and block, and the `action` object itself), POSTed from a background thread through a
  bounded queue: `send` never blocks ingest; when the queue is full the event is dropped with a logged warning.
  Each POST has a timeout and is retried with a short backoff.
- `StopFileSink(run_dir_of, settings_of, on_stopped)`: writes the run's stop request `RUN_DIR/runwatch.stop`
  when an alert matches the run's `[stop]` settings (off by default); it never deletes the file.
- `deliver(sinks, alert)`: send one alert to every sink; a failing sink is logged, never raised.

`alert` is `AlertEvent.to_dict()`: run, rule, severity, metric, first_step, last_step, value, message,
active, evidence; from the collector also id, state, event, `incident` (the incident the alert belongs to, as
`GET /api/incidents` gives it: one event per incident opened, escalated, re-opened or resolved) and `action`
(the API's `action` for the alert, or null: `collector.daemon.detection`).
"""

from __future__ import annotations

import json
import logging
import math
import queue
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Protocol

from collector.core.printable import printable
from collector.core.stop_request import STOP_FILE, stop_path, write_stop_request
from collector.settings.stop import StopSettings, stops_run

log = logging.getLogger("runwatch.sinks")


class Sink(Protocol):
    def send(self, alert: dict) -> None: ...
    def close(self) -> None: ...


def alert_line(alert: dict) -> str:
    """The one-line human form of an alert event."""
    state = ""
    if not alert.get("active", True):
        # a backlog read at once (a collector restarted mid-run) opens and resolves an alert in one pass: its
        # `opened` event then says so, else the two events print as one line twice
        state = " (opened, already over)" if alert.get("event") == "opened" else " (resolved)"
    steps = f"step {alert.get('first_step')}"
    if alert.get("last_step") != alert.get("first_step"):
        steps = f"steps {alert.get('first_step')}-{alert.get('last_step')}"
    # a run-level alert (run_failed, stalled) is about no metric: no "on" then
    where = f" on {alert['metric']}," if alert.get("metric") else ","
    return (
        f"[{str(alert.get('severity', '?')).upper()}] run {alert.get('run')}: {alert.get('rule')}{state}"
        f"{where} {steps}: {alert.get('message')}{incident_note(alert.get('incident'))}"
    )


def incident_note(incident: object) -> str:
    """` (incident N: ...)` after an event's line when its incident holds more than this alert."""
    if not isinstance(incident, dict) or int(incident.get("alert_count") or 1) <= 1:
        return ""
    steps = incident.get("steps") or []
    shown = ", ".join(str(s) for s in steps[:5]) + (", ..." if len(steps) > 5 else "")
    return (
        f" (incident {incident.get('id')}: {' -> '.join(incident.get('rules') or [])}, "
        f"{incident.get('alert_count')} alerts at steps {shown}; worst {incident.get('worst_value')} "
        f"at step {incident.get('worst_step')})"
    )


def _json_safe(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def action_text(alert: dict) -> str | None:
    """The action's paragraph (the checkpoint to go back to and the command), or None when the event has none."""
    action = alert.get("action")
    text = action.get("text") if isinstance(action, dict) else None
    return text if isinstance(text, str) and text else None


class ConsoleSink:
    """One line per alert event on a stream (the headless collector's console), and an indented second line
    with the action's text when the event has one."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stdout

    def send(self, alert: dict) -> None:
        action = action_text(alert)
        line = printable(alert_line(alert)) + "\n"
        self.stream.write(line + (f"    action: {printable(action)}\n" if action else ""))
        self.stream.flush()

    def close(self) -> None:
        self.stream.flush()


class JsonlSink:
    """Append-only JSON lines file; every event is one line, written and flushed before `send` returns. The
    file is opened (created) at the first event: a command that stops before writing one (a damaged
    database) leaves no empty log beside the database."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._file: IO[str] | None = None
        self._lock = threading.Lock()

    def send(self, alert: dict) -> None:
        line = json.dumps(_json_safe(alert), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        with self._lock:
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 -- held open across sends, closed in close()
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            if self._file is not None and not self._file.closed:
                self._file.close()


def slack_body(alert: dict) -> dict:
    """A Slack incoming-webhook body: `text` (the fallback line; with an action, a second line with its text)
    and one markdown section block per line; with an action also `action`, the object as the API gives it, and
    the event's `incident` as the API gives it."""
    lines = [alert_line(alert)]
    action = action_text(alert)
    if action:
        lines.append(f"Action: {action}")
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": line[:2900]}} for line in lines]
    body: dict = {"text": "\n".join(lines), "blocks": blocks}
    if isinstance(alert.get("action"), dict):
        body["action"] = alert["action"]
    if isinstance(alert.get("incident"), dict):
        body["incident"] = alert["incident"]
    return body


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
    """Writes the run's stop request (`RUN_DIR/runwatch.stop`, see `collector.core.stop_request`) when an alert
    matches the run's `[stop]` settings (off unless runwatch.toml names rules under `[stop] on`).

    It is told every change of an alert (not only openings): `after_points` is reached while an episode goes
    on. `run_dir_of(run)` and `settings_of(run)` give the run's folder (its file when it is one file by itself:
    nothing is written then) and its StopSettings;
    `on_stopped(alert, request)` records that the run was asked to stop (the alert's history)."""

    def __init__(
        self,
        run_dir_of: Callable[[str], Path | None],
        settings_of: Callable[[str], StopSettings],
        on_stopped: Callable[[dict, dict], None] | None = None,
    ) -> None:
        self.run_dir_of, self.settings_of, self.on_stopped = run_dir_of, settings_of, on_stopped

    def send(self, alert: dict) -> None:
        run = str(alert.get("run"))
        if not stops_run(self.settings_of(run), alert):
            return
        run_dir = self.run_dir_of(run)
        if run_dir is None or not Path(run_dir).is_dir():
            where = (
                f"it is the single file {run_dir}: there is no run folder to write {STOP_FILE} into"
                if run_dir is not None and Path(run_dir).is_file()
                else "its folder is unknown"
            )
            log.warning("run %s: the %s alert asks to stop it, but %s", run, alert.get("rule"), where)
            return
        request, wrote = write_stop_request(
            run_dir,
            alert_line(alert),
            by="rule",
            alert_id=alert.get("id"),
            rule=alert.get("rule"),
            step=alert.get("last_step"),
        )
        if wrote:
            log.warning("run %s: wrote %s: %s", run, stop_path(run_dir), request["reason"])
            if self.on_stopped is not None:
                self.on_stopped(alert, request)

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
