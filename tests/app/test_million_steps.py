"""A 1M-step verl run in the browser: how long its run page takes to draw, and that planted trouble shows.

The metrics file is written at test time into tmp_path (verl's file-logger lines, a NaN loss and grad-norm
spikes planted at odd steps); a real collector ingests it; Chromium opens the run page. The time from
opening the page to every chart drawn is printed and written to $RUNWATCH_SCREENSHOTS/million-steps.json.
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path

import pytest

from tests.app.browser_support import (
    CHART,
    chromium_or_skip,
    chromium_page,
    screenshot_whole_page,
    screenshots_dir,
    streamlit_app,
    wait_for_charts,
)
from tests.app.conftest import start_collector, stop_process, wait_for

pytestmark = pytest.mark.browser

STEPS = 1_000_000
SPIKES = {123_457: 950.0, 456_791: 1200.0, 876_543: 1500.0}  # grad norms; the rest stay near 1
NAN_STEP = 654_321  # train/loss is NaN here
RUN = "big"


def write_million_step_run(path: Path) -> None:
    """verl file-logger lines for STEPS steps: loss decaying, grad norm near 1, warm-up then decaying lr."""
    path.parent.mkdir(parents=True)
    with open(path, "w") as out:
        for start in range(1, STEPS + 1, 50_000):
            lines = []
            for step in range(start, min(start + 50_000, STEPS + 1)):
                loss = (
                    "NaN"
                    if step == NAN_STEP
                    else repr(0.6 + 5 * math.exp(-6 * step / STEPS) + (step % 7) * 0.01)
                )
                grad = SPIKES.get(step, 1.0 + (step % 11) * 0.03)
                lr = 1e-4 * min(1.0, step / 10_000) * (1 - step / (STEPS + 1))
                lines.append(
                    f'{{"step":{step},"data":{{"train/loss":{loss},"train/grad_norm":{grad},"train/lr":{lr}}}}}\n'
                )
            out.write("".join(lines))


# Plotly keeps each drawn figure on its div (`gd.data`, `gd.layout`): read what the browser really drew.
READ_FIGURES = f"""() => Array.from(document.querySelectorAll('{CHART}')).map(gd => ({{
    title: (gd.layout.title && gd.layout.title.text) || '',
    traces: gd.data.map(t => ({{name: t.name, x: Array.from(t.x || []), y: Array.from(t.y || [])}}))
}}))"""


def test_million_step_run_page_draws_spikes_and_nan(tmp_path: Path):
    chromium_or_skip()
    root = tmp_path / "root"
    write_million_step_run(root / RUN / "metrics.jsonl")
    collector = start_collector(tmp_path / "big.duckdb", [root], tmp_path / "collector.log")
    try:
        client = collector.client()

        def ingested() -> bool:
            runs = client.get("/api/runs")
            return any(r["id"] == RUN and r.get("last_step") == STEPS for r in runs)

        wait_for(ingested, "the collector has ingested all 1M steps", 600, proc=collector.proc)
        shots = screenshots_dir(tmp_path)
        with (
            streamlit_app(collector.db, [root], tmp_path / "home", tmp_path / "streamlit.log") as url,
            chromium_page() as page,
        ):
            page.goto(url + "/")  # a first page load: the app's start-up is not part of the run page's time
            page.wait_for_selector('[data-testid="stDataFrame"]')
            started = time.monotonic()
            page.goto(f"{url}/run?run={RUN}")
            wait_for_charts(page, 3)
            seconds = time.monotonic() - started
            figures = page.evaluate(READ_FIGURES)
            screenshot_whole_page(page, shots / "million-steps-run.png")
        print(f"\n1M-step run page: charts drawn {seconds:.2f} s after opening it")
        (shots / "million-steps.json").write_text(
            json.dumps({"steps": STEPS, "charts_drawn_s": round(seconds, 3)})
        )
    finally:
        stop_process(collector.proc)

    # Streamlit's theme wraps titles in <b>; the part before <br> is the chart's name.
    by_title = {re.sub(r"<[^>]+>", "", f["title"].split("<br>")[0]): f for f in figures}
    grad = by_title["Gradient norm"]
    assert "buckets" in grad["title"]  # the chart says it shows buckets, not raw points
    drawn = [
        (x, y)
        for t in grad["traces"]
        if t["name"].startswith("train/grad_norm")
        for x, y in zip(t["x"], t["y"], strict=True)
        if y is not None
    ]
    # A bucket is drawn at its last step; each spike must be in the band of the first bucket at or after it.
    for step, value in SPIKES.items():
        bucket_value = max(y for x, y in drawn if x == min(x for x, _ in drawn if x >= step))
        assert bucket_value == pytest.approx(value), (
            f"spike at step {step} not visible (bucket max {bucket_value})"
        )
    loss = by_title["Loss"]
    nan_markers = next(t for t in loss["traces"] if t["name"] == "NaN/inf")
    assert len(nan_markers["x"]) == 1
    bucket_width = STEPS / 2000
    assert NAN_STEP <= nan_markers["x"][0] < NAN_STEP + bucket_width
