"""The dashboard in headless Chromium: every page drawn, an alert acknowledged by clicking, screenshots saved.

Screenshots go to $RUNWATCH_SCREENSHOTS (default: the test's tmp_path/screenshots).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from app.ui import parse_time
from tests.app.browser_support import (
    CHART,
    chromium_or_skip,
    chromium_page,
    screenshot_whole_page,
    screenshots_dir,
    streamlit_app,
    wait_for_charts,
    wait_idle,
    wait_stop_button,
)
from tests.app.conftest import SMOKE_RUN, remote_beside_local, start_collector, stop_process, wait_for
from tests.conftest import REPO

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
    assert page.get_by_text("Page not found").count() == 0, f"{url}: Streamlit says the page was not found"


@pytest.mark.slow  # its collector serves the verl smoke run, trained for this session
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
        # Clicking a row's selection box (the grid is a canvas: by position, 35 px rows) opens that run.
        page.set_viewport_size({"width": 1400, "height": 1000})
        grid = page.locator('[data-testid="stDataFrame"]').bounding_box()
        page.mouse.click(grid["x"] + 15, grid["y"] + 35 + 17)
        wait_for_charts(page, 1)
        # the table lists what needs a look first: open errors, then warnings, then running, then newest
        runs = client.get("/api/runs")
        first_row = max(
            runs,
            key=lambda r: (
                r["open_alerts"].get("error", 0),
                r["open_alerts"].get("warn", 0),
                r["status"] == "running",
                parse_time(r.get("updated_at") or r.get("last_point_at")) or datetime.min.replace(tzinfo=UTC),
            ),
        )
        assert page.locator("h1").first.inner_text() == first_row["id"]

        open_and_wait(page, f"{url}/run?run={SMOKE_RUN}", charts=3)
        assert page.locator("h1").first.inner_text() == SMOKE_RUN
        screenshot_whole_page(page, shots / "2-run.png")

        # the alert review is a queue of incidents: the top one (errors first, then warnings, then notices,
        # newest first) is under review; acknowledging it acknowledges its open alerts
        queue = client.get("/api/incidents", params={"state": "open"})
        assert queue, "no open incident left to acknowledge"
        alerts = {a["id"]: a for a in client.get("/api/alerts", params={"state": "all"})}
        created = {i["id"]: max(alerts[a]["created_at"] or 0 for a in i["alert_ids"]) for i in queue}
        rank = {"error": 0, "warn": 1, "info": 2}
        first = min(queue, key=lambda i: (rank[i["severity"]], -created[i["id"]], -i["last_step"], -i["id"]))
        opened = [a for a in first["alert_ids"] if alerts[a]["state"] == "open"]
        assert opened, f"incident {first['id']} is open with no open alert (its keep-firing window)"
        open_and_wait(page, url + "/alerts", charts=1 if any(first["metrics"]) else 0)
        screenshot_whole_page(page, shots / "3-alerts.png")
        note = page.get_by_label("Note (stored with each of its alerts)")
        note.fill("acknowledged in Chromium")
        note.press("Enter")
        wait_idle(page)
        page.get_by_role("button", name="Acknowledge").click()

        def acked() -> list[dict] | None:
            now = [client.get(f"/api/alerts/{a}") for a in opened]
            return now if all(a["state"] == "acked" for a in now) else None

        stored = wait_for(
            acked, f"the open alerts {opened} of incident {first['id']} are acked in the store", 60
        )
        assert {a["note"] for a in stored} == {"acknowledged in Chromium"}
        wait_idle(page)
        screenshot_whole_page(page, shots / "4-alert-acked.png")

        open_and_wait(page, f"{url}/checkpoints?run={SMOKE_RUN}")
        page.wait_for_selector('[data-testid="stCode"]')
        screenshot_whole_page(page, shots / "5-checkpoints.png")

        open_and_wait(page, url + "/compare", charts=1)
        screenshot_whole_page(page, shots / "6-compare.png")

        open_and_wait(page, f"{url}/health?run={SMOKE_RUN}")
        screenshot_whole_page(page, shots / "7-health.png")


def write_steps(path: Path, first: int, last: int) -> None:
    with open(path, "a") as out:
        for step in range(first, last + 1):
            # every metric varies: the run page says a constant one as a number instead of charting it
            out.write(
                f'{{"step":{step},"data":{{"train/loss":{3.0 - step * 0.01},'
                f'"train/grad_norm":{1.5 + (step % 3) * 0.1},"train/lr":{1e-4 * min(1.0, step / 10)}}}}}\n'
            )


LAST_LOSS_STEP = """() => {
    const gd = Array.from(document.querySelectorAll('CHART_SELECTOR'))
        .find(g => (g.layout.title && g.layout.title.text || '').includes('Loss'));
    if (!gd) return null;
    const line = gd.data.find(t => t.name === 'train/loss');
    return line && line.x.length ? line.x[line.x.length - 1] : null;
}""".replace("CHART_SELECTOR", CHART)


def test_live_run_page_appends_new_points_to_the_charts_only(tmp_path: Path):
    chromium_or_skip()
    root = tmp_path / "root"
    run_dir = root / "live"
    run_dir.mkdir(parents=True)
    write_steps(run_dir / "metrics.jsonl", 1, 20)
    now = time.time()
    status = {
        "state": "running",
        "step": 20,
        "total_steps": 200,
        "pid": os.getpid(),
        "host": socket.gethostname(),
    }
    (run_dir / "status.json").write_text(json.dumps({**status, "started_at": now, "updated_at": now}))
    collector = start_collector(tmp_path / "live.duckdb", [root], tmp_path / "collector.log")
    try:
        client = collector.client()
        wait_for(
            lambda: any(r["id"] == "live" and r["last_step"] == 20 for r in client.get("/api/runs")),
            "the collector lists the live run at step 20",
            120,
            proc=collector.proc,
        )
        assert client.get("/api/runs/live")["status"] == "running"
        with (
            streamlit_app(
                collector.db, [root], tmp_path / "home", tmp_path / "streamlit.log", refresh=1
            ) as url,
            chromium_page() as page,
        ):
            # A fresh server knows its pages only after a first session ran the app's frame (Streamlit 1.67
            # shows "Page not found" on a first visit straight to a page): open the front page first.
            open_and_wait(page, url + "/")
            open_and_wait(page, f"{url}/run?run=live", charts=3)
            assert page.evaluate(LAST_LOSS_STEP) == 20
            header = page.locator('[data-testid="stMetric"]').filter(has_text="Step").first.inner_text()
            write_steps(run_dir / "metrics.jsonl", 21, 40)
            page.wait_for_function(f"() => ({LAST_LOSS_STEP})() === 40")
            screenshot_whole_page(page, screenshots_dir(tmp_path) / "8-live-run.png")
            # The header is outside the refreshing fragment: it still shows the step it was drawn with.
            assert (
                page.locator('[data-testid="stMetric"]').filter(has_text="Step").first.inner_text() == header
            )
            assert "20" in header
    finally:
        stop_process(collector.proc)


@contextlib.contextmanager
def run_page(collector, root: Path, tmp_path: Path, run: str):
    """The dashboard over `collector`, in Chromium, on the page of `run` (its charts drawn)."""
    with (
        streamlit_app(collector.db, [root], tmp_path / "home", tmp_path / "streamlit.log") as url,
        chromium_page() as page,
    ):
        open_and_wait(page, url + "/")
        open_and_wait(page, f"{url}/run?run={run}", charts=1)
        yield page


PLAYBACK_LOSS = """() => {
    const gd = Array.from(document.querySelectorAll('CHART_SELECTOR'))
        .find(g => (g.layout.title && g.layout.title.text || '').includes('Playback: Loss'));
    if (!gd) return null;
    const line = gd.data.find(t => t.name === 'train/loss');
    const shapes = (gd.layout.shapes || []).length;
    return {points: line ? line.x.length : 0, shapes: shapes};
}""".replace("CHART_SELECTOR", CHART)


def test_playback_redraws_a_finished_run_as_it_happened(tmp_path: Path):
    chromium_or_skip()
    root = tmp_path / "root"
    run_dir = root / "done"
    run_dir.mkdir(parents=True)
    t0 = time.time() - 3600
    with open(run_dir / "metrics.jsonl", "w") as out:
        for step in range(1, 61):  # 0.1 s apart: six seconds of run, played at 1x
            loss = "NaN" if step == 40 else f"{3.0 - step * 0.01:.3f}"
            out.write(f'{{"step":{step},"wall_time":{t0 + step * 0.1:.2f},"data":{{"train/loss":{loss}}}}}\n')
    (run_dir / "status.json").write_text(json.dumps({"state": "completed", "step": 60, "total_steps": 60}))
    collector = start_collector(tmp_path / "done.duckdb", [root], tmp_path / "collector.log")
    try:
        client = collector.client()
        wait_for(
            lambda: client.get("/api/alerts", params={"run": "done", "rule": "nonfinite"}),
            "the finished run and its NaN alert",
            120,
            proc=collector.proc,
        )
        with run_page(collector, root, tmp_path, "done") as page:
            page.get_by_text("Play back this run").click()
            page.get_by_role("button", name="Play", exact=True).click()
            # Every state the chart goes through, sampled at each animation frame until all 60 points show.
            samples = page.wait_for_function(
                "() => { const s = (" + PLAYBACK_LOSS + ")(); window.__seen = window.__seen || [];"
                " if (s) window.__seen.push(s); return s && s.points === 60 ? window.__seen : null; }",
                polling="raf",
            ).json_value()
            partial = [s for s in samples if 0 < s["points"] < 60]
            assert partial, "the playback chart never showed part of the run"
            # The nonfinite alert (step 40) is drawn once its step has been played, not before.
            assert all((s["shapes"] > 0) == (s["points"] >= 40) for s in samples), samples
            page.get_by_text("Played 60 steps").wait_for()
            screenshot_whole_page(page, screenshots_dir(tmp_path) / "9-playback.png")
    finally:
        stop_process(collector.proc)


def test_a_stop_refused_on_the_spot_is_said_once_and_the_button_asks_again(tmp_path: Path):
    """A run whose stop file is a link: its page says why no stop can be written; pressing Stop anyway meets the
    API's refusal (409), said in that one line (the confirmation closed, nothing else beside it), and the
    button stays to ask again once the link is removed. Nothing is written through the link."""
    chromium_or_skip()
    root = tmp_path / "root"
    (root / "linked").mkdir(parents=True)
    (root / "linked" / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "data": {"train/loss": 1.0 / s}}) + "\n" for s in range(1, 31))
    )
    (root / "linked" / "status.json").write_text('{"state": "running"}')
    (tmp_path / "outside.txt").write_text("not a stop request")
    (root / "linked" / "runwatch.stop").symlink_to(tmp_path / "outside.txt")
    collector = start_collector(tmp_path / "linked.duckdb", [root], tmp_path / "collector.log")
    try:
        client = collector.client()
        wait_for(lambda: client.get("/api/runs/linked")["last_step"] == 30, "the run's 30 steps", 120)
        with run_page(collector, root, tmp_path, "linked") as page:
            refused = page.get_by_text("Stop refused: ", exact=False)
            refused.wait_for()
            page.get_by_role("button", name="Stop run").click()
            page.get_by_role("button", name="Yes, stop the run").click()
            page.get_by_role("button", name="Yes, stop the run").wait_for(state="detached")
            wait_idle(page)
            assert refused.count() == 1 and "runwatch.stop is a symbolic link" in refused.inner_text()
            assert page.get_by_text("Asked the run", exact=False).count() == 0
            wait_stop_button(page, disabled=False)
            screenshot_whole_page(page, screenshots_dir(tmp_path) / "run-stop-refused.png")
        assert (tmp_path / "outside.txt").read_text() == "not a stop request"
    finally:
        stop_process(collector.proc)


@pytest.mark.slow  # a real verl run on CPU, stopped from the run page
def test_stop_button_stops_a_live_run(tmp_path: Path):
    chromium_or_skip()
    root = tmp_path / "root"
    root.mkdir()
    collector = start_collector(tmp_path / "live.duckdb", [root], tmp_path / "collector.log")
    trainer = subprocess.Popen(
        [sys.executable, "-m", "trainer.launch", "--preset", "healthy", "--out", str(root / "live")],
        cwd=REPO,
        stdout=open(tmp_path / "trainer.log", "wb"),  # noqa: SIM115 - closed with the process
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        client = collector.client()
        wait_for(
            lambda: any(
                r["id"] == "live" and r["status"] == "running" and (r["last_step"] or 0) >= 2
                for r in client.get("/api/runs")
            ),
            "the live run running past step 2",
            300,
            proc=collector.proc,
        )
        with run_page(collector, root, tmp_path, "live") as page:
            page.get_by_role("button", name="Stop run").click()
            page.get_by_role("button", name="Yes, stop the run").click()
            page.get_by_text("by person (stopped from the dashboard); written:", exact=False).wait_for()
            # the confirmation closed, the one line says the stop, and the button waits on it (it stands)
            page.get_by_role("button", name="Yes, stop the run").wait_for(state="detached")
            # (gone instead once the page was drawn after the trainer stopped: a stopped run offers no stop)
            wait_stop_button(page, disabled=True, or_gone=True)
            wait_idle(page)
            screenshot_whole_page(page, screenshots_dir(tmp_path) / "run-stop-written.png")
            assert trainer.wait(timeout=300) == 0, (tmp_path / "trainer.log").read_text()[-3000:]
        status = json.loads((root / "live" / "status.json").read_text())
        assert status["state"] == "stopped" and status["stop_reason"] == "stopped from the dashboard"
        assert status["step"] < 200 and status["last_checkpoint_step"] == status["step"]
        request = json.loads((root / "live" / "runwatch.stop").read_text())
        assert request["by"] == "person" and request["alert_id"] is None
        wait_for(lambda: client.get("/api/runs/live")["status"] == "stopped", "the stopped status", 60)
    finally:
        stop_process(trainer)
        stop_process(collector.proc)


def test_a_remote_run_beside_a_local_one_live_then_its_host_down(tmp_path: Path, monkeypatch):
    """A run on another machine (a real sshd on 127.0.0.1) and a local one in one dashboard: the remote
    run's chart follows its file, and when its host goes away the sidebar says so."""
    chromium_or_skip()
    now = time.time()
    status = {"state": "running", "step": 20, "total_steps": 200, "started_at": now, "updated_at": now}
    # The run page polls a running run: status.json says running.
    with remote_beside_local(
        tmp_path, monkeypatch, write_steps, (20, 5), tmp_path / "two.duckdb", remote_status=status
    ) as (server, url_root, remote, collector):
        client = collector.client()
        local = tmp_path / "laptop"
        with (
            streamlit_app(
                collector.db, [url_root, local], tmp_path / "home", tmp_path / "streamlit.log", refresh=1
            ) as url,
            chromium_page() as page,
        ):
            open_and_wait(page, url + "/")
            sidebar = page.locator('[data-testid="stSidebar"]')
            assert f"{url_root} (connected)" in sidebar.inner_text()
            open_and_wait(page, f"{url}/run?run=gpu-run", charts=3)
            assert page.evaluate(LAST_LOSS_STEP) == 20
            write_steps(remote / "gpu-run" / "metrics.jsonl", 21, 40)
            page.wait_for_function(f"() => ({LAST_LOSS_STEP})() === 40")
            screenshot_whole_page(page, screenshots_dir(tmp_path) / "11-remote-run.png")

            server.stop()
            wait_for(
                lambda: any(s["state"] == "disconnected" for s in client.get("/api/health")["root_states"]),
                "the remote root shown disconnected",
                60,
            )
            open_and_wait(page, url + "/")
            page.get_by_text(f"{url_root} is disconnected", exact=False).first.wait_for()
            assert f"{url_root} (disconnected)" in sidebar.inner_text()
            screenshot_whole_page(page, screenshots_dir(tmp_path) / "12-remote-down.png")
