"""Zooming a chart of a long run asks the API for the visible steps at full resolution: a real collector, a
real Streamlit app and Chromium; the zoom is a mouse drag on the chart, as a user does it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.app.browser_support import (
    CHART,
    chromium_or_skip,
    chromium_page,
    streamlit_app,
    wait_for_charts,
    wait_idle,
)
from tests.app.conftest import start_collector, stop_process, wait_for

pytestmark = pytest.mark.browser

STEPS = 20_000  # 10 raw points per bucket at the run page's 2,000 buckets
SPIKE = 8_765  # one grad-norm spike: inside the window the drag selects

DRAWN = f"""() => Array.from(document.querySelectorAll('{CHART}')).map(gd => ({{
    title: (gd.layout.title && gd.layout.title.text) || '',
    range: gd.layout.xaxis.range,
    x: Array.from(gd.data[0].x || []), y: Array.from(gd.data[0].y || [])
}}))"""

PLOT_BOX = f"""() => {{
  const gd = document.querySelector('{CHART}');
  gd.scrollIntoView({{block: 'center'}});  // the mouse can only drag what is in the window
  const r = gd.querySelector('.nsewdrag').getBoundingClientRect();
  return {{x: r.x, y: r.y, width: r.width, height: r.height}};
}}"""


def test_a_drag_zoom_refetches_the_window_at_full_resolution_and_a_double_click_resets(tmp_path: Path):
    chromium_or_skip()
    root = tmp_path / "root"
    (root / "long").mkdir(parents=True)
    with open(root / "long" / "metrics.jsonl", "w") as out:
        for step in range(1, STEPS + 1):
            grad = 500.0 if step == SPIKE else 1.0 + (step % 11) * 0.03
            out.write(
                json.dumps({"step": step, "data": {"train/loss": 1 + 1 / step, "train/grad_norm": grad}})
                + "\n"
            )
    collector = start_collector(tmp_path / "z.duckdb", [root], tmp_path / "collector.log")
    try:
        client = collector.client()
        wait_for(
            lambda: any(r["id"] == "long" and r.get("last_step") == STEPS for r in client.get("/api/runs")),
            "every step stored",
            300,
            proc=collector.proc,
        )
        with (
            streamlit_app(collector.db, [root], tmp_path / "home", tmp_path / "streamlit.log") as url,
            chromium_page() as page,
        ):
            page.goto(url + "/")
            page.wait_for_selector('[data-testid="stDataFrame"]')
            page.goto(f"{url}/run?run=long")
            wait_for_charts(page, 2)
            if page.locator('[data-testid="stDialog"]').count():  # Streamlit's "page not found" notice
                page.keyboard.press("Escape")
                page.wait_for_selector('[data-testid="stDialog"]', state="detached")
            whole = page.evaluate(DRAWN)
            assert all(len(f["x"]) == 2000 for f in whole)  # buckets of 10 steps over the whole run

            box = page.evaluate(PLOT_BOX)
            y = box["y"] + box["height"] / 2
            page.mouse.move(box["x"] + box["width"] * 0.40, y)
            page.mouse.down()
            page.mouse.move(box["x"] + box["width"] * 0.47, y, steps=8)
            page.mouse.up()
            page.wait_for_selector("text=Zoomed to steps")
            wait_for_charts(page, 2)
            zoomed = page.evaluate(DRAWN)
            for figure in zoomed:
                low, high = figure["range"]
                assert high - low < STEPS * 0.2  # every chart shows the window the drag chose
                inside = [x for x in figure["x"] if low <= x <= high]
                # raw points now: every step of the window, where the whole view had one bucket per 10 steps
                assert inside == list(range(inside[0], inside[-1] + 1)) and len(inside) > 500
            grad = next((f for f in zoomed if "Gradient norm" in f["title"]), None)
            assert grad is not None, [f["title"] for f in zoomed]
            assert dict(zip(grad["x"], grad["y"], strict=True))[SPIKE] == 500.0

            # plotly's reset; a double-click that lands while Streamlit re-mounts the chart is lost (seen once
            # in a fresh-clone run), so, as a user would, double-click again until the zoom caption goes.
            for attempt in range(3):
                wait_idle(page)
                box = page.evaluate(PLOT_BOX)  # the caption above the charts moved them
                page.mouse.dblclick(box["x"] + box["width"] * 0.5, box["y"] + box["height"] / 2)
                try:
                    page.wait_for_selector("text=Zoomed to steps", state="detached", timeout=20_000)
                    break
                except PlaywrightTimeout:
                    if attempt == 2:
                        raise
            wait_for_charts(page, 2)
            assert all(len(f["x"]) == 2000 for f in page.evaluate(DRAWN))
    finally:
        stop_process(collector.proc)
