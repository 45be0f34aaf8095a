"""Compare runs: chosen metrics of several runs overlaid by step, and the difference of their configs."""

from __future__ import annotations

import streamlit as st

from app import ui
from app.charts import metric_figure
from app.panels import metric_names
from app.series import from_api

api = ui.api()
st.title("Compare runs")
run_ids = [r["id"] for r in api.runs()]
if len(run_ids) < 2:
    st.info("Comparing needs at least two runs.")
    st.stop()

default_runs = [r for r in [ui.selected_run()] if r] or run_ids[:1]
default_runs += [r for r in run_ids if r not in default_runs][: 2 - len(default_runs)]
chosen = st.multiselect("Runs", run_ids, default=default_runs, key="compare_runs")
if len(chosen) < 2:
    st.info("Choose at least two runs.")
    st.stop()

details = {run: api.run(run) for run in chosen}
per_run = {run: set(metric_names(d.get("metrics"))) for run, d in details.items()}
common = sorted(set.intersection(*per_run.values()))
everywhere = sorted(set.union(*per_run.values()))
preferred = [m for m in ("train/loss", "loss", "val/loss", "eval_loss") if m in common]
metrics = st.multiselect(
    "Metrics", everywhere, default=preferred or common[:1], help="Metrics logged by any of the chosen runs"
)
smoothing = st.slider("Smoothing", 0.0, 0.99, 0.0, 0.01, key="compare_smoothing")
log_y = st.toggle("Log scale", key="compare_log")

for metric in metrics:
    series = []
    for run in chosen:
        if metric not in per_run[run]:
            continue
        for s in api.metrics(run, [metric]):
            series.append({**from_api(s), "label": run})
    st.plotly_chart(
        metric_figure(series, title=metric, smoothing=smoothing, log_y=log_y), key=f"compare-{metric}"
    )
    missing = [run for run in chosen if metric not in per_run[run]]
    if missing:
        st.caption(f"{metric} is not logged by: {', '.join(missing)}")

st.subheader("Config differences (run.json)")
diff = api.compare(chosen).get("config_diff") or []
if diff:
    st.dataframe(
        [{"key": d["key"], **{run: str(d["values"].get(run, "–")) for run in chosen}} for d in diff],
        hide_index=True,
        width="stretch",
    )
else:
    st.caption("No differences in the configs the runs recorded (or they recorded none).")
