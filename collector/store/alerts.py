"""Alerts (episodes with a state a person changes) and the checkpoint index, in the store.

An alert episode's identity is (run, rule, metric, first_step): a detector's later events for it update the
same row. States: `open` -> `acked` (a person saw it) -> `resolved` (by a person with a note, or by the
detector when the condition cleared). Every change is kept in `alert_history`.
"""

from __future__ import annotations

import json
import time
from typing import Any

from collector.store.db import Store

STATES = ("open", "acked", "resolved")
ALERT_COLUMNS = """a.id, a.run_id AS run, a.rule, a.severity, a.metric, a.first_step, a.last_step, a.state,
    a.message, a.value, a.note, a.active, a.evidence, a.created_at, a.updated_at"""


class AlertNotFound(LookupError):
    """No alert with that id."""


def upsert_events(store: Store, run: str, events: list[Any]) -> list[dict]:
    """Store detector events (AlertEvent-like: rule, severity, metric, first_step, last_step, value, message,
    active, evidence); returns the alerts whose row was created or changed, with `event` set to
    "opened", "updated", "escalated" or "auto_resolved"."""
    changed: list[dict] = []
    if not events:
        return changed
    now = time.time()
    with store.transaction() as cur:
        for ev in events:
            metric = ev.metric or ""
            evidence = json.dumps(ev.evidence or {}, default=str)
            row = cur.execute(
                """SELECT id, state, severity, last_step, value, message, evidence, active FROM alerts
                   WHERE run_id = ? AND rule = ? AND metric = ? AND first_step = ?""",
                [run, ev.rule, metric, ev.first_step],
            ).fetchall()
            if not row:
                # An episode can open and clear within one batch (a lone NaN in a backfill): still a fact
                # about the run, stored as resolved by the detector.
                state = "open" if ev.active else "resolved"
                alert_id = cur.execute(
                    """INSERT INTO alerts (run_id, rule, severity, metric, first_step, last_step, value, message,
                       evidence, state, active, note, created_at, updated_at)
                       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id""",
                    [
                        run,
                        ev.rule,
                        ev.severity,
                        metric,
                        ev.first_step,
                        ev.last_step,
                        ev.value,
                        ev.message,
                        evidence,
                        state,
                        ev.active,
                        None if ev.active else "the condition cleared",
                        now,
                        now,
                    ],
                ).fetchall()[0][0]
                cur.execute(
                    "INSERT INTO alert_history VALUES (?, ?, 'opened', 'open', NULL)", [alert_id, now]
                )
                kind = "opened"
                if not ev.active:
                    cur.execute(
                        "INSERT INTO alert_history VALUES (?, ?, 'auto_resolved', 'resolved', 'the condition cleared')",
                        [alert_id, now],
                    )
                changed.append({"id": alert_id, "event": kind})
                continue
            alert_id, state, severity, *stored = row[0]
            if (
                _same(stored, [ev.last_step, ev.value, ev.message, evidence, ev.active])
                and severity == ev.severity
            ):
                continue  # the episode as stored (judged again after a restart): nothing changed, nothing to tell
            kind = "escalated" if ev.severity != severity and ev.severity == "error" else "updated"
            if not ev.active and state != "resolved":
                kind, state = "auto_resolved", "resolved"
            cur.execute(
                """UPDATE alerts SET severity = ?, last_step = ?, value = ?, message = ?, evidence = ?,
                   active = ?, state = ?, updated_at = ? WHERE id = ?""",
                [
                    ev.severity,
                    ev.last_step,
                    ev.value,
                    ev.message,
                    evidence,
                    ev.active,
                    state,
                    now,
                    alert_id,
                ],
            )
            if kind != "updated":
                note = "the condition cleared" if kind == "auto_resolved" else None
                cur.execute(
                    "INSERT INTO alert_history VALUES (?, ?, ?, ?, ?)", [alert_id, now, kind, state, note]
                )
            changed.append({"id": alert_id, "event": kind})
    if changed:
        store.alerts_changed(run)
    return changed


def _same(stored: list, new: list) -> bool:
    # NaN equals NaN here: a NaN episode's value judged again is the same value
    return all(a == b or (isinstance(a, float) and isinstance(b, float) and a != a and b != b)
               for a, b in zip(stored, new, strict=True))  # fmt: skip


def list_alerts(
    store: Store,
    run: str | None = None,
    rule: str | None = None,
    severity: str | None = None,
    state: str = "all",
    ids: list[int] | None = None,
    runs: list[str] | None = None,
) -> list[dict]:
    """Alerts matching the filters (`runs`: of one of these runs), newest first."""
    clauses, params = [], []
    if runs is not None:
        clauses.append("a.run_id IN (SELECT unnest(?::VARCHAR[]))")  # (one list parameter, as store_read's)
        params.append(list(runs))
    for column, value in (("a.run_id", run), ("a.rule", rule), ("a.severity", severity)):
        if value:
            clauses.append(f"{column} = ?")
            params.append(value)
    if state != "all":
        clauses.append("a.state = ?")
        params.append(state)
    if ids:
        clauses.append(f"a.id IN ({', '.join('?' for _ in ids)})")
        params.extend(ids)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    rows = store.dicts(
        f"SELECT {ALERT_COLUMNS} FROM alerts a {where} ORDER BY a.updated_at DESC, a.id DESC", params
    )
    for r in rows:
        r["evidence"] = json.loads(r["evidence"]) if r["evidence"] else {}
    return rows


def get_alert(store: Store, alert_id: int) -> dict:
    """One alert with its history; raises AlertNotFound."""
    found = list_alerts(store, ids=[alert_id])
    if not found:
        raise AlertNotFound(f"no alert with id {alert_id}")
    alert = found[0]
    alert["history"] = store.dicts(
        "SELECT created_at AS at, event, state, note FROM alert_history WHERE alert_id = ? ORDER BY created_at",
        [alert_id],
    )
    return alert


def set_state(store: Store, alert_id: int, state: str, note: str | None) -> dict:
    """Acknowledge or resolve an alert (with an optional note); returns it. Raises AlertNotFound."""
    if state not in ("acked", "resolved"):
        raise ValueError(f"an alert can be set to acked or resolved, not {state!r}")
    now = time.time()
    with store.transaction() as cur:
        if not cur.execute("SELECT id FROM alerts WHERE id = ?", [alert_id]).fetchall():
            raise AlertNotFound(f"no alert with id {alert_id}")
        cur.execute(
            "UPDATE alerts SET state = ?, note = coalesce(?, note), updated_at = ? WHERE id = ?",
            [state, note, now, alert_id],
        )
        event = "acked" if state == "acked" else "resolved"
        cur.execute("INSERT INTO alert_history VALUES (?, ?, ?, ?, ?)", [alert_id, now, event, state, note])
    alert = get_alert(store, alert_id)
    store.alerts_changed(alert["run"])
    return alert


def rule_stop(store: Store, run_id: str) -> dict | None:
    """The first stop request a `[stop]` rule wrote for the run (its alert's `stop_requested` history entry):
    `asked_at`, `alert_id`, `rule`; None when none did."""
    found = store.dicts(
        """SELECT h.created_at AS asked_at, a.id AS alert_id, a.rule FROM alert_history h
           JOIN alerts a ON a.id = h.alert_id
           WHERE a.run_id = ? AND h.event = 'stop_requested' ORDER BY h.created_at LIMIT 1""",
        [run_id],
    )
    return found[0] if found else None


def note_stop_requested(store: Store, alert_id: int, note: str) -> None:
    """Record on the alert that it asked its run to stop (history event `stop_requested`; the alert's note
    when it has none). Its state is left as it is."""
    with store.transaction() as cur:
        cur.execute(
            "INSERT INTO alert_history SELECT id, ?, 'stop_requested', state, ? FROM alerts WHERE id = ?",
            [time.time(), note, alert_id],
        )
        cur.execute("UPDATE alerts SET note = coalesce(note, ?) WHERE id = ?", [note, alert_id])
        run = cur.execute("SELECT run_id FROM alerts WHERE id = ?", [alert_id]).fetchall()
    if run:
        store.alerts_changed(run[0][0])


def replace_checkpoints(store: Store, run: str, checkpoints: list[dict]) -> None:
    """The run's checkpoint index as scanned now (each: step, path, complete, bytes, plus anything else)."""
    with store.transaction() as cur:
        cur.execute("DELETE FROM checkpoints WHERE run_id = ?", [run])
        if checkpoints:
            cur.executemany(
                "INSERT INTO checkpoints VALUES (?, ?, ?, ?, ?, ?)",
                [
                    [
                        run,
                        c["step"],
                        str(c["path"]),
                        bool(c.get("complete")),
                        int(c.get("bytes") or 0),
                        json.dumps(c, default=str),
                    ]
                    for c in checkpoints
                ],
            )


def checkpoints(store: Store, run: str) -> list[dict]:
    """The run's stored checkpoint index, by step."""
    rows = store.rows("SELECT info FROM checkpoints WHERE run_id = ? ORDER BY step", [run])
    return [json.loads(r[0]) for r in rows]
