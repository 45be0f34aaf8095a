"""A fresh dashboard opened first at a plain address (`/alerts`, `/compare`, ...), in Chromium: that page is
drawn with no "Page not found" dialog over it.

Streamlit runs the first script run of a fresh server as an old-style app built from a `pages/` folder beside
the main script, if there is one, until `st.navigation` is first called; that app knows no page named `alerts`,
so the first visit got the dialog (over the right page, drawn by the run after it) and later visits did not.
Each address here is therefore the first page of its own freshly started dashboard."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.app.browser_support import (
    REPO,
    chromium_or_skip,
    chromium_page,
    screenshot_whole_page,
    screenshots_dir,
    streamlit_app,
    wait_idle,
)

pytestmark = pytest.mark.browser

# address -> words in the heading of the page it leads to
FIRST_PAGES = {
    "/runs": "Runs",
    "/overview": "Runs",
    "/incidents": "Alerts",
    "/alerts": "Alerts",
    "/compare": "Compare runs",
    "/checkpoint": "Checkpoints",
}


def test_no_pages_folder_beside_the_main_script():
    """The cause, checked without a browser: a `pages/` folder next to streamlit_app.py turns a fresh server's
    first run into Streamlit's folder-based app."""
    assert not (REPO / "app" / "pages").exists(), "app/pages/ makes Streamlit's first run a folder-based app"


@pytest.mark.parametrize("address", FIRST_PAGES)
def test_first_page_of_a_fresh_dashboard(address: str, app_env, tmp_path: Path):
    chromium_or_skip()
    name = address.strip("/")
    with (
        streamlit_app(app_env.db, [app_env.root], tmp_path / "home", tmp_path / "st.log") as url,
        chromium_page() as page,
    ):
        page.goto(url + address)
        page.wait_for_selector("h1")
        wait_idle(page)
        screenshot_whole_page(page, screenshots_dir(tmp_path) / f"first-{name}.png")
        assert page.get_by_text("Page not found").count() == 0, (
            f"{address}: Streamlit says the page was not found"
        )
        heading = page.locator("h1").first.inner_text()
        assert FIRST_PAGES[address] in heading, (address, heading)
