"""Streamlit's chart code loaded as a page opens, not when its first chart arrives.

Streamlit's browser side fetches and runs its Plotly code (one 4.7 MB file) only when the first
`st.plotly_chart` of a page reaches it, at the end of the page's script run; on a loaded 2-core machine that
file alone took 2-5 s of a run page's open in a fresh browser. A small component (JavaScript only, mounted in
the page itself) imports the same file from the top of the page instead, so the browser fetches and runs it
while the script still asks the collector for the page's data; the charts then find it ready (the same URL is
one module in the browser). It draws nothing. A Streamlit without that file (another version) loads nothing
here and charts load as before.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import streamlit as st
from streamlit.components.v2 import component

# `data`: the file's name beside Streamlit's own entry script, whose URL the browser resolves it against (so a
# dashboard under a base path loads the same URL Streamlit's lazy import does). `idle`: wait until the browser
# has nothing else to do (a page without charts, whose next page may have them).
_JS = """
export default function (component) {
  const { data } = component;
  const entry = document.querySelector('script[type="module"][src*="/static/js/index."]');
  if (!data || !data.file || !entry) return;
  const load = () => import(new URL(data.file, entry.src).href).catch(() => {});
  if (data.idle && 'requestIdleCallback' in window) requestIdleCallback(load, {timeout: 5000});
  else load();
}
"""

_loader = component("runwatch_chart_code", js=_JS)


@cache
def plotly_file() -> str | None:
    """The name of Streamlit's Plotly chart file in its static folder, or None when this Streamlit has none."""
    folder = Path(st.__file__).parent / "static" / "static" / "js"
    found = sorted(folder.glob("PlotlyChart.*.js"))
    return found[0].name if len(found) == 1 else None


def load_charts_early(*, idle: bool = False) -> None:
    """Start loading the chart code now (`idle`: once the browser is idle). No-op without the file."""
    name = plotly_file()
    if name is not None:
        _loader(key="chart-code", data={"file": name, "idle": idle}, height=0)
