"""Compare runs: chosen metrics of several runs overlaid by step, and the difference of their configs."""

from __future__ import annotations

import streamlit as st

from app import ui
from app.charts import metric_figure
from app.panels import metric_names, metrics_by_role
from app.series import from_api

ROLE_PREFIX = "role:"

api = ui.api()
st.title("Compare runs")
run_ids = [r.id for r in api.runs()]
if len(run_ids) < 2:
    st.info("Comparing needs at least two runs.")
    st.stop()

# `/compare?runs=a,b,c` opens those runs (an address to share); else the sidebar's run and the next one
asked = [r for r in (st.query_params.get("runs") or "").split(",") if r in run_ids]
default_runs = asked or [r for r in [ui.selected_run()] if r] or run_ids[:1]
default_runs += [r for r in run_ids if r not in default_runs][: max(0, 2 - len(default_runs))]
chosen = st.multiselect("Runs", run_ids, default=default_runs, key="compare_runs")
if len(chosen) < 2:
    st.info("Choose at least two runs.")
    st.stop()

details = {run: api.run(run) for run in chosen}
per_run = {run: set(metric_names(d.metrics)) for run, d in details.items()}
# Runs from different trainers name the same quantity differently (`loss`, `train/loss`): offer roles too.
roles_per_run = {run: metrics_by_role(d.metrics) for run, d in details.items()}
shared_roles = sorted(set.intersection(*(set(r) for r in roles_per_run.values())))
everywhere = sorted(set.union(*per_run.values()))
options = [ROLE_PREFIX + r for r in shared_roles] + everywhere
preferred = [ROLE_PREFIX + r for r in ("loss", "val_loss") if r in shared_roles]
metrics = st.multiselect(
    "Metrics",
    options,
    default=preferred or options[:1],
    format_func=lambda m: (
        f"{m.removeprefix(ROLE_PREFIX)} (each run's own)" if m.startswith(ROLE_PREFIX) else m
    ),
    help="A role (loss, val_loss, grad_norm...) picks each run's metric in that role; a name picks that metric",
    key="compare_metrics",
)
smoothing = st.slider("Smoothing", 0.0, 0.99, 0.0, 0.01, key="compare_smoothing")
log_y = st.toggle("Log scale", key="compare_log")


def run_metrics(run: str, choice: str) -> list[str]:
    if choice.startswith(ROLE_PREFIX):
        return roles_per_run[run].get(choice.removeprefix(ROLE_PREFIX), [])[:1]
    return [choice] if choice in per_run[run] else []


for choice in metrics:
    series, missing = [], []
    for run in chosen:
        names = run_metrics(run, choice)
        if not names:
            missing.append(run)
        for s in api.metrics(run, names) if names else []:
            label = run if not choice.startswith(ROLE_PREFIX) else f"{run} ({s.metric})"
            series.append({**from_api(s), "label": label})
    title = choice.removeprefix(ROLE_PREFIX)
    st.plotly_chart(
        metric_figure(series, title=title, smoothing=smoothing, log_y=log_y, legend_below=True),
        key=f"compare-{choice}",
    )
    if missing:
        st.caption(f"{title} is not logged by: {', '.join(missing)}")


def _shown(value) -> str:
    """A config value as text; a run without the key shows a dash, never "None"."""
    return "—" if value is None else str(value)


st.subheader("Config values that differ")
diff = api.compare(chosen).config_diff
st.caption(
    f"Each run's config as its files record it, merged ({ui.CONFIG_SOURCES}); keys with the same value in "
    "every run are left out."
)
if diff:
    st.dataframe(
        [{"key": d.key, **{run: _shown(d.values.get(run)) for run in chosen}} for d in diff],
        hide_index=True,
        width="stretch",
    )
else:
    st.caption("No differences in the configs the runs recorded (or they recorded none).")
