"""The dashboard on a team's API, in headless Chromium: the real Streamlit app started with `--db` of a real
team reader (`serve --store` without roots), started before any collector (the overview says none has published
yet), over a lake two real collectors then write. The overview lists both
collectors' runs, each opens its run page with its charts drawn, and an incident acknowledged by click is
applied by the collector that owns the run, as is a stop asked on a run page. On a read-only team API the
run page's Stop and the review's Acknowledge and Resolve are disabled, saying why."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.app.browser_support import (
    chromium_or_skip,
    chromium_page,
    open_page,
    screenshot_whole_page,
    screenshots_dir,
    streamlit_app,
    wait_for_charts,
    wait_idle,
    wait_stop_button,
)
from tests.collector.test_daemon_support import REPO, wait_for
from tests.collector.test_team import TEAM_PYTHON, TeamDaemon, exactly, lake_args, write_steps
from tests.collector.test_team_access import as_role, lake_with_roles
from tests.pg_support import PgServer, team_cluster

pytestmark = pytest.mark.browser
LAUNCH = [sys.executable, "-m", "app", "--port", "{port}"]  # as the README says: `python -m app -- --db ...`


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    yield from team_cluster(TEAM_PYTHON)


def test_the_dashboard_on_a_team_reader_shows_every_collectors_runs(pg, tmp_path: Path):
    chromium_or_skip()
    shots = screenshots_dir(tmp_path)
    dsn, data = pg.new_database("dash"), tmp_path / "lake"
    write_steps(tmp_path / "alice" / "exp" / "sft" / "metrics.jsonl", 1, 300)
    (tmp_path / "alice" / "exp" / "sft" / "status.json").write_text('{"state": "running"}')
    bob_metrics = tmp_path / "bob" / "exp" / "rl" / "metrics.jsonl"
    write_steps(bob_metrics, 1, 200)
    with bob_metrics.open("a") as f:
        f.write('{"step": 201, "data": {"train/loss": NaN, "train/lr": 0.0002}}\n')
    # bob's run is live, and its stop file a link: bob refuses a stop through it (never written through a link)
    (tmp_path / "bob" / "exp" / "rl" / "status.json").write_text('{"state": "running"}')
    (tmp_path / "outside.txt").write_text("not a stop request")
    (tmp_path / "bob" / "exp" / "rl" / "runwatch.stop").symlink_to(tmp_path / "outside.txt")
    alice = TeamDaemon(tmp_path / "alice.duckdb", [tmp_path / "alice"], *lake_args(dsn, data, "alice"))
    bob = TeamDaemon(tmp_path / "bob.duckdb", [tmp_path / "bob"], *lake_args(dsn, data, "bob"))
    reader = TeamDaemon(tmp_path / "team.duckdb", [], *lake_args(dsn, data))
    try:
        reader.start()  # before any collector, as a team often starts its dashboard
        client = reader.client()
        with (
            streamlit_app(reader.db, [], tmp_path / "home", tmp_path / "streamlit.log", launch=LAUNCH) as url,
            chromium_page() as page,
        ):
            assert open_page(page, url + "/") == "Runs"
            page.get_by_text("no collector has published into this team lake", exact=False).wait_for()
            screenshot_whole_page(page, shots / "team-overview-no-collector.png")
            alice.start()
            bob.start()
            wait_for(lambda: exactly(client, "alice/exp/sft", 300), "alice's steps in the lake")
            incident = wait_for(
                lambda: client.get("/api/incidents", {"state": "open"})[0], "bob's NaN incident"
            )
            assert open_page(page, url + "/") == "Runs"  # the same dashboard and team API, no restart
            page.wait_for_selector('[data-testid="stDataFrame"]')
            assert page.get_by_text("Team lake", exact=False).count() >= 1  # the sidebar names the lake
            assert page.get_by_text("does not watch", exact=False).count() == 0  # no roots warning
            screenshot_whole_page(page, shots / "team-overview.png")
            # The grid is a canvas: each row (35 px) opened by its selection box; both collectors' runs are there.
            opened = set()
            for row in (1, 2):
                open_page(page, url + "/")
                page.set_viewport_size({"width": 1400, "height": 1000})
                grid = page.locator('[data-testid="stDataFrame"]').bounding_box()
                page.mouse.click(grid["x"] + 15, grid["y"] + 35 * row + 17)
                wait_for_charts(page, 1)
                opened.add(page.locator("h1").first.inner_text())
            assert opened == {"alice/exp/sft", "bob/exp/rl"}
            assert open_page(page, f"{url}/run?run=alice/exp/sft", charts=1) == "alice/exp/sft"
            screenshot_whole_page(page, shots / "team-run.png")
            # A stop asked on the run page is asked of alice, who writes the stop file at her next batch: the
            # confirmation closes and one line says the stop, asked then written (the page asks again).
            page.get_by_role("button", name="Stop run").click()
            page.get_by_role("button", name="Yes, stop the run").click()
            stop_file = tmp_path / "alice" / "exp" / "sft" / "runwatch.stop"
            wait_for(stop_file.exists, "alice writing the stop file asked on the dashboard")
            page.get_by_text("written by collector alice", exact=False).wait_for(timeout=60_000)
            assert page.get_by_text("by person (stopped from the dashboard)", exact=False).count() == 1
            # (the confirmation goes once the page is drawn again)
            page.get_by_role("button", name="Yes, stop the run").wait_for(state="detached")
            assert page.get_by_text("Asked the collector", exact=False).count() == 0
            wait_stop_button(page, disabled=True)  # the stop stands
            wait_idle(page)
            screenshot_whole_page(page, shots / "team-run-stop-written.png")
            # bob refuses a stop through its link, and the page says why in the owner's words, once.
            assert open_page(page, f"{url}/run?run=bob/exp/rl", charts=1) == "bob/exp/rl"
            page.get_by_role("button", name="Stop run").click()
            page.get_by_role("button", name="Yes, stop the run").click()
            page.get_by_text("refused by collector bob", exact=False).wait_for(timeout=60_000)
            assert page.get_by_text("runwatch.stop is a symbolic link", exact=False).count() == 1
            # (the confirmation goes once the page is drawn again)
            page.get_by_role("button", name="Yes, stop the run").wait_for(state="detached")
            assert page.get_by_text("Asked the collector", exact=False).count() == 0
            wait_stop_button(page, disabled=False)  # it asks again
            wait_idle(page)
            screenshot_whole_page(page, shots / "team-run-stop-refused.png")
            assert (tmp_path / "outside.txt").read_text() == "not a stop request"
            # The alert review acknowledges bob's incident on the team page: bob applies it, the lake shows it.
            open_page(page, url + "/alerts")
            page.get_by_role("button", name="Acknowledge").wait_for()
            wait_idle(page)
            screenshot_whole_page(page, shots / "team-alerts.png")
            page.get_by_role("button", name="Acknowledge").click()
            page.get_by_text("Asked the collector that owns the run", exact=False).first.wait_for()
            # The same page follows it, asked then applied, with no reload (it asks again while pending).
            page.get_by_text("applied by collector bob", exact=False).wait_for(timeout=60_000)
            assert page.get_by_text("Acknowledge asked", exact=False).count() == 1
            assert page.get_by_text("not yet applied", exact=False).count() == 0
            for alert_id in incident["alert_ids"]:
                wait_for(
                    lambda a=alert_id: client.get(f"/api/alerts/{a}")["state"] == "acked",
                    f"alert {alert_id} acked by bob through the lake",
                )
            # The review says what became of it (the incident is acked now: shown under the state filter "all").
            open_page(page, url + "/alerts")
            page.locator('[data-testid="stSelectbox"]').filter(has_text="State").click()
            page.get_by_role("option", name="all", exact=True).click()
            page.get_by_text("applied by collector bob", exact=False).wait_for(timeout=60_000)
            assert page.get_by_text("Acknowledge asked", exact=False).count() == 1
            wait_idle(page)
            screenshot_whole_page(page, shots / "team-alerts-ack-applied.png")
            # A stop asked while bob is down waits in the lake: the run page says it is not yet written, and the
            # button waits on it (asking again would change nothing).
            bob.ensure_stopped()
            assert open_page(page, f"{url}/run?run=bob/exp/rl", charts=1) == "bob/exp/rl"
            page.get_by_role("button", name="Stop run").click()
            page.get_by_role("button", name="Yes, stop the run").click()
            page.get_by_text(
                "(stopped from the dashboard); not yet written: collector bob", exact=False
            ).wait_for()
            assert page.get_by_text("refused by collector bob", exact=False).count() == 0
            wait_stop_button(page, disabled=True)
            wait_idle(page)
            screenshot_whole_page(page, shots / "team-run-stop-waiting.png")
        assert reader.proc.poll() is None, "stopping the dashboard stopped the team API it did not start"
    finally:
        for d in (alice, bob, reader):
            d.ensure_stopped()


def test_a_read_only_team_api_offers_no_stop_ack_or_resolve_and_says_why(pg, tmp_path: Path):
    chromium_or_skip()
    shots = screenshots_dir(tmp_path)
    dsn, data = lake_with_roles(pg, "viewing"), tmp_path / "lake"
    metrics = tmp_path / "alice" / "exp" / "sft" / "metrics.jsonl"
    write_steps(metrics, 1, 100)
    with metrics.open("a") as f:
        f.write('{"step": 101, "data": {"train/loss": NaN, "train/lr": 0.0001}}\n')
    (tmp_path / "alice" / "exp" / "sft" / "status.json").write_text('{"state": "running"}')
    root = tmp_path / "alice"
    alice = TeamDaemon(tmp_path / "alice.duckdb", [root], *lake_args(as_role(dsn, "alice"), data, "alice"))
    viewer = TeamDaemon(tmp_path / "viewer.duckdb", [], *lake_args(as_role(dsn, "viewer"), data))
    try:
        alice.start()
        viewer.start()
        client = viewer.client()
        wait_for(lambda: client.get("/api/incidents", {"state": "open"}), "alice's NaN incident in the lake")
        with (
            streamlit_app(viewer.db, [], tmp_path / "home", tmp_path / "streamlit.log", launch=LAUNCH) as url,
            chromium_page() as page,
        ):
            assert open_page(page, f"{url}/run?run=alice/exp/sft", charts=1) == "alice/exp/sft"
            stop = page.get_by_role("button", name="Stop run")
            stop.wait_for()
            assert stop.is_disabled()
            said = "Stopping is not offered here: this team API's Postgres role may only read the lake"
            page.get_by_text(said, exact=False).wait_for()
            screenshot_whole_page(page, shots / "team-read-only-run.png")
            open_page(page, url + "/alerts")
            page.get_by_role("button", name="Acknowledge").wait_for()
            wait_idle(page)
            assert page.get_by_role("button", name="Acknowledge").is_disabled()
            assert page.get_by_role("button", name="Resolve").is_disabled()
            assert page.get_by_text("Acknowledge and Resolve are not offered here", exact=False).count() == 1
            screenshot_whole_page(page, shots / "team-read-only-alerts.png")
            assert page.get_by_text("could not answer", exact=False).count() == 0
        assert not (root / "exp" / "sft" / "runwatch.stop").exists()
    finally:
        for d in (alice, viewer):
            d.ensure_stopped()


def test_an_error_of_a_team_api_is_the_team_apis_not_the_collectors(pg, tmp_path: Path, monkeypatch):
    """With the lake's Postgres gone, the dashboard on a team API says the team API did not answer (it said
    "The collector", which on a team reader is no process of the user's)."""
    dsn, data = pg.new_database("gone"), tmp_path / "lake"
    write_steps(tmp_path / "alice" / "exp" / "sft" / "metrics.jsonl", 1, 20)
    alice = TeamDaemon(tmp_path / "alice.duckdb", [tmp_path / "alice"], *lake_args(dsn, data, "alice"))
    reader = TeamDaemon(tmp_path / "team.duckdb", [], *lake_args(dsn, data))
    monkeypatch.setenv("RUNWATCH_DB", str(reader.db))
    monkeypatch.delenv("RUNWATCH_ROOTS", raising=False)
    try:
        alice.start()
        reader.start()
        wait_for(lambda: exactly(reader.client(), "alice/exp/sft", 20), "alice's steps in the lake")
        alice.ensure_stopped()
        at = AppTest.from_file(str(REPO / "app" / "streamlit_app.py"), default_timeout=120).run()
        assert not at.exception and not at.error, [e.value for e in at.error]
        pg.stop()
        at.run()
        said = " ".join(e.value for e in at.error)
        assert "The team API did not answer the list of runs" in said and "503" in said, said
        assert "The collector" not in said, said
    finally:
        for d in (alice, reader):
            d.ensure_stopped()
        if not pg.running():
            pg.start()


def test_a_team_api_gone_under_the_dashboard_is_said_not_raised(pg, tmp_path: Path, monkeypatch):
    """The team API stopped while a dashboard (given its --db alone) shows it: the page says the team API did
    not answer. The wording asked who answers after the connection was dropped, which looked for one again:
    none runs and the dashboard may start none for a --db alone, so the page raised instead."""
    dsn, data = pg.new_database("apigone"), tmp_path / "lake"
    reader = TeamDaemon(tmp_path / "team.duckdb", [], *lake_args(dsn, data))
    monkeypatch.setenv("RUNWATCH_DB", str(reader.db))
    monkeypatch.delenv("RUNWATCH_ROOTS", raising=False)
    try:
        reader.start()
        at = AppTest.from_file(str(REPO / "app" / "streamlit_app.py"), default_timeout=120).run()
        assert not at.exception and not at.error, [e.value for e in at.error]
        assert reader.stop() == 0
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        said = " ".join(e.value for e in at.error)
        assert "The team API did not answer the list of runs" in said, said
    finally:
        reader.ensure_stopped()
