"""The overview and the addresses people type, in Chromium: `/runs` and other natural paths lead to their page,
and the compare page's legend sits under its plot."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from app.chart_code import plotly_file
from tests.app.browser_support import (
    chromium_or_skip,
    chromium_page,
    screenshot_whole_page,
    screenshots_dir,
    streamlit_app,
    wait_for_charts,
    wait_idle,
)
from tests.app.conftest import real_run_ids


def _open(page, url: str, charts: int = 0) -> str:
    page.goto(url)
    page.wait_for_selector("h1")
    if charts:
        wait_for_charts(page, charts)
    wait_idle(page)
    assert page.get_by_text("Page not found").count() == 0, f"{url}: Streamlit says the page was not found"
    return page.locator("h1").first.inner_text()


def test_natural_addresses_lead_to_their_pages(app_env, tmp_path: Path):
    chromium_or_skip()
    shots = screenshots_dir(tmp_path)
    runs = real_run_ids()
    with (
        streamlit_app(app_env.db, [app_env.root], tmp_path / "home", tmp_path / "st.log") as url,
        chromium_page() as page,
    ):
        assert _open(page, url + "/") == "Runs"
        assert _open(page, url + "/runs") == "Runs"
        page.wait_for_selector('[data-testid="stDataFrame"]')  # the overview's table, drawn
        screenshot_whole_page(page, shots / "overview.png")
        for path, title in (("/overview", "Runs"), ("/incidents", "Alerts"), ("/checkpoint", "Checkpoints")):
            assert title in _open(page, url + path), path
        assert _open(page, f"{url}/run?run={quote(runs[0])}", charts=1) == runs[0]
        # ten runs compared: the legend under the plot, one line each, the plot keeps its height
        chosen = ",".join(quote(r, safe="") for r in runs[:10])
        assert _open(page, f"{url}/compare?runs={chosen}", charts=1) == "Compare runs"
        screenshot_whole_page(page, shots / "compare.png")
        plot = page.locator(".js-plotly-plot .draglayer .nsewdrag").first.bounding_box()
        legend = page.locator(".js-plotly-plot .legend").first.bounding_box()
        assert plot["height"] > 200, plot
        assert legend["y"] > plot["y"] + plot["height"], (plot, legend)
        assert page.locator(".js-plotly-plot .legend .traces").count() >= min(10, len(runs))


def test_the_chart_code_is_loaded_before_a_chart_asks_for_it(app_env, tmp_path: Path):
    """The overview draws no chart, yet once the browser is idle it has loaded Streamlit's Plotly file
    (app/chart_code.py): the run page opened next finds it ready. A Streamlit without that file fails here."""
    chromium_or_skip()
    name = plotly_file()
    assert name is not None, (
        "no single PlotlyChart.*.js in this Streamlit's static folder: see app/chart_code.py"
    )
    with (
        streamlit_app(app_env.db, [app_env.root], tmp_path / "home", tmp_path / "st.log") as url,
        chromium_page() as page,
    ):
        assert _open(page, url + "/") == "Runs"
        assert page.locator(".js-plotly-plot").count() == 0
        page.wait_for_function(
            "name => performance.getEntriesByType('resource').some(e => e.name.endsWith('/' + name))",
            arg=name,
        )
        runs = real_run_ids()
        assert _open(page, f"{url}/run?run={quote(runs[0])}", charts=1) == runs[0]
