"""The overview and the addresses people type, in Chromium: `/runs` and other natural paths lead to their page,
the compare page's legend sits under its plot, and an RL run's loss columns say what it is judged by."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

from playwright.sync_api import TimeoutError as PlaywrightTimeout

from app.chart_code import plotly_file
from app.name_hover import ROW_PX
from collector.api.models import RL_JUDGED, RunSummary
from tests.app.browser_support import (
    chromium_or_skip,
    chromium_page,
    open_page,
    screenshot_whole_page,
    screenshots_dir,
    streamlit_app,
    wait_idle,
)
from tests.app.conftest import real_run_ids, start_collector, stop_process, write_rl_and_sft_runs
from tests.waiting import wait_for


def test_natural_addresses_lead_to_their_pages(app_env, tmp_path: Path):
    chromium_or_skip()
    shots = screenshots_dir(tmp_path)
    runs = real_run_ids()
    with (
        streamlit_app(app_env.db, [app_env.root], tmp_path / "home", tmp_path / "st.log") as url,
        chromium_page() as page,
    ):
        assert open_page(page, url + "/") == "Runs"
        assert open_page(page, url + "/runs") == "Runs"
        page.wait_for_selector('[data-testid="stDataFrame"]')  # the overview's table, drawn
        screenshot_whole_page(page, shots / "overview.png")
        for path, title in (("/overview", "Runs"), ("/incidents", "Alerts"), ("/checkpoint", "Checkpoints")):
            assert title in open_page(page, url + path), path
        assert open_page(page, f"{url}/run?run={quote(runs[0])}", charts=1) == runs[0]
        # ten runs compared: the legend under the plot, one line each, the plot keeps its height
        chosen = ",".join(quote(r, safe="") for r in runs[:10])
        assert open_page(page, f"{url}/compare?runs={chosen}", charts=1) == "Compare runs"
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
        assert open_page(page, url + "/") == "Runs"
        assert page.locator(".js-plotly-plot").count() == 0
        page.wait_for_function(
            "name => performance.getEntriesByType('resource').some(e => e.name.endsWith('/' + name))",
            arg=name,
        )
        runs = real_run_ids()
        assert open_page(page, f"{url}/run?run={quote(runs[0])}", charts=1) == runs[0]


LONG_NAMES = [
    f"sweep-2026-11-26/an-extremely-long-experiment-name-lr-1e-4-batch-64-warmup-200-seed-{n}" for n in (1, 2)
]


def test_hovering_a_shortened_name_shows_it_in_full(tmp_path: Path):
    """The overview shortens long names in the middle; hovering one shows all of it in a box under its row
    (app/name_hover.py). Sorted by name: short-run, then the two long ones, which differ only at their ends."""
    chromium_or_skip()
    root = tmp_path / "root"
    for name in ["short-run", *LONG_NAMES]:
        (root / name).mkdir(parents=True)
        lines = (json.dumps({"step": s, "data": {"train/loss": 1.0 / s}}) for s in range(1, 20))
        (root / name / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    collector = start_collector(tmp_path / "hover.duckdb", [root], tmp_path / "collector.log")
    try:
        client = collector.client()
        wait_for(
            lambda: len(client.get("/api/runs")) == 3 or None, "the three runs listed", proc=collector.proc
        )
        with (
            streamlit_app(collector.db, [root], tmp_path / "home", tmp_path / "st.log") as url,
            chromium_page() as page,
        ):
            assert open_page(page, url + "/") == "Runs"
            page.locator('[data-testid="stSelectbox"]').filter(has_text="Sort by").click()
            page.get_by_role("option", name="Name", exact=True).click()
            # sorted: the table's first row (its accessible copy, which the box reads too) is short-run
            page.wait_for_function(
                """() => { const cell = document.querySelector('.st-key-runs_table tr[aria-rowindex="2"] td');
                           return cell && cell.textContent === 'short-run'; }"""
            )
            wait_idle(page)
            canvas = page.locator('.st-key-runs_table canvas[data-testid="data-grid-canvas"]')
            box = page.locator('[data-testid="runwatchFullName"]')

            def hover(row: int, x: float = 120) -> str | None:
                """The box's text once the pointer rests over `row` (-1: the header), or None for no box."""
                at = canvas.bounding_box()
                page.mouse.move(at["x"] + x, at["y"] + ROW_PX * (row + 1) + ROW_PX / 2, steps=4)
                try:
                    box.wait_for(state="visible", timeout=3000)
                except PlaywrightTimeout:
                    return None
                return box.inner_text()

            assert hover(0) is None  # short-run: shown whole, no box
            assert hover(2) == LONG_NAMES[1]
            screenshot_whole_page(page, screenshots_dir(tmp_path) / "overview-hover.png")
            assert hover(1) == LONG_NAMES[0]
            assert hover(1, x=600) is None  # over the status column, not the name
            assert hover(-1) is None  # the header
    finally:
        stop_process(collector.proc)


def test_an_rl_runs_reward_and_validation_score_show_in_the_loss_columns(tmp_path: Path):
    """What a person sees in the overview for an RL run (no loss logged): its reward and validation score in the
    loss columns, marked `r:`/`s:` as `collector runs` marks them, and the legend under the table; the SFT run
    beside it shows its losses. (Its loss columns read "—" before.)"""
    chromium_or_skip()
    root = tmp_path / "root"
    write_rl_and_sft_runs(root)
    collector = start_collector(tmp_path / "rl.duckdb", [root], tmp_path / "collector.log")
    try:
        client = collector.client()

        def read_to_their_ends() -> dict[str, RunSummary]:
            found = {r.id: r for r in client.get("/api/runs", model=list[RunSummary])}
            if any(found[k].last_step != 20 for k in ("grpo", "sft")):
                raise LookupError("not read to step 20 yet")
            return found

        runs = wait_for(read_to_their_ends, "both runs read to step 20", proc=collector.proc)
        rl, sft = runs["grpo"], runs["sft"]
        with (
            streamlit_app(collector.db, [root], tmp_path / "home", tmp_path / "st.log") as url,
            chromium_page() as page,
        ):
            assert open_page(page, url + "/") == "Runs"
            page.wait_for_selector(".st-key-runs_table tr td", state="attached")  # (drawn offscreen)
            # the table's accessible copy: the text the canvas draws, row by row
            cells = page.evaluate(
                """() => [...document.querySelectorAll('.st-key-runs_table tr')]
                    .map(tr => [...tr.querySelectorAll('td')].map(td => td.textContent))"""
            )
            rows = {next(c for c in row if c in runs): row for row in cells if set(row) & set(runs)}
            assert f"r:{rl.reward:.4g}" in rows["grpo"] and f"s:{rl.val_score:.4g}" in rows["grpo"], rows
            assert f"{sft.train_loss:.4g}" in rows["sft"] and f"{sft.val_loss:.4g}" in rows["sft"], rows
            assert not [c for c in rows["sft"] if c.startswith(("r:", "s:"))], rows
            assert page.get_by_text(RL_JUDGED, exact=True).is_visible()
            screenshot_whole_page(page, screenshots_dir(tmp_path) / "overview-rl.png")
    finally:
        stop_process(collector.proc)
