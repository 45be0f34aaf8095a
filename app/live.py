"""Series held in the Streamlit session: fetched once, then only new points are fetched and appended; and
the finer series of a zoomed step window, fetched once per window."""

from __future__ import annotations

import streamlit as st

from app.api import CHART_POINTS, DashboardApi
from app.series import append_new, from_api, last_step, raw_points


def _held(run: str) -> dict[str, dict]:
    return st.session_state.setdefault(f"series::{run}", {})


def load_series(api: DashboardApi, run: str, metrics: list[str], *, poll: bool) -> dict[str, dict]:
    """The app series of `metrics` for `run`.

    A metric not held yet is fetched whole (downsampled to about CHART_POINTS buckets; the API draws a bucket
    at its last step, so the last step held is the metric's real last step). With `poll`, the held ones ask
    the API only for raw points past their last step (`after=`) and append them.
    """
    held = _held(run)
    missing = [m for m in metrics if m not in held]
    if missing:
        for series in api.metrics(run, missing, points=CHART_POINTS):
            held[series.metric] = from_api(series)
        for metric in missing:
            held.setdefault(metric, from_api(raw_points(metric, [], [])))
    elif poll:
        lasts = [last_step(held[m]) for m in metrics]
        after = min((s for s in lasts if s is not None), default=-1)
        for series in api.metrics(run, metrics, points=CHART_POINTS, after=after):
            raw = series.model_copy(update={"downsampled": False})
            held[series.metric] = append_new(held[series.metric], from_api(raw))
    return {m: held[m] for m in metrics}


def window_series(
    api: DashboardApi, run: str, metrics: list[str], window: tuple[int, int]
) -> dict[str, dict]:
    """The series of `metrics` over the step `window` at full chart resolution (about CHART_POINTS buckets
    within the window, raw points when it holds fewer): one request per window, kept while it is shown."""
    key = f"window::{run}"
    wanted = (window, tuple(metrics))
    cached = st.session_state.get(key)
    if cached is not None and cached[0] == wanted:
        return cached[1]
    got = {
        s.metric: from_api(s)
        for s in api.metrics(run, metrics, points=CHART_POINTS, start=window[0], end=window[1])
    }
    for metric in metrics:
        got.setdefault(metric, from_api(raw_points(metric, [], [])))
    st.session_state[key] = (wanted, got)
    return got


def forget(run: str) -> None:
    """Drop the held series of `run` (the next draw fetches them whole again)."""
    st.session_state.pop(f"series::{run}", None)
    st.session_state.pop(f"window::{run}", None)
