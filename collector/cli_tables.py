"""How the CLI prints each command's answer for people (with `--json` it prints the API's JSON instead).

Every table fits the terminal's width (`$COLUMNS`, else the terminal's, else 100 when output is not a
terminal): names and paths are shortened from the middle (`my-exp/sf…7b/run-3`: both ends of a name tell runs
apart) and long text (an alert's message, why a file was not read) is wrapped under its row.
"""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Callable
from typing import Any

from collector.core.printable import middle, printable

ELLIPSIS = "…"
# The narrowest a shortened name gets: a few characters of each end stay readable.
MIN_NAME = 9
# What a row's name keeps while other columns can still give way (enough to tell runs apart by).
KEEP_NAME = 30
INDENT = "    "
# Columns never shortened: numbers, and step counts written as text ("33/3252", "100-200").
FIXED = {"steps", "alerts"}


def width() -> int:
    """The columns to fit: `$COLUMNS`, else the terminal's width, else 100 (output to a file or a pipe)."""
    return max(40, shutil.get_terminal_size((100, 24)).columns)


def wrap(text: str, columns: int | None = None, indent: str = "") -> list[str]:
    """`text` wrapped into lines of at most `columns` (the terminal's width), each starting with `indent`;
    its own line breaks kept."""
    columns = columns or width()
    lines = []
    for paragraph in printable(text, newlines=True).splitlines() or [""]:
        lines += textwrap.wrap(
            paragraph,
            width=columns,
            initial_indent=indent,
            subsequent_indent=indent,
            break_long_words=True,
            break_on_hyphens=False,
        ) or [indent.rstrip()]
    return lines


def table(
    rows: list[dict],
    columns: list[str],
    under: str | None = None,
    keep: str | None = None,
    columns_width: int | None = None,
) -> str:
    """`rows` as aligned text columns that fit `columns_width` (the terminal's width); `(none)` for no row.

    Columns of text (names, paths) are shortened from the middle, widest first, until a row fits; the `keep`
    column (the name people tell rows apart by) keeps KEEP_NAME characters while others can give way;
    numbers are never shortened. The `under` field (a message) is wrapped on the lines below its row."""
    if not rows:
        return "(none)"
    limit = columns_width or width()
    text = [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(t[i]) for t in text)) for i, c in enumerate(columns)]
    numeric = [c in FIXED or all(_is_number(r.get(c)) for r in rows) for c in columns]
    floors = [
        w if num else min(w, max(MIN_NAME, len(c)))
        for w, num, c in zip(widths, numeric, columns, strict=True)
    ]
    excess = sum(widths) + 2 * (len(widths) - 1) - limit
    if keep in columns:
        kept = columns.index(keep)
        lowered = floors[kept]
        floors[kept] = max(floors[kept], min(widths[kept], KEEP_NAME))
        excess = _narrow(widths, floors, excess)
        floors[kept] = lowered
    _narrow(widths, floors, excess)
    lines = [_line(columns, widths, limit)]
    for row, cells in zip(rows, text, strict=True):
        lines.append(_line(cells, widths, limit))
        if under and row.get(under) not in (None, ""):
            lines += wrap(cell(row.get(under)), limit, INDENT)
    return "\n".join(lines)


def _narrow(widths: list[int], floors: list[int], excess: int) -> int:
    """Take `excess` characters off the widest columns above their floors; returns what is left to take."""
    while excess > 0:
        candidates = [i for i, w in enumerate(widths) if w > floors[i]]
        if not candidates:
            break
        widest = max(candidates, key=lambda i: widths[i])
        widths[widest] -= 1
        excess -= 1
    return excess


def _line(cells: list[str], widths: list[int], limit: int) -> str:
    line = "  ".join(middle(c, w).ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()
    # Only numbers too wide for a very narrow terminal are left: cut, said by the ellipsis.
    return line if len(line) <= limit else line[: limit - 1] + ELLIPSIS


def _is_number(value: Any) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def cell(value: Any) -> str:
    """One value as a table shows it (text escaped: see `printable`)."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict):
        return printable(" ".join(f"{k}:{v}" for k, v in value.items() if v))
    return printable(value)


def steps(first: Any, last: Any) -> str:
    """A step range as `first-last` (one step once)."""
    if first is None and last is None:
        return "-"
    return cell(first) if first == last else f"{cell(first)}-{cell(last)}"


def runs_table(rows: list[dict]) -> str:
    shown = [
        r
        | {
            "steps": cell(r.get("last_step")) + (f"/{r['total_steps']}" if r.get("total_steps") else ""),
            "alerts": r.get("open_alerts"),
        }
        for r in rows
    ]
    return table(shown, ["id", "status", "steps", "train_loss", "val_loss", "alerts", "format"], keep="id")


def incidents_table(rows: list[dict]) -> str:
    """One row per incident (its cause first, the troubles it explains, how many alerts it holds), its message
    under it; then the count of incidents and alerts."""
    shown = [
        i
        | {
            "rule": " -> ".join(i["rules"]),
            "steps": steps(i["first_step"], i["last_step"]),
            "alerts": i["alert_count"],
        }
        for i in rows
    ]
    body = table(
        shown, ["id", "run", "rule", "severity", "steps", "alerts", "state"], under="message", keep="run"
    )
    total = sum(i["alert_count"] for i in rows)
    return "\n".join([body, *wrap(f"{len(rows)} incident(s) holding {total} alert(s) (every alert: --json)")])


def metrics_table(series: dict) -> str:
    head = f"{series['run']} {series['metric']}: {series['total_points']} points"
    head += f", {len(series['steps'])} buckets (min/max per bucket)" if series["downsampled"] else ""
    rows = [{"step": s, "value": v} for s, v in zip(series["steps"], series["values"], strict=True)]
    if series["downsampled"]:
        for row, mn, mx in zip(rows, series["min"], series["max"], strict=True):
            row |= {"min": mn, "max": mx}
    return "\n".join([*wrap(head), table(rows, list(rows[0]) if rows else ["step", "value"])])


def checkpoints_table(advice: dict) -> str:
    rec = advice.get("recommended")
    head = (
        [
            *wrap(f"keep step {rec['step']}: {rec['path'] or '(no checkpoint seen)'}"),
            *wrap(rec["reason"], indent="  "),
        ]
        if rec
        else ["no checkpoint to recommend"]
    )
    body = table(advice.get("checkpoints", []), ["step", "complete", "bytes", "value", "path"])
    return "\n".join([*head, body, *wrap(f"deletable: {advice.get('deletable') or 'none'}")])


def alert_line(a: dict) -> str:
    return "\n".join(wrap(f"alert {a['id']} [{a['severity']}] {a['rule']} ({a['state']}): {a['message']}"))


def stop_line(r: dict) -> str:
    said = "asked to stop" if r["written"] else "already asked to stop"
    return "\n".join(wrap(f"run {r['run']}: {said}: {r['path']} ({r['request']['reason']})"))


TABLES: dict[str, Callable[[Any], str]] = {
    "runs": runs_table,
    "metrics": metrics_table,
    "alerts": incidents_table,  # people read incidents; `alerts --json` lists every alert
    "incidents": incidents_table,
    "ack": alert_line,
    "resolve": alert_line,
    "checkpoints": checkpoints_table,
    "files": lambda rows: table(rows, ["run", "problem", "path"], under="reason", keep="path"),
    "stop": stop_line,
}
