"""The run page's playback of a run's history, drawn as the API's playback stream sends it (points, alerts at the
step they were raised). (Its Stop button is app/stop.py.)
"""

from __future__ import annotations

import time
from collections.abc import Callable

import streamlit as st

from app.api import DashboardApi
from app.panels import Panel
from app.series import from_api, raw_points
from collector.api.models import Alert

SPEEDS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0)
REDRAW_S = 0.3  # redraw the charts at most this often while playing


def playback_control(
    api: DashboardApi,
    run: str,
    panels: list[Panel],
    last_step: int | None,
    figure_for: Callable[[Panel, dict[str, dict], list[Alert]], object],
) -> None:
    """Inputs for a playback and, on "Play", the run's charts redrawn as its history streams in."""
    if not panels or last_step is None:
        return
    with st.expander("Play back this run", expanded=bool(st.session_state.get("playing"))):
        cols = st.columns([2, 2, 3, 1])
        start = cols[0].number_input("From step", 0, last_step, 0, key="play_start")
        end = cols[1].number_input("To step", 0, last_step, last_step, key="play_end")
        speed = cols[2].select_slider(
            "Speed (x real time; steps a second when the run logs no time)",
            SPEEDS,
            value=1.0,
            key="play_speed",
        )
        if cols[3].button("Play", key="play"):
            play(api, run, panels, int(start), int(end), float(speed), figure_for)


def play(
    api: DashboardApi,
    run: str,
    panels: list[Panel],
    start: int,
    end: int,
    speed: float,
    figure_for: Callable[[Panel, dict[str, dict], list[Alert]], object],
) -> None:
    """Stream the playback and redraw the role panels as its points and alerts arrive."""
    metrics = sorted({m for p in panels for m in p.metrics})
    held = {m: {"metric": m, "steps": [], "values": []} for m in metrics}
    alerts: list[Alert] = []
    caption, bar = st.empty(), st.progress(0.0)
    columns = st.columns(2)
    slots = [columns[i % 2].empty() for i in range(len(panels))]
    step, drawn_at, draws = start, 0.0, 0

    def draw() -> None:
        nonlocal draws
        # Each draw replaces its slot's chart in the same script run, so each needs a key of its own: Streamlit
        # refuses two charts with the same parameters (the last progress and the completion draw the same
        # figure when every point has arrived) as one element, and the error stops the playback.
        draws += 1
        series = {m: from_api(raw_points(m, s["steps"], s["values"])) for m, s in held.items()}
        # An alert shows from the step it was raised up to the step played so far, not its final extent.
        shown = [a.model_copy(update={"last_step": min(a.last_step, step)}) for a in alerts]
        for i, (panel, slot) in enumerate(zip(panels, slots, strict=True)):
            fig = figure_for(panel, series, shown)
            fig.update_layout(title=f"Playback: {panel.title}")
            slot.plotly_chart(fig, config={"displaylogo": False}, key=f"playback:{i}:{draws}")

    for event in api.playback(run, metrics, start, end, speed):
        kind = event["event"]
        if kind == "point":
            held[event["metric"]]["steps"].append(event["step"])
            held[event["metric"]]["values"].append(event["value"])
        elif kind == "alert":
            alerts.append(Alert.model_validate(event))  # (as `GET /api/alerts` lists it, plus `event`)
        elif kind == "progress":
            step = event["step"]
            bar.progress(event["progress"], text=f"step {step:,} ({event['progress']:.0%})")
            if time.monotonic() - drawn_at >= REDRAW_S:
                draw()
                drawn_at = time.monotonic()
        elif kind == "playback_info":
            how = (
                "x real time" if event["timing"] == "wall_time" else " steps a second (the run logs no time)"
            )
            caption.caption(f"Playing steps {event['start_step']:,}-{event['end_step']:,}: {event['steps']:,} "
                            f"steps, {event['total']:,} points, at {event['speed']:g}{how}")  # fmt: skip
        elif kind == "playback_complete":
            step = end
            draw()
            caption.caption(
                f"Played {event['steps']:,} steps ({event['total']:,} points, {event['alerts']} alerts)"
            )
