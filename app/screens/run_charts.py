"""Run page: loss, learning rate, grad norm, step time, RL panels and every other metric, with alert episodes.

The first view comes from one request (`GET .../view`: the run, every metric's buckets, alerts, checkpoint
steps). Only the charts refresh while a run is live (a fragment), and each refresh fetches only the new
points. Zooming a chart fetches finer buckets for the visible steps (app/zoom.py).
"""

from __future__ import annotations

import streamlit as st

from app import ui, zoom
from app.charts import alerts_for, epoch_figure, metric_figure
from app.live import forget, load_series, window_series
from app.panels import HEADLINES, Panel, metric_names, metrics_by_role, role_panels
from app.playback import playback_control
from app.series import group_metrics, scaled
from app.stop import stop_section
from collector.api.models import CLEARED_OPEN, Alert, RunDetail

api = ui.api()
run = ui.require_run()

# One request for everything the page shows first; the series only when this session holds none yet.
# The first view without series: the page fetches the series of what it draws (the role panels and the
# open groups), not every metric's.
detail = api.view(run, series=False)  # a `RunView` (collector.api.models)
st.title(run)
status = detail.status or "unknown"
last, total = detail.last_step, detail.total_steps
kind = detail.kind or "sft"
# what the API says of each metric: its role, last value, scale (`lr(1e-3)`), shape (constant, a twin)
facts = {m.metric: m for m in detail.metrics}
top = st.columns(4)
top[0].metric("Status", status)
top[1].metric("Step", f"{last:,} / {total:,}" if last is not None and total else f"{last or 0:,}")
cleared = detail.cleared_open_incidents
top[2].metric(
    "Open alerts",
    ui.alert_counts_text(detail.open_alerts, cleared_open=cleared),
    help=f"{CLEARED_OPEN} The Alerts page lists it as open." if cleared else None,
)
rec = detail.recommended_step
top[3].metric("Recommended checkpoint", f"step {rec:,}" if rec is not None else "none yet")
# What this kind of run is judged by, each the last value of its first metric in that role (the API says
# the run's kind and each metric's role and last value).
all_roles = metrics_by_role(detail.metrics)
headlines = HEADLINES.get(kind, HEADLINES["sft"])
for tile, (label, role) in zip(st.columns(len(headlines)), headlines, strict=True):
    metric = next(iter(all_roles.get(role, [])), None)
    value = facts[metric].last_value if metric in facts else None
    tile.metric(label, ui.fmt_number(value), help=f"`{metric}`, last value" if metric else "not logged")
if last is not None and total:
    st.progress(min(last / total, 1.0), text=f"{last / total:.0%} of {total:,} steps")
if detail.anomaly_detected:
    st.error(f"Anomaly: {detail.anomaly_reason}", icon=":material/warning:")
stop_reason = (detail.status_info or {}).get("stop_reason")
if status == "stopped" and stop_reason:
    st.info(f"Stopped on request: {stop_reason}", icon=":material/stop_circle:")
stop_section(
    api,
    run,
    detail.stop,
    offered=status in ("running", "stalled"),
    read_only=ui.read_only_why(),
    team=bool(ui.connection().info.get("lake")),
    refresh_s=ui.settings().refresh_s,
)


def files_of_run(detail: RunDetail) -> None:
    """Every file of the run: those read (with their counts and any warning) and those not read, with why."""
    sources, skipped = detail.sources, detail.skipped_files
    for f in detail.failing_files:
        st.error(
            f"`{f.path}` could not be read ({f.reason}); nothing of it was stored. "
            f"Failed {f.attempts} time(s) in a row since {ui.fmt_time(f.since)}; "
            f"the collector tries again at {ui.fmt_time(f.next_try_at)}.",
            icon=":material/error:",
        )
    warned = [s for s in sources if s.warning]
    # a copy of metrics read elsewhere, or runwatch's own stop request, is no news (as `collector files` says)
    unexpected = [f for f in skipped if not f.expected]
    if warned or unexpected:
        st.warning(
            f"{len(unexpected)} file(s) of this run not read, {len(warned)} read without a point: see below."
        )
    with st.expander(
        f"Files of this run ({len(sources)} read, {len(skipped)} not read)", expanded=bool(warned)
    ):
        columns = ("path", "format", "lines", "points", "bad_lines", "warning")
        st.dataframe([{k: getattr(s, k) for k in columns} for s in sources], hide_index=True)
        if skipped:
            st.dataframe(
                [{"path": f.path, "reason": f.reason, "bytes": f.bytes} for f in skipped], hide_index=True
            )


files_of_run(detail)

names = metric_names(detail.metrics)
# The API tells which metrics are the same series under another name, hold one value throughout, or were
# logged once as the run's summary: those are said, not drawn (again).
twins: dict[str, list[str]] = {}
for name, fact in facts.items():
    if fact.same_as:
        twins.setdefault(fact.same_as, []).append(name)
constants = {m: f.constant for m, f in facts.items() if f.constant is not None and not f.same_as}
summary = {m: f for m, f in facts.items() if f.summary_only}
said = {m for m, f in facts.items() if f.same_as} | set(constants) | set(summary)
charted = [n for n in names if n not in said]
roles = {role: [m for m in metrics if m in charted] for role, metrics in all_roles.items()}
panels = role_panels({r: m for r, m in roles.items() if m}, detail.panels, detail.decorations, kind)

controls = st.columns([3, 1, 1, 1])
smoothing = controls[0].slider(
    "Smoothing (TensorBoard-style debiased EMA)", 0.0, 0.99, 0.6, 0.01, help="0 draws the raw points only"
)
log_y = controls[1].toggle("Log scale", value=False)
live = status in ("running", "stalled")  # a stalled run may go on: keep polling
controls[2].markdown(f"**Live**: every {ui.settings().refresh_s:g} s" if live else "**Not live** (run ended)")
if controls[3].button("Reload all points"):
    forget(run)
    zoom.reset(run)

checkpoint_steps = detail.checkpoint_steps
# the view's alerts serve the first draw (refreshes ask the alerts route again)
first_draw = {"alerts": detail.alerts}


def panel_figure(panel: Panel, series: dict[str, dict], alerts: list[Alert]):
    drawn = []
    for metric in panel.metrics:
        s = series[metric]
        info = facts.get(metric)
        if info is not None and info.scale != 1.0:
            # lr(1e-3) is logged x1000: draw it in real units under its real name, as the API scales it
            s = {**scaled(s, info.scale), "label": f"{info.label} (from {metric})"}
        if twins.get(metric):  # the same values logged under other names: drawn once, named by all
            s = {**s, "label": " = ".join([s.get("label") or metric, *twins[metric]])}
        drawn.append(s)
    return metric_figure(
        drawn,
        title=panel.title,
        smoothing=smoothing if panel.smooth else 0.0,
        log_y=log_y or panel.always_log,
        alerts=alerts_for(alerts, [*panel.metrics, *(t for m in panel.metrics for t in twins.get(m, []))]),
        y_title=panel.y_title,
        normal_band=panel.normal_band,
        warning_line=panel.warning_line,
        checkpoint_steps=checkpoint_steps if panel.checkpoints else [],
    )


def draw_panel(panel: Panel, series: dict[str, dict], alerts: list[Alert], key: str) -> None:
    fig = panel_figure(panel, series, alerts)
    st.plotly_chart(fig, key=key, config={"displaylogo": False})
    note = fig.layout.meta.get("bucket_note") if fig.layout.meta else None
    if note:
        st.caption(note)


def alerts_table(alerts: list[Alert]) -> None:
    """The run's alerts under the charts, from the same fetch the charts' episodes come from."""
    with st.expander("Alerts of this run"):
        if not alerts:
            st.write("No alerts.")
            return
        rows = [
            {
                "id": a.id,
                "severity": a.severity,
                "rule": a.rule,
                "metric": a.metric,
                "first_step": a.first_step,
                "last_step": a.last_step,
                "state": a.state,
                "message": a.message,
            }
            for a in alerts
        ]
        st.dataframe(rows, hide_index=True)


def said_figures(window) -> None:
    """What is said, not drawn: series logged under two names, constants, the run's summary values."""
    if twins:
        st.caption(
            "Drawn once under both names (the same value at every step): "
            + "; ".join(
                f"`{kept}` = " + ", ".join(f"`{t}`" for t in others) for kept, others in twins.items()
            )
        )
    rows = [
        {"metric": m, "value": ui.fmt_number(v), "kind": "the same at every step"}
        for m, v in constants.items()
    ]
    rows += [
        {
            "metric": m,
            "value": ui.fmt_number(f.last_value),
            "kind": f"logged once, at step {f.last_step:,}",
        }
        for m, f in summary.items()
    ]
    if rows and window is None:
        st.subheader("Values, not charts")
        st.dataframe(rows, hide_index=True, width="stretch")


def open_groups(groups: dict[str, list[str]], alerts: list[Alert]) -> dict[str, list[str]]:
    """The groups of other metrics shown open, each with the metrics it shows: those a person opened, those
    with an alert, and with a search the metrics it matches. Only their series are fetched and drawn."""
    query = st.session_state.get("metric_search") or ""
    alerted = {a.metric for a in alerts}
    opened = {}
    for group, metrics in groups.items():
        shown = [m for m in metrics if query.lower() in m.lower()] if query else metrics
        default = bool(query) or bool(alerted & set(shown))
        if shown and st.session_state.get(_group_key(group, query), default):
            opened[group] = shown
    return opened


def _group_key(group: str, query: str) -> str:
    return f"group-{group}-{query}"


def other_metrics(groups: dict[str, list[str]], series: dict[str, dict], alerts: list[Alert]) -> None:
    """Every other metric, in groups by prefix, folded (a folded group draws nothing: a page of 80 metrics
    opens fast); a group with an alert opens by itself, and the search opens the groups it matches."""
    if not groups:
        return
    st.subheader("Other metrics")
    query = st.text_input("Find a metric", placeholder="part of a name, e.g. entropy", key="metric_search")
    alerted = {a.metric for a in alerts}
    for group, metrics in groups.items():
        shown = [m for m in metrics if query.lower() in m.lower()] if query else metrics
        if not shown:
            continue
        key = _group_key(group, query)
        opened = bool(query) or bool(alerted & set(shown))
        label = f"{group}/" if group != "other" else "other metrics"
        with st.expander(f"{label} ({len(shown)})", expanded=opened, key=key, on_change="rerun"):
            if not st.session_state.get(key, opened):
                continue
            cols = st.columns(2)
            for i, metric in enumerate(shown):
                with cols[i % 2]:
                    draw_panel(Panel(metric, (), metrics=(metric,)), series, alerts, key=f"metric-{metric}")


@st.fragment(run_every=ui.settings().refresh_s if live else None)
def charts() -> None:
    alerts = first_draw.pop("alerts", None)
    if alerts is None:
        alerts = api.alerts(run=run, state="all")
    role_metrics = {m for p in panels for m in p.metrics}
    groups = group_metrics(charted, exclude=role_metrics)
    # only what is drawn: the role panels and the open groups (80 metrics' series cost seconds to fetch)
    wanted = sorted(role_metrics | {m for shown in open_groups(groups, alerts).values() for m in shown})
    zoom.listen(run)
    window = zoom.window(run)
    if window is None:
        series = load_series(api, run, wanted, poll=live)
    else:
        series = window_series(api, run, wanted, window)
        st.caption(f"Zoomed to steps {window[0]:,} to {window[1]:,}: double-click a chart for the whole run.")
    if not names:
        st.info("This run has no metric points yet.")
        alerts_table(alerts)
        return
    left, right = st.columns(2)
    for i, panel in enumerate(panels):
        with left if i % 2 == 0 else right:
            draw_panel(panel, series, alerts, key=f"panel-{panel.title}")

    epoch_metric = next(iter(roles.get("loss", [])), None)
    if epoch_metric and ("epoch" in names or roles.get("epoch")):
        rows = api.epochs(run, epoch_metric).epochs
        if rows:
            st.subheader("Per epoch")
            st.plotly_chart(epoch_figure(rows, metric=epoch_metric), key="epoch-view")

    said_figures(window)
    other_metrics(groups, series, alerts)
    alerts_table(alerts)


playback_control(api, run, panels, last, panel_figure)
charts()
