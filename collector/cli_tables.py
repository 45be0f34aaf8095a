"""How the CLI prints each command's answer for people (with `--json` it prints the API's JSON instead), from
the answer's type (`collector.api.models`): a field renamed in a model fails here, not as an empty column.

Every table fits the terminal's width (`$COLUMNS`, else the terminal's, else 100 when output is not a
terminal): names and paths are shortened from the middle (`my-exp/sf…7b/run-3`: both ends of a name tell runs
apart) and long text (an alert's message, why a file was not read) is wrapped under its row.
"""

from __future__ import annotations

import shutil
import textwrap
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from collector.core.printable import middle, printable

if TYPE_CHECKING:  # (pydantic is imported by the commands that print an answer, when they do)
    from collector.api.models import (
        Advice,
        AlertDetail,
        Incident,
        ProblemFile,
        RunDetail,
        RunSummary,
        Series,
        StopAnswer,
    )

ELLIPSIS = "…"
# The narrowest a shortened name gets: a few characters of each end stay readable.
MIN_NAME = 9
# What a row's name keeps while other columns can still give way (enough to tell runs apart by).
KEEP_NAME = 30
INDENT = "    "
# Columns never shortened: numbers, and step counts written as text ("33/3252", "100-200").
FIXED = {"steps", "alerts", "train_loss", "val_loss"}


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
    numbers are never shortened. The `under` field (a message, or a list of paragraphs) is wrapped on the
    lines below its row."""
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
            below = row[under] if isinstance(row[under], list) else [row[under]]  # (paragraphs)
            for text in below:
                lines += wrap(cell(text), limit, INDENT)
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


def cleared_open() -> str:
    """The sentence every surface says of an open incident whose alerts all cleared (`models.CLEARED_OPEN`),
    and where the CLI lists it."""
    from collector.api.models import CLEARED_OPEN  # (pydantic: loaded already, the answer was parsed)

    return f"{CLEARED_OPEN[:-1]} (`alerts` lists it)."


def runs_table(runs: list[RunSummary]) -> str:
    """One row per run; an RL run shows what it is judged by in the loss columns, its reward (`r:`) and its
    validation score (`s:`), where it logs them (`RunSummary.loss_cells`, as the dashboard's overview does);
    notes under the table say what the marks mean when used."""
    from collector.api.models import RL_JUDGED  # (pydantic: loaded already, `runs` are parsed answers)

    rows = [
        {
            "id": r.id,
            "status": r.status,
            "steps": cell(r.last_step) + (f"/{r.total_steps}" if r.total_steps else ""),
            **dict(zip(("train_loss", "val_loss"), r.loss_cells(cell), strict=True)),
            "alerts": " ".join(
                [f"{s}:{n}" for s, n in r.open_alerts.by_severity() if n]
                + ([f"cleared:{r.cleared_open_incidents}"] if r.cleared_open_incidents else [])
            ),
            "format": r.format,
        }
        for r in runs
    ]
    body = table(rows, ["id", "status", "steps", "train_loss", "val_loss", "alerts", "format"], keep="id")
    notes = [RL_JUDGED] if any(r.judged_by_score for r in runs) else []
    notes += [f"cleared: {cleared_open()}"] if any(r.cleared_open_incidents for r in runs) else []
    return "\n".join([body, *(line for note in notes for line in wrap(note))])


def run_lines(r: RunDetail) -> str:
    """One run's state in a line, then what became of its last stop request (`StopState.said`)."""
    steps = cell(r.last_step) + (f"/{r.total_steps}" if r.total_steps else "")
    parts = [f"{n} {s}" for s, n in r.open_alerts.by_severity() if n]
    if r.cleared_open_incidents:
        parts.append(f"{r.cleared_open_incidents} incident(s) cleared, still open")
    lines = wrap(f"run {r.id}: {r.status}, step {steps}, open alerts: {', '.join(parts) or 'none'}")
    if r.cleared_open_incidents:
        lines += wrap(cleared_open(), indent=INDENT)
    if r.anomaly_reason:
        lines += wrap(f"anomaly: {r.anomaly_reason}", indent=INDENT)
    said = r.stop.said(time.time()) if r.stop else "no stop asked"
    return "\n".join([*lines, *wrap(said, indent=INDENT)])


def incidents_table(incidents: list[Incident]) -> str:
    """One row per incident (its cause first, the troubles it explains, how many alerts it holds), its message
    under it; then the count of incidents and alerts."""
    rows = [
        {
            "id": i.id,
            "run": i.run,
            "rule": " -> ".join(i.rules),
            "severity": i.severity,
            "steps": steps(i.first_step, i.last_step),
            "alerts": i.alert_count,
            "state": i.state,
            # on a team's lake, what became of the last ack or resolve asked of the collector that owns the run
            "message": [i.message, i.change.said(time.time())] if i.change else i.message,
        }
        for i in incidents
    ]
    body = table(
        rows, ["id", "run", "rule", "severity", "steps", "alerts", "state"], under="message", keep="run"
    )
    total = sum(i.alert_count for i in incidents)
    said = f"{len(incidents)} incident(s) holding {total} alert(s) (every alert: --json)"
    return "\n".join([body, *wrap(said)])


def metrics_table(series: Series) -> str:
    head = f"{series.run} {series.metric}: {series.total_points} points"
    head += f", {len(series.steps)} buckets (min/max per bucket)" if series.downsampled else ""
    rows: list[dict] = [{"step": s, "value": v} for s, v in zip(series.steps, series.values, strict=True)]
    if series.downsampled:
        for row, mn, mx in zip(rows, series.min or [], series.max or [], strict=True):
            row |= {"min": mn, "max": mx}
    return "\n".join([*wrap(head), table(rows, list(rows[0]) if rows else ["step", "value"])])


def checkpoints_table(advice: Advice) -> str:
    rec = advice.recommended
    head = (
        [
            *wrap(f"keep step {rec.step}: {rec.path or '(no checkpoint seen)'}"),
            *wrap(rec.reason, indent="  "),
        ]
        if rec
        else ["no checkpoint to recommend"]
    )
    rows = [
        {"step": c.step, "complete": c.complete, "bytes": c.bytes, "value": c.value, "path": c.path}
        for c in advice.checkpoints
    ]
    body = table(rows, ["step", "complete", "bytes", "value", "path"])
    deletable = ", ".join(str(step) for step in advice.deletable) or "none"
    kept = [  # the recommended one is said above; the others say why they stay (an action resumes from it)
        line
        for k in advice.kept
        if not rec or k.step != rec.step
        for line in wrap(f"kept step {k.step}: {k.why}")
    ]
    return "\n".join([*head, body, *wrap(f"deletable steps: {deletable}"), *kept])


def files_table(files: list[ProblemFile]) -> str:
    rows = [{"run": f.run, "problem": f.problem, "path": f.path, "reason": f.reason} for f in files]
    return table(rows, ["run", "problem", "path"], under="reason", keep="path")


def alert_line(a: AlertDetail) -> str:
    state = a.state
    if asked := getattr(a, "state_requested", None):  # a team reader: the owning collector applies it later
        state += (
            f"; {asked} is asked of the collector that owns the run and shown once it has applied it (or why"
            " not: collector incidents --run RUN)"
        )
    return "\n".join(wrap(f"alert {a.id} [{a.severity}] {a.rule} ({state}): {a.message}"))


def stop_line(r: StopAnswer) -> str:
    said = f"{'asked' if r.written else 'already asked'} to stop: {r.path}"
    if getattr(r.request, "through", None):  # a team reader: the owner writes the file, on its machine
        said = f"asked to stop through the team lake: the collector that owns the run writes {r.path}"
        # (at its next batch, or refuses it, saying why: a person learns which from `run`)
        said += f" ({r.request.reason}); what became of it: collector run {r.run}"
        return "\n".join(wrap(f"run {r.run}: {said}"))
    return "\n".join(wrap(f"run {r.run}: {said} ({r.request.reason})"))


TABLES: dict[str, Callable[[Any], str]] = {
    "runs": runs_table,
    "run": run_lines,
    "metrics": metrics_table,
    "alerts": incidents_table,  # people read incidents; `alerts --json` lists every alert
    "incidents": incidents_table,
    "ack": alert_line,
    "resolve": alert_line,
    "checkpoints": checkpoints_table,
    "files": files_table,
    "stop": stop_line,
}
