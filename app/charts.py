"""Plotly figures built from app series (see app/series.py) and the API's alerts (`collector.api.models.Alert`).

Pure functions: they take data and drawing options and return a `go.Figure`; they fetch nothing and decide
nothing about the run. A downsampled series is drawn as its min-max band per bucket plus a line, so a spike
anywhere in the run stays visible; non-finite points and buckets are red crosses along the top edge.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import plotly.graph_objects as go

from app.series import debiased_ema, is_finite
from collector.api.models import Alert, EpochRow

SEVERITY_COLORS = {"error": "#d62728", "warn": "#ff7f0e", "info": "#1f77b4"}
# Plotly's default colour cycle, spelled out so the band can reuse a line's colour with transparency.
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
NONFINITE_TRACE = "NaN/inf"
# one marker shape per rule on a chart: two rules of one severity (one colour) stay apart in the legend
ALERT_SYMBOLS = ("triangle-down", "diamond", "square", "star", "circle")


def _rgba(hex_color: str, alpha: float) -> str:
    red, green, blue = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({red},{green},{blue},{alpha})"


def _drawable(values: Iterable[float]) -> list[float | None]:
    # Plotly leaves a gap at None; NaN in a plain list would be sent as null anyway, but say so explicitly.
    return [v if is_finite(v) else None for v in values]


def _band_edge(edge: list[float], other: list[float]) -> list[float | None]:
    # A bucket holding a NaN may lack one edge; a gap in a filled band draws a stray polygon, so fall back
    # to the other edge (the NaN itself is marked at the top).
    return [e if is_finite(e) else (o if is_finite(o) else None) for e, o in zip(edge, other, strict=True)]


def bucket_note(series_list: list[dict]) -> str | None:
    """A sentence saying the chart shows buckets rather than raw points, or None when every series is raw."""
    parts = [
        f"{s.get('label') or s['metric']}: {len(s['steps']):,} buckets of {s['total_points']:,} points"
        for s in series_list
        if s["downsampled"]
    ]
    if not parts:
        return None
    return "Showing min-max buckets, not raw points (" + "; ".join(parts) + "): the band spans each bucket."


def alerts_for(alerts: Iterable[Alert], metrics: Iterable[str]) -> list[Alert]:
    """The alerts to mark on a chart of `metrics`: those about one of them, and run-wide ones (no metric)."""
    names = set(metrics)
    return [a for a in alerts if not a.metric or a.metric in names]


def _add_series(fig: go.Figure, series: dict, color: str, smoothing: float) -> None:
    name = series.get("label") or series["metric"]
    steps = series["steps"]
    if series["downsampled"]:
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=_band_edge(series["maxs"], series["mins"]),
                name=f"{name} max",
                mode="lines",
                line={"width": 1, "color": _rgba(color, 0.6)},
                showlegend=False,
                legendgroup=name,
                hoverinfo="x+y+name",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=_band_edge(series["mins"], series["maxs"]),
                name=f"{name} min",
                mode="lines",
                line={"width": 1, "color": _rgba(color, 0.6)},
                fill="tonexty",
                fillcolor=_rgba(color, 0.25),
                showlegend=False,
                legendgroup=name,
                hoverinfo="x+y+name",
            )
        )
    elif smoothing > 0:
        # The raw points stay visible, faint, under the smoothed line.
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=_drawable(series["values"]),
                name=f"{name} raw",
                mode="lines+markers" if len(steps) <= 300 else "lines",
                line={"width": 1, "color": _rgba(color, 0.35)},
                marker={"size": 3, "color": _rgba(color, 0.35)},
                showlegend=False,
                legendgroup=name,
            )
        )
    values = debiased_ema(series["values"], smoothing) if smoothing > 0 else series["values"]
    fig.add_trace(
        go.Scatter(
            x=steps,
            y=_drawable(values),
            name=name,
            mode="lines+markers" if len(steps) <= 60 else "lines",
            line={"width": 2, "color": color},
            marker={"size": 5},
            legendgroup=name,
        )
    )


def _add_nonfinite(fig: go.Figure, series_list: list[dict]) -> None:
    steps = sorted({s for series in series_list for s in series["nonfinite_steps"]})
    if not steps:
        return
    labels = [
        ", ".join(
            series.get("label") or series["metric"]
            for series in series_list
            if step in series["nonfinite_steps"]
        )
        for step in steps
    ]
    # On a hidden 0..1 axis so the crosses sit at the top whatever the data's range or log scale.
    fig.add_trace(
        go.Scatter(
            x=steps,
            y=[0.94] * len(steps),
            yaxis="y2",
            name=NONFINITE_TRACE,
            mode="markers",
            marker={"symbol": "x", "size": 11, "color": SEVERITY_COLORS["error"], "line": {"width": 2}},
            text=[f"NaN/inf in {label} at step {step:,}" for step, label in zip(steps, labels, strict=True)],
            hoverinfo="text",
        )
    )


def _alert_groups(alerts: Iterable[Alert]) -> dict[tuple[str, str], list[Alert]]:
    """The drawn alerts by (rule, severity), each group by first step: one legend entry each."""
    groups: dict[tuple[str, str], list[Alert]] = {}
    for alert in sorted(alerts, key=lambda a: a.first_step):
        groups.setdefault((alert.rule, alert.severity), []).append(alert)
    return groups


def _add_alerts(fig: go.Figure, alerts: Iterable[Alert]) -> None:
    # Each episode a band (or a line) coloured by severity; its name is a legend entry per rule and severity,
    # with a marker at each episode's start along the top edge, never a label on the plot (labels there
    # piled up over each other and over the threshold labels).
    for n, ((rule, severity), group) in enumerate(_alert_groups(alerts).items()):
        color = SEVERITY_COLORS.get(severity, SEVERITY_COLORS["info"])
        for alert in group:
            first, last = alert.first_step, alert.last_step
            if last > first:
                fig.add_vrect(x0=first, x1=last, fillcolor=color, opacity=0.15, line_width=0, layer="below")
            else:
                fig.add_vline(x=first, line_color=color, line_width=2, opacity=0.6)
        steps = [
            f"{a.first_step:,}" if a.last_step == a.first_step else f"{a.first_step:,}–{a.last_step:,}"
            for a in group
        ]
        count = f" ×{len(group)}" if len(group) > 1 else ""
        # On the hidden 0..1 axis, as the NaN crosses: at the top whatever the data's range or log scale.
        fig.add_trace(
            go.Scatter(
                x=[a.first_step for a in group],
                y=[0.99] * len(group),
                yaxis="y2",
                name=f"{rule} ({severity}){count}",
                mode="markers",
                marker={"symbol": ALERT_SYMBOLS[n % len(ALERT_SYMBOLS)], "size": 10, "color": color},
                text=[f"{rule} ({severity}) at step {where}" for where in steps],
                hoverinfo="text",
            )
        )


def _legend_entry(fig: go.Figure, name: str, line: dict) -> None:
    """A legend entry for a line drawn as a shape (a threshold, a save): in the legend, the level's name never
    collides with the alerts' labels over the chart."""
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name=name, line=line))


def _step_range(series_list: list[dict]) -> dict:
    # Fit the axis to the data: annotations and shapes must not widen it past the first and last step.
    steps = [s for series in series_list for s in (series["steps"][:1] + series["steps"][-1:])]
    if not steps or min(steps) == max(steps):
        return {}
    return {"range": [min(steps), max(steps)]}


LEGEND_LINE_PX = 21


def metric_figure(
    series_list: list[dict],
    *,
    title: str,
    smoothing: float = 0.0,
    log_y: bool = False,
    alerts: Sequence[Alert] = (),
    y_title: str | None = None,
    normal_band: tuple[float, float] | None = None,
    warning_line: float | None = None,
    checkpoint_steps: list[int] = (),
    height: int = 330,
    legend_below: bool = False,
) -> go.Figure:
    """One chart of one or more series on a shared step axis.

    `legend_below`: the legend one entry a line under the plot, the figure taller by its lines (many runs
    compared: a legend beside or over the plot squeezes or hides it).

    Draws, per series, the min-max band when downsampled, the raw points under the smoothed line when
    smoothing is on, and the (smoothed) line; then red crosses at the top for non-finite points, a shaded
    `normal_band`, a dashed `warning_line`, checkpoint saves as dotted lines, and each alert episode as a
    band from its first to last step coloured by severity, named in the legend (one entry per rule and
    severity, a marker at each episode's start), never by a label on the plot.
    """
    fig = go.Figure()
    for i, series in enumerate(series_list):
        _add_series(fig, series, PALETTE[i % len(PALETTE)], smoothing)
    _add_nonfinite(fig, series_list)
    if normal_band is not None:
        fig.add_hrect(
            y0=normal_band[0],
            y1=normal_band[1],
            fillcolor="#2ca02c",
            opacity=0.08,
            line_width=0,
            layer="below",
        )
        _legend_entry(fig, "normal range", {"color": "#2ca02c", "width": 8})
    if warning_line is not None:
        fig.add_hline(y=warning_line, line_dash="dash", line_color=SEVERITY_COLORS["warn"])
        _legend_entry(fig, f"warning {warning_line:g}", {"dash": "dash", "color": SEVERITY_COLORS["warn"]})
    for step in checkpoint_steps:
        fig.add_vline(x=step, line_dash="dot", line_color="#7f7f7f", line_width=1, opacity=0.7)
    if checkpoint_steps:  # vlines have no legend entry of their own
        _legend_entry(fig, "checkpoint saved", {"dash": "dot", "color": "#7f7f7f"})
    _add_alerts(fig, alerts)
    note = bucket_note(series_list)
    # under the plot, left-aligned: however many lines it wraps to, it never runs into the title
    # (0.3 of the plot: below the step axis's ticks and title at every height a 330 px chart keeps)
    legend = {"orientation": "h", "yanchor": "top", "y": -0.3, "xanchor": "left", "x": 0.0}
    bottom = 10
    if legend_below:
        lines = len(series_list) + bool(checkpoint_steps) + len(_alert_groups(alerts))
        legend = {"orientation": "v", "yref": "container", "yanchor": "bottom", "y": 0.0, "x": 0.0}
        bottom = LEGEND_LINE_PX * lines + 50  # room for the lines and the step axis's title
        height += bottom + 40  # the plot keeps the height it has with the legend on top
    fig.update_layout(
        title={"text": title if note is None else f"{title}<br><sup>min-max buckets, not raw points</sup>"},
        height=height,
        margin={"l": 10, "r": 10, "t": 60, "b": bottom},
        hovermode="x unified",
        legend=legend,
        xaxis={"title": "step", **_step_range(series_list)},
        # a log axis over several decades labels the decades only: plotly's 2s and 5s between them crowd a
        # 330 px chart into unreadable digits
        yaxis={"title": y_title or "", "type": "log", "minorloglabels": "none"}
        if log_y
        # ".4~g": small values keep their digits (5e-4 reads 0.0005, not 0 or 500µ)
        else {"title": y_title or "", "type": "linear", "tickformat": ".4~g"},
        yaxis2={"overlaying": "y", "range": [0, 1], "visible": False, "fixedrange": True},
        meta={"bucket_note": note},
    )
    return fig


def epoch_figure(rows: list[EpochRow], *, metric: str, height: int = 300) -> go.Figure:
    """Mean per epoch with its spread: error bars of one standard deviation and a min-max band."""
    rows = sorted(rows, key=lambda r: r.epoch)
    epochs = [r.epoch for r in rows]
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=epochs,
            y=_drawable(r.max for r in rows),
            mode="lines",
            line={"width": 0},
            name="max",
            showlegend=False,
        )
    )
    fig.add_trace(
        go.Scatter(
            x=epochs,
            y=_drawable(r.min for r in rows),
            mode="lines",
            line={"width": 0},
            fill="tonexty",
            fillcolor=_rgba(PALETTE[0], 0.15),
            name="min-max",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=epochs,
            y=_drawable(r.mean for r in rows),
            mode="lines+markers",
            name="mean",
            line={"color": PALETTE[0], "width": 2},
            error_y={"type": "data", "array": _drawable(r.std for r in rows), "visible": True},
        )
    )
    fig.update_layout(
        title={"text": f"{metric} per epoch"},
        height=height,
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
        xaxis={"title": "epoch"},
        showlegend=True,
    )
    return fig
