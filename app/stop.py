"""The run page's stop: a "Stop run" button, its confirmation, and one line saying what became of the run's last
stop request, in the words of `collector run` (`StopState.said`): asked, then written or refused (why, and what
to do). Once a stop is asked the confirmation closes and only that line speaks; the button says what a second
press would do (disabled while a stop stands, since asking again changes nothing).
"""

from __future__ import annotations

import time

import streamlit as st

from app.api import DashboardApi
from collector.api.client import ApiError
from collector.api.models import StopState

STANDS = ("asked", "written", "already_asked")  # a request that stands: a second one changes nothing


def stop_section(
    api: DashboardApi,
    run: str,
    known: StopState | None,
    *,
    offered: bool,
    read_only: str | None,
    team: bool,
    refresh_s: float,
) -> None:
    """The button (when the run may be stopped: `offered`, and the API takes stops: no `read_only` why) and the
    stop's state line. `known`: the run detail's `stop`. On a `team` API, while the collector that owns the run
    has not carried the stop out, the state is asked again every `refresh_s` until it wrote or refused it;
    then the page is drawn again, so the button follows."""
    refused_now = f"stop_refused_now:{run}"  # a refusal on the spot (409): no state of it is stored
    if st.session_state.get(f"confirm_stop:{run}") and offered and not read_only:
        _confirm(api, run, refused_now)
        return
    waiting = team and known is not None and known.state == "asked"

    @st.fragment(run_every=refresh_s if waiting else None)
    def button_and_line() -> None:
        state = api.stop_state(run) if waiting else known
        if waiting and (state is None or state.state != "asked"):
            st.rerun()  # written or refused: the button follows, and the asking ends
        said = st.session_state.get(refused_now)
        if offered:
            _button(run, read_only, None if said else state, refused_now)
        if said:  # (it replaces the stored state's line: the same trouble, said once)
            st.error(said, icon=":material/block:")
        elif state is not None:
            _line(state, live=offered)

    button_and_line()


def _button(run: str, read_only: str | None, state: StopState | None, refused_now: str) -> None:
    """ "Stop run", saying what a press would do: nothing while a stop stands, not offered on a read-only API."""
    if read_only:
        st.button("Stop run", key="stop_run", disabled=True, help=f"Not here: {read_only}")
        st.caption(f"Stopping is not offered here: {read_only}.")
        return
    if state is not None and state.state in STANDS:
        st.button(
            "Stop run",
            key="stop_run",
            disabled=True,
            help="A stop was asked and it stands (see below): asking again would change nothing",
        )
        return
    again = state is not None and state.state == "refused"
    tip = (
        "Ask again, once what refused the last stop (below) is put right"
        if again or st.session_state.get(refused_now)
        else "Ask the trainer to save a checkpoint and stop"
    )
    if st.button("Stop run", key="stop_run", help=tip):
        st.session_state[f"confirm_stop:{run}"] = True
        st.session_state.pop(refused_now, None)
        st.rerun()


def _confirm(api: DashboardApi, run: str, refused_now: str) -> None:
    """The confirmation: on "Yes", the stop is asked and the page drawn again with the confirmation closed (the
    state line says what became of it); a refusal on the spot is kept for that line."""
    asking = f"confirm_stop:{run}"
    with st.container(border=True):
        st.warning(
            f"Stop **{run}**? The trainer saves a checkpoint of its last step, records `stopped` and exits "
            f"(it polls `runwatch.stop` in its folder)."
        )
        reason = st.text_input("Reason (kept in status.json)", value="stopped from the dashboard")
        yes, no = st.columns(2)
        if yes.button("Yes, stop the run", type="primary", key="stop_run_confirmed"):
            try:
                api.stop(run, reason)
            except ApiError as e:
                if e.status != 409:
                    raise
                said = str(e).split(f"{e.status} ", 1)[-1]  # `stop refused: WHY`, as `collector run` says it
                st.session_state[refused_now] = said[:1].upper() + said[1:]
            st.session_state[asking] = False
            st.rerun()
        if no.button("Cancel", key="stop_run_cancelled"):
            st.session_state[asking] = False
            st.rerun()


def _line(state: StopState, live: bool) -> None:
    """The state's line: refused in red, asked in blue; written (or found already there) in green while the run
    runs on (it stops at its next step), and small once it has ended (its status says it stopped)."""
    said = state.said(time.time())
    said = said[:1].upper() + said[1:]
    if state.state == "refused":
        st.error(said, icon=":material/block:")
    elif state.state == "asked":
        st.info(said, icon=":material/hourglass_top:")
    elif live:
        st.success(said, icon=":material/stop_circle:")
    else:
        st.caption(said)
