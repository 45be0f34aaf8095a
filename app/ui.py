"""What every page shares: settings, the API handle, the chosen run, and formatting for people."""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime
from pathlib import Path

import streamlit as st

from app import door
from app.api import DashboardApi
from app.connection import CollectorUnavailable, Connection, connect, log_path
from app.settings import Settings, SettingsError, read_settings
from collector.api.client import ApiError, Client
from collector.api.models import OpenAlerts, ProblemCounts
from collector.core.runtime import read_token

RUN_KEY = "run"
PENDING_RUN_KEY = "pending_run"  # set by a page to choose the run shown after switching pages
READ_ONLY_KEY = "read_only_why"  # set by the frame each run: why this team API takes no stops, acks, resolves
READ_ONLY_WHY = (
    "this team API's Postgres role may only read the lake, so it refuses stops, acks and resolves "
    "(a team API with a writing role takes them)"
)
SEVERITIES = ("error", "warn", "info")
# Where a run's config comes from: every file of the run that records some, merged (collector.formats' run_info).
CONFIG_SOURCES = "run.json, a Trainer's trainer_state.json, the settings verl printed, MLflow params and tags"
# Material icons: Streamlit ships their font, while emoji need a system font a headless machine may lack.
STATUS_ICONS = {
    "running": ":material/play_circle:",
    "completed": ":material/check_circle:",
    "failed": ":material/error:",
    "stopped": ":material/stop_circle:",
    "stalled": ":material/pause_circle:",
}


def guard_door() -> None:
    """Stop the page for a foreign `Host` header, and ask for the password when the dashboard is not on loopback.

    Runs before any call to the collector, so a refused visitor gets no data at all (see `app.door`).
    """
    bind = st.get_option("server.address")
    refusal = door.host_refusal(st.context.headers.get("Host"), bind, door.environment())
    if refusal:
        st.error(refusal)
        st.stop()
    if door.is_loopback(bind) or st.session_state.get("_door_open"):
        return
    expected = door.expected_password(door.environment(), read_token(settings().db))
    st.info(
        f"This dashboard listens on {bind or 'every interface'}, so it asks for a password: "
        f"{door.PASSWORD_ENV} if its owner set one, else the token in the file `DB.token`."
    )
    given = st.text_input("Password", type="password")
    if given and door.password_matches(given, expected):
        st.session_state["_door_open"] = True
        st.rerun()
    if given:
        st.error("That is not the password.")
    st.stop()


def settings() -> Settings:
    """The dashboard's settings, or a stop with an error box that names the bad setting."""
    try:
        return read_settings(sys.argv[1:], os.environ, Path.cwd())
    except SettingsError as err:
        st.error(f"runwatch cannot use its settings: {err}")
        st.stop()


@st.cache_resource(show_spinner="Connecting to the collector...")
def _connection(db: str, roots: tuple[str, ...], may_start: bool = True) -> Connection:
    return connect(Path(db), tuple(r if r.startswith("ssh://") else Path(r) for r in roots), may_start)


@st.cache_resource(show_spinner=False)
def _client(db: str, pid: int) -> Client | None:
    # One keep-alive HTTP client per collector process, shared by every session of the dashboard.
    return Client.for_db(Path(db))


def forget_collector() -> None:
    """Drop the cached connection, so the next run finds (or starts) the collector again."""
    _connection.clear()
    _client.clear()


def api() -> DashboardApi:
    """The API of the collector for the configured database (started when none runs), or a stop with why."""
    conf = settings()
    try:
        conn = _connection(str(conf.db), tuple(str(r) for r in conf.roots), conf.may_start)
        client = _client(str(conf.db), conn.info["pid"])
        if client is None:  # the collector we knew has exited: find or start another
            forget_collector()
            conn = _connection(str(conf.db), tuple(str(r) for r in conf.roots), conf.may_start)
            client = _client(str(conf.db), conn.info["pid"])
    except (CollectorUnavailable, ApiError) as err:
        st.error(f"No collector for {conf.db}: {err}")
        st.stop()
    if client is None:
        st.error(f"The collector for {conf.db} exited just after it started; see {log_path(conf.db)}")
        st.stop()
    if conn.started_here and not st.session_state.get("_told_started"):
        st.session_state["_told_started"] = True
        st.toast(f"Started a collector for {conf.db} (pid {conn.info.get('pid')}, log {conn.log})")
    return DashboardApi(client)


def connection() -> Connection:
    conf = settings()
    return _connection(str(conf.db), tuple(str(r) for r in conf.roots), conf.may_start)


def answering() -> str:
    """Who answers this dashboard, in the user's words: a team's API (`serve --store` without roots) or the
    collector of its database."""
    return "The team API" if connection().info.get("lake") else "The collector"


def read_only_why() -> str | None:
    """Why stops, acks and resolves are refused here (a read-only team API), else None: their buttons are
    disabled with this said, instead of a 403 after a click."""
    return st.session_state.get(READ_ONLY_KEY)


def selected_run() -> str | None:
    """The run chosen in the sidebar (shared by the run, checkpoint and health pages)."""
    return st.session_state.get(RUN_KEY)


def require_run() -> str:
    """The chosen run; without one (no runs yet), say so and stop the page here."""
    run = selected_run()
    if run is None:
        st.info("No runs yet: nothing to show.")
        st.stop()
    return run


def open_run(run: str, page: str = "screens/run_charts.py") -> None:
    """Show `run` on `page` (switching pages reruns the app; the sidebar picks the run up first)."""
    st.session_state[PENDING_RUN_KEY] = run
    st.switch_page(page)


def human_bytes(n: float | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def parse_time(value: str | float | None) -> datetime | None:
    """An API timestamp (ISO text or epoch seconds) as an aware datetime, or None."""
    if value is None or value == "":
        return None
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC)
    try:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def fmt_number(value: float | None, digits: int = 4) -> str:
    if value is None:
        return "–"
    if isinstance(value, float) and value != value:
        return "NaN"
    return f"{value:.{digits}g}"


def alert_counts_text(counts: OpenAlerts, none: str = "none", cleared_open: int = 0) -> str:
    """A run's open alerts as `2 error, 1 warn` (`none` when none is open and no incident is), then its
    incidents still open though their alerts cleared (`cleared_open`): `1 incident cleared, still open`."""
    parts = [f"{n} {s}" for s, n in counts.by_severity() if n]
    if cleared_open:
        parts.append(f"{cleared_open} incident{'s' if cleared_open > 1 else ''} cleared, still open")
    return ", ".join(parts) if parts else none


def fmt_time(value: str | float | None) -> str:
    """An API timestamp as `YYYY-MM-DD HH:MM:SS UTC` (`?` when there is none)."""
    when = parse_time(value)
    return when.strftime("%Y-%m-%d %H:%M:%S UTC") if when else "?"


def problem_files_note(counts: ProblemCounts) -> None:
    """The sidebar's word on files not read in full, over all runs (the counts `/api/health` gives)."""
    if counts.failing:
        st.warning(
            f"{counts.failing} file(s) could not be read; the collector retries them. Each run's page "
            "names its files and why (or `python -m collector files`).",
            icon=":material/error:",
        )
    worded = (
        (counts.not_read, "not read"),
        (counts.deleted, "deleted"),
        (counts.bad_lines, "with quarantined lines"),
        (counts.no_points, "read without a point"),
    )
    other = [f"{n} {words}" for n, words in worded if n]
    if other:
        st.caption(f"Files: {', '.join(other)} (each run's page lists them)")
