"""How the CLI prints each command's answer for people (with `--json` it prints the API's JSON instead)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def table(rows: list[dict], columns: list[str]) -> str:
    """`rows` as aligned text columns (`(none)` for no row)."""
    if not rows:
        return "(none)"
    text = [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(t[i]) for t in text)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(t.ljust(w) for t, w in zip(row, widths, strict=True)) for row in text]
    return "\n".join(lines)


def cell(value: Any) -> str:
    """One value as a table shows it."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict):
        return " ".join(f"{k}:{v}" for k, v in value.items() if v)
    return str(value)


def metrics_table(series: dict) -> str:
    head = f"{series['run']} {series['metric']}: {series['total_points']} points"
    head += f", {len(series['steps'])} buckets (min/max per bucket)" if series["downsampled"] else ""
    rows = [{"step": s, "value": v} for s, v in zip(series["steps"], series["values"], strict=True)]
    if series["downsampled"]:
        for row, mn, mx in zip(rows, series["min"], series["max"], strict=True):
            row |= {"min": mn, "max": mx}
    return head + "\n" + table(rows, list(rows[0]) if rows else ["step", "value"])


def checkpoints_table(advice: dict) -> str:
    rec = advice.get("recommended")
    head = (
        f"keep step {rec['step']}: {rec['path'] or '(no checkpoint seen)'}\n  {rec['reason']}"
        if rec
        else "no checkpoint to recommend"
    )
    body = table(advice.get("checkpoints", []), ["step", "complete", "bytes", "value", "path"])
    return f"{head}\n{body}\ndeletable: {advice.get('deletable') or 'none'}"


def alert_line(a: dict) -> str:
    return f"alert {a['id']} [{a['severity']}] {a['rule']} ({a['state']}): {a['message']}"


TABLES: dict[str, Callable[[Any], str]] = {
    "runs": lambda rows: table(
        rows, ["id", "format", "status", "last_step", "total_steps", "train_loss", "val_loss", "open_alerts"]
    ),
    "metrics": metrics_table,
    "alerts": lambda rows: table(
        rows, ["id", "run", "rule", "severity", "first_step", "last_step", "state", "message"]
    ),
    "ack": alert_line,
    "resolve": alert_line,
    "checkpoints": checkpoints_table,
    "files": lambda rows: table(rows, ["run", "problem", "path", "reason"]),
    "stop": lambda r: (
        f"run {r['run']}: {'asked to stop' if r['written'] else 'already asked to stop'}: {r['path']} "
        f"({r['request']['reason']})"
    ),
}
