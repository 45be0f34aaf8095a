"""Run page controls that act or replay: the "Stop run" button (with a confirmation) and the playback of a
run's history, drawn as the API's playback stream sends it (points, alerts at the step they were raised).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import streamlit as st

from app.api import DashboardApi
from app.panels import Panel
from app.series import from_api, raw_points
from collector.api.client import ApiError
from collector.api.models import Alert, StopState

SPEEDS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0)
REDRAW_S = 0.3  # redraw the charts at most this often while playing


def stop_control(api: DashboardApi, run: str, read_only: str | None = None, team: bool = False) -> str | None:
    """A "Stop run" button; a second, explicit confirmation writes the stop request through the API (on a
    `team` API, a request the collector that owns the run carries out). Disabled, saying why, when the API
    takes no stops (`read_only`: a read-only team API). A refusal is said in the words of one through a
    team's lake (`StopState.said`). `asked` or `refused` when a stop was asked in this run of the page."""
    asking = f"confirm_stop:{run}"
    if read_only:
        st.button("Stop run", key="stop_run", disabled=True, help=f"Not here: {read_only}")
        st.caption(f"Stopping is not offered here: {read_only}.")
        return None
    if not st.session_state.get(asking):
        if st.button("Stop run", key="stop_run", help="Ask the trainer to save a checkpoint and stop"):
            st.session_state[asking] = True
            st.rerun()
        return None
    asked = None
    with st.container(border=True):
        st.warning(
            f"Stop **{run}**? The trainer saves a checkpoint of its last step, records `stopped` and exits "
            f"(it polls `runwatch.stop` in its folder)."
        )
        reason = st.text_input("Reason (kept in status.json)", value="stopped from the dashboard")
        yes, no = st.columns(2)
        if yes.button("Yes, stop the run", type="primary", key="stop_run_confirmed"):
            st.session_state[asking] = False
            try:
                answer = api.stop(run, reason)
            except ApiError as e:
                if e.status != 409:
                    raise
                refused = str(e).split(f"{e.status} ", 1)[-1]  # `stop refused: WHY`
                st.error(refused[:1].upper() + refused[1:], icon=":material/block:")
                return "refused"
            asked = "asked"
            if team:  # the request is a row in the lake: the owning collector writes the file
                st.success(
                    f"Asked the collector that owns the run to stop it: it writes {answer.path} at its next "
                    f"batch (a second or two; {answer.request.reason})."
                )
            else:
                verb = "Asked the run to stop" if answer.written else "The run was already asked to stop"
                st.success(f"{verb}: {answer.path} ({answer.request.reason})")
        if no.button("Cancel", key="stop_run_cancelled"):
            st.session_state[asking] = False
            st.rerun()
    return asked


def stop_state_note(
    api: DashboardApi, run: str, known: StopState | None, asked: bool, team: bool, refresh_s: float
) -> None:
    """What became of the run's last stop request, in the CLI's words (`StopState.said`): `known` (the run's
    detail), or asked again when a stop was `asked` just now; on a `team` API, while the collector that owns
    the run has not carried it out, asked again every `refresh_s` until it wrote or refused it."""
    waiting = team and (asked or (known is not None and known.state == "asked"))

    @st.fragment(run_every=refresh_s if waiting else None)
    def note() -> None:
        state = api.stop_state(run) if waiting or asked else known
        if state is None:
            return
        said = state.said(time.time())
        said = said[0].upper() + said[1:]
        if state.state == "refused":
            st.error(said, icon=":material/block:")
        elif state.state == "asked":
            st.info(said, icon=":material/hourglass_top:")
        else:
            st.caption(said)

    note()


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
    step, drawn_at = start, 0.0

    def draw() -> None:
        series = {m: from_api(raw_points(m, s["steps"], s["values"])) for m, s in held.items()}
        # An alert shows from the step it was raised up to the step played so far, not its final extent.
        shown = [a.model_copy(update={"last_step": min(a.last_step, step)}) for a in alerts]
        for panel, slot in zip(panels, slots, strict=True):
            fig = figure_for(panel, series, shown)
            fig.update_layout(title=f"Playback: {panel.title}")
            slot.plotly_chart(fig, config={"displaylogo": False})

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
