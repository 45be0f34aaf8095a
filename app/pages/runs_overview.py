"""Runs overview: every run with its status, progress, latest losses, open alerts and recommended checkpoint."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import ui

api = ui.api()
st.title("Runs")
runs = api.runs()
if not runs:
    roots = ", ".join(str(r) for r in ui.settings().roots)
    st.info(f"No runs yet under {roots}. Start a trainer writing into one of these folders; it appears here.")
    st.stop()


def _row(run: dict) -> dict:
    alerts = run.get("open_alerts") or {}
    last, total = run.get("last_step"), run.get("total_steps")
    return {
        "run": run["id"],
        "status": run.get("status") or "unknown",
        "progress": (last / total) if last is not None and total else None,
        "step": last,
        "total steps": total,
        "train loss": run.get("train_loss"),
        "val loss": run.get("val_loss"),
        "errors": alerts.get("error", 0),
        "warnings": alerts.get("warn", 0),
        "info": alerts.get("info", 0),
        "recommended checkpoint": run.get("recommended_step"),
        "anomaly": run.get("anomaly_reason") or "",
        "updated": ui.parse_time(run.get("updated_at") or run.get("last_point_at")),
        "format": run.get("format"),
    }


table = pd.DataFrame([_row(r) for r in runs])
statuses = sorted({r.get("status") or "unknown" for r in runs})

left, middle, right = st.columns([2, 2, 1])
name_filter = left.text_input("Filter runs by name", placeholder="part of a run id")
status_filter = middle.multiselect("Status", statuses, default=statuses)
only_alerts = right.toggle("Only runs with open alerts")

shown = table[table["status"].isin(status_filter)]
if name_filter:
    shown = shown[shown["run"].str.contains(name_filter, case=False, regex=False)]
if only_alerts:
    shown = shown[(shown["errors"] + shown["warnings"] + shown["info"]) > 0]
# what needs a look first: open errors, then warnings, then runs still running, then the most recently updated
shown = (
    shown.assign(running=shown["status"].eq("running"))
    .sort_values(
        ["errors", "warnings", "running", "updated"], ascending=False, na_position="last", kind="stable"
    )
    .drop(columns="running")
)

counts = st.columns(4)
counts[0].metric("Runs", len(runs))
counts[1].metric("Running", sum(r.get("status") == "running" for r in runs))
counts[2].metric("Open errors", int(table["errors"].sum()))
counts[3].metric("Open warnings", int(table["warnings"].sum()))

event = st.dataframe(
    shown,
    hide_index=True,
    width="stretch",
    # every run in view without scrolling the table (up to 25): 35 px a row plus the header
    height=min(len(shown), 25) * 35 + 38,
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
        "errors",
        "warnings",
        "info",
        "recommended checkpoint",
        "anomaly",
        "updated",
    ],
    column_config={
        "run": st.column_config.TextColumn("run", help="Run directory under its root", width="medium"),
        "progress": st.column_config.ProgressColumn(
            "progress", min_value=0.0, max_value=1.0, format="percent", width="small"
        ),
        "step": st.column_config.NumberColumn("step", format="%d"),
        "train loss": st.column_config.NumberColumn("train loss", format="%.4f"),
        "val loss": st.column_config.NumberColumn("val loss", format="%.4f"),
        "errors": st.column_config.NumberColumn(
            "errors", help="Open alerts of severity error", width="small"
        ),
        "warnings": st.column_config.NumberColumn(
            "warns", help="Open alerts of severity warn", width="small"
        ),
        "info": st.column_config.NumberColumn("info", help="Open alerts of severity info", width="small"),
        "recommended checkpoint": st.column_config.NumberColumn(
            "keep step", format="%d", help="The recommended checkpoint's step"
        ),
        "anomaly": st.column_config.TextColumn(
            "anomaly",
            help="The first error alert not resolved (the trainer's own status is kept)",
            width="medium",
        ),
        "updated": st.column_config.DatetimeColumn("last update", format="distance"),
    },
)
st.caption(
    "Runs with open errors first, then warnings, then running ones, then the most recently updated. "
    "Click a row to open the run; click a column header to sort."
)
rows = event.selection.rows if event is not None else []
if rows:
    ui.open_run(shown.iloc[rows[0]]["run"])
