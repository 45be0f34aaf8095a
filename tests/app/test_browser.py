"""The dashboard in headless Chromium: every page drawn, an alert acknowledged by clicking, screenshots saved.

Screenshots go to $RUNWATCH_SCREENSHOTS (default: the test's tmp_path/screenshots).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.app.browser_support import (
    chromium_or_skip,
    chromium_page,
    screenshot_whole_page,
    screenshots_dir,
    streamlit_app,
    wait_for_charts,
    wait_idle,
)
from tests.app.conftest import SMOKE_RUN, wait_until

pytestmark = pytest.mark.browser


def open_and_wait(page, url: str, charts: int = 0) -> None:
    """Open `url`, wait for its title, `charts` drawn charts and the end of the script run; no exception shown."""
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.goto(url)
    page.wait_for_selector("h1")
    if charts:
        wait_for_charts(page, charts)
    wait_idle(page)
    exceptions = page.locator('[data-testid="stException"]')
    assert exceptions.count() == 0, exceptions.first.inner_text()


def test_every_page_in_chromium_and_acknowledge_by_click(collector, tmp_path: Path):
    chromium_or_skip()
    shots = screenshots_dir(tmp_path)
    client = collector.client()
    with (
        streamlit_app(collector.db, [collector.root], tmp_path / "home", tmp_path / "streamlit.log") as url,
        chromium_page() as page,
    ):
        open_and_wait(page, url + "/")
        page.wait_for_selector('[data-testid="stDataFrame"]')
        assert page.get_by_text("Runs", exact=True).first.is_visible()
        screenshot_whole_page(page, shots / "1-runs.png")

        open_and_wait(page, f"{url}/run?run={SMOKE_RUN}", charts=3)
        assert page.locator("h1").first.inner_text() == SMOKE_RUN
        screenshot_whole_page(page, shots / "2-run.png")

        open_alerts = [a for a in client.get("/api/alerts", params={"state": "open"})]
        assert open_alerts, "no open alert left to acknowledge"
        first = [a for a in client.get("/api/alerts", params={"state": "all"}) if a["state"] == "open"][0]
        open_and_wait(page, url + "/alerts", charts=1 if first.get("metric") else 0)
        screenshot_whole_page(page, shots / "3-alerts.png")
        note = page.get_by_label("Note (stored with the alert)")
        note.fill("acknowledged in Chromium")
        note.press("Enter")
        wait_idle(page)
        page.get_by_role("button", name="Acknowledge").click()

        def acked() -> dict | None:
            alert = client.get(f"/api/alerts/{first['id']}")
            return alert if alert["state"] == "acked" else None

        stored = wait_until(f"alert {first['id']} is acked in the store", acked, 60)
        assert stored["note"] == "acknowledged in Chromium"
        wait_idle(page)
        screenshot_whole_page(page, shots / "4-alert-acked.png")

        open_and_wait(page, f"{url}/checkpoints?run={SMOKE_RUN}")
        page.wait_for_selector('[data-testid="stCode"]')
        screenshot_whole_page(page, shots / "5-checkpoints.png")

        open_and_wait(page, url + "/compare", charts=1)
        screenshot_whole_page(page, shots / "6-compare.png")

        open_and_wait(page, f"{url}/health?run={SMOKE_RUN}")
        screenshot_whole_page(page, shots / "7-health.png")
