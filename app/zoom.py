"""Zoom on a chart -> finer buckets for the visible steps.

A small Streamlit component (JavaScript only, mounted in the page itself, not an iframe) listens to every
plotly chart's `plotly_relayout` event: a zoom sends the visible step range back to the page, a double-click
(autorange) sends a reset. The page then asks the API for that window at full chart resolution. No data is
computed here; the API buckets the window.
"""

from __future__ import annotations

import math

import streamlit as st
from streamlit.components.v2 import component

# Attaches once per chart element (charts are re-created on reruns, so it looks again every 300 ms).
_JS = """
export default function (component) {
  const { setTriggerValue } = component;
  const seen = new WeakSet();
  const attach = () => {
    document.querySelectorAll('.js-plotly-plot').forEach((gd) => {
      if (seen.has(gd) || typeof gd.on !== 'function') return;
      seen.add(gd);
      gd.on('plotly_relayout', (ev) => {
        if (!ev) return;
        if (ev['xaxis.autorange']) { setTriggerValue('zoom', {reset: true}); return; }
        const range = ev['xaxis.range'] || [ev['xaxis.range[0]'], ev['xaxis.range[1]']];
        if (range[0] === undefined || range[1] === undefined) return;
        setTriggerValue('zoom', {start: Number(range[0]), end: Number(range[1])});
      });
    });
  };
  attach();
  const timer = setInterval(attach, 300);
  return () => clearInterval(timer);
}
"""

_listener = component("runwatch_zoom", js=_JS)


def _key(run: str) -> str:
    return f"zoom::{run}"


def window(run: str) -> tuple[int, int] | None:
    """The step window the user zoomed the run's charts to, or None for the whole run."""
    return st.session_state.get(_key(run))


def listen(run: str) -> None:
    """Mount the listener; a zoom or a reset sent by a chart updates `window(run)` before the charts draw."""
    result = _listener(key="zoom-listener", on_zoom_change=lambda: None)  # one run per page
    event = getattr(result, "zoom", None)
    if not event:
        return
    if event.get("reset"):
        st.session_state.pop(_key(run), None)
        return
    start, end = event.get("start"), event.get("end")
    if isinstance(start, int | float) and isinstance(end, int | float) and math.isfinite(start + end):
        low, high = sorted((math.floor(start), math.ceil(end)))
        st.session_state[_key(run)] = (low, high)


def reset(run: str) -> None:
    st.session_state.pop(_key(run), None)
