"""Runs overview: every run with its status, progress, latest losses (an RL run's reward and validation score
in their place, marked as `collector runs` marks them), open alerts and recommended checkpoint.

Built for a hundred runs and more: names shortened in the middle (where runs of one sweep differ at both ends),
sorted by what needs a look unless asked otherwise, filtered by status, severity and name; no cell says "None".
"""

from __future__ import annotations

from datetime import UTC, datetime

import pandas as pd
import streamlit as st

from app import ui
from app.name_hover import ROW_PX, full_names_on_hover
from collector.api.models import CLEARED_OPEN, RL_JUDGED, RunSummary
from collector.core.printable import middle

api = ui.api()
st.title("Runs")
runs = api.runs()
if not runs:
    lake = api.health().lake  # a team's API (`serve --store` without roots)
    if lake is not None and lake.error:
        st.error(f"This team API cannot read the team lake: {lake.error}")
    elif lake is not None and not lake.collectors:
        st.info(
            "No runs yet: no collector has published into this team lake. Their runs show here as soon as one "
            "does (each collector runs `serve --store ... --data-path ... --collector NAME ROOT`)."
        )
    elif lake is not None:
        st.info("No runs yet: the team lake's collectors have found none in their folders so far.")
    else:
        roots = ", ".join(str(r) for r in ui.settings().roots)
        st.info(
            f"No runs yet under {roots}. Start a trainer writing into one of these folders; it appears here."
        )
    st.stop()

# A longer run name is shortened in the middle to fit its column (NAME_WIDTH px).
NAME_CHARS = 60
NAME_WIDTH = 430
ROW_MARKERS_PX = 35  # the row-selection boxes left of the name column
BAR_CELLS = 10
# Status colors: done is green, going is blue, trouble is red or orange, anything else grey.
STATUS_COLORS = {
    "completed": "#2e7d32",
    "running": "#1565c0",
    "failed": "#c62828",
    "stalled": "#ef6c00",
    "unreachable": "#ef6c00",
    "stopped": "#6d4c41",
}
SEVERITY_COLORS = {"error": "#c62828", "warn": "#ef6c00", "info": "#1565c0"}
NONE = "—"
SORTS = {
    "Needs a look first": None,
    "Name": ("run", True),
    "Last update": ("_updated", False),
    "Progress": ("_progress", False),
    "Status": ("status", True),
}


def bar(fraction: float | None) -> str:
    if fraction is None:
        return NONE
    filled = round(fraction * BAR_CELLS)
    return "█" * filled + "░" * (BAR_CELLS - filled) + f" {fraction:4.0%}"


def number(value: float | None, digits: int = 4) -> str:
    if value is None or value != value:
        return NONE
    return f"{value:.{digits}g}"


def ago(when: datetime | None) -> str:
    if when is None:
        return NONE
    seconds = (datetime.now(UTC) - when).total_seconds()
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return "just now"


def _row(run: RunSummary) -> dict:
    alerts = run.open_alerts
    last, total = run.last_step, run.total_steps
    updated = ui.parse_time(run.updated_at or run.last_point_at)
    keep = run.recommended_step
    train_loss, val_loss = run.loss_cells(number)  # an RL run: `r:` its reward, `s:` its validation score
    return {
        "run": run.id,
        "status": run.status or "unknown",
        "progress": bar(run.progress),
        "step": (NONE if last is None else f"{last:,}") + (f" / {total:,}" if total else ""),
        "train loss": train_loss,
        "val loss": val_loss,
        "severity": alerts.worst or "none",
        "alerts": ui.alert_counts_text(alerts, none=NONE, cleared_open=run.cleared_open_incidents),
        "errors": alerts.error,
        "warnings": alerts.warn,
        "info": alerts.info,
        "keep step": NONE if keep is None else f"{keep:,}",
        "anomaly": run.anomaly_reason or "",
        "updated": ago(updated),
        "_updated": updated or datetime.min.replace(tzinfo=UTC),
        "_progress": run.progress or 0.0,
    }


table = pd.DataFrame([_row(r) for r in runs])
statuses = sorted(table["status"].unique())
severities = [s for s in (*ui.SEVERITIES, "none") if s in set(table["severity"])]

name_col, status_col, severity_col, sort_col = st.columns([3, 3, 2, 2])
name_filter = name_col.text_input("Filter runs by name", placeholder="part of a run id")
status_filter = status_col.multiselect("Status", statuses, default=statuses)
severity_filter = severity_col.multiselect(
    "Open alerts", severities, default=severities, help="The most severe open alert of the run"
)
sort_by = sort_col.selectbox("Sort by", list(SORTS))

shown = table[table["status"].isin(status_filter) & table["severity"].isin(severity_filter)]
if name_filter:
    shown = shown[shown["run"].str.contains(name_filter, case=False, regex=False)]
if SORTS[sort_by] is None:
    # what needs a look first: open errors, then warnings, then runs still running, then the most recently updated
    shown = (
        shown.assign(_running=shown["status"].eq("running"))
        .sort_values(["errors", "warnings", "_running", "_updated"], ascending=False, kind="stable")
        .drop(columns="_running")
    )
else:
    column, ascending = SORTS[sort_by]
    shown = shown.sort_values(column, ascending=ascending, kind="stable")
shown = shown.reset_index(drop=True)

counts = st.columns(4)
counts[0].metric("Runs", len(runs))
counts[1].metric("Running", int(table["status"].eq("running").sum()))
counts[2].metric("Open errors", int(table["errors"].sum()))
counts[3].metric("Open warnings", int(table["warnings"].sum()))


def _colors(frame: pd.DataFrame) -> pd.DataFrame:
    """Text colors: status and progress by the run's status, the severity by itself."""
    styles = pd.DataFrame("", index=frame.index, columns=frame.columns)
    by_status = frame["status"].map(lambda s: f"color: {STATUS_COLORS.get(s, '#616161')}")
    styles["status"] = by_status
    styles["progress"] = by_status
    styles["alerts"] = frame["severity"].map(lambda s: f"color: {SEVERITY_COLORS.get(s, '#9e9e9e')}")
    return styles


styled = shown.style.apply(_colors, axis=None).format({"run": lambda name: middle(name, NAME_CHARS)})
event = st.dataframe(
    styled,
    hide_index=True,
    width="stretch",
    # every run in view without scrolling the table (up to 25): 35 px a row plus the header
    height=min(len(shown), 25) * ROW_PX + 38,
    row_height=ROW_PX,
    on_select="rerun",
    selection_mode="single-row",
    key="runs_table",
    column_order=[
        "run",
        "status",
        "progress",
        "step",
        "train loss",
        "val loss",
        "alerts",
        "keep step",
        "anomaly",
        "updated",
    ],
    column_config={
        "run": st.column_config.TextColumn(
            "run",
            help="Run directory under its root (a long name is shortened in the middle: hover it for all of it)",
            width=NAME_WIDTH,
        ),
        "progress": st.column_config.TextColumn(
            "progress", help="Last step over planned steps; a completed run is done", width="small"
        ),
        "step": st.column_config.TextColumn("step", help="Last step / planned steps"),
        "train loss": st.column_config.TextColumn(
            "train loss", help=f"The latest training loss. {RL_JUDGED}"
        ),
        "val loss": st.column_config.TextColumn("val loss", help=f"The latest validation loss. {RL_JUDGED}"),
        "alerts": st.column_config.TextColumn(
            "open alerts",
            help=f"Open alerts by severity, then incidents cleared, still open. {CLEARED_OPEN}",
        ),
        "keep step": st.column_config.TextColumn("keep step", help="The recommended checkpoint's step"),
        "anomaly": st.column_config.TextColumn(
            "anomaly",
            help="The first error alert not resolved (the trainer's own status is kept)",
            width="medium",
        ),
        "updated": st.column_config.TextColumn("last update"),
    },
)
in_view = set(shown["run"])
if any(r.judged_by_score for r in runs if r.id in in_view):
    st.caption(RL_JUDGED)  # (the legend `collector runs` prints under its table)
st.caption(
    f"{len(shown)} of {len(runs)} runs shown. Hover a shortened name for all of it; click a row to open the "
    "run (its page is titled with the full name); the name filter matches any part of a full name."
)
# the full name of a shortened one, over its row (Streamlit's table shows no tooltip for a cell); mounted
# under the caption, where its empty element's gap is at the page's end
full_names_on_hover("runs_table", "run", ROW_MARKERS_PX + NAME_WIDTH, NAME_CHARS)
rows = event.selection.rows if event is not None else []
if rows:
    ui.open_run(shown.iloc[rows[0]]["run"])
