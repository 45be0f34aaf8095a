"""runwatch dashboard: `python -m app [-- --db DB --root ROOT --refresh S]` or `streamlit run app [-- ...]`.

The frame around every page: settings, the collector connection (started when none runs), the run chosen
in the sidebar, and the page navigation. The pages draw what the collector's HTTP API returns.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Streamlit puts app/ on sys.path, not the repository root that holds the `app` and `collector` packages.
_REPO = str(Path(__file__).resolve().parents[1])
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)

import streamlit as st  # noqa: E402

from app import chart_code, ui  # noqa: E402
from app.connection import roots_differ  # noqa: E402
from collector.api.client import ApiError  # noqa: E402
from collector.core.printable import printable  # noqa: E402

# A local icon: a Material icon name makes the browser fetch its picture from a font CDN (seen in Chromium).
st.set_page_config(
    page_title="runwatch", page_icon=str(Path(__file__).with_name("favicon.png")), layout="wide"
)

# The page scripts live in screens/, not pages/: Streamlit runs the first script run of a fresh server as an
# old-style app built from a pages/ folder beside the main script (until st.navigation is first called), so
# a first visit to /alerts found no page of that name and showed "Page not found" over the right page.
PAGES = [
    st.Page("screens/runs_overview.py", title="Runs", icon=":material/table_rows:", url_path="runs"),
    st.Page("screens/run_charts.py", title="Run", icon=":material/show_chart:", url_path="run"),
    st.Page("screens/alert_review.py", title="Alerts", icon=":material/notifications:", url_path="alerts"),
    st.Page(
        "screens/checkpoint_picker.py", title="Checkpoints", icon=":material/save:", url_path="checkpoints"
    ),
    st.Page("screens/run_compare.py", title="Compare", icon=":material/compare_arrows:", url_path="compare"),
    st.Page("screens/run_health.py", title="Health", icon=":material/health_and_safety:", url_path="health"),
]
# Other addresses people type lead to the page they mean (Streamlit serves the default page at `/` only, so
# the overview is also a page of its own at `/runs`). Listed after PAGES: switching to a page file picks the
# first page of that file.
ALIASES = {
    ("screens/runs_overview.py", "Runs"): ("overview", "home", "index"),
    ("screens/run_charts.py", "Run"): ("charts", "metrics", "run-page"),
    ("screens/alert_review.py", "Alerts"): ("alert", "incidents", "incident", "review"),
    ("screens/checkpoint_picker.py", "Checkpoints"): ("checkpoint", "ckpt"),
    ("screens/run_compare.py", "Compare"): ("comparison",),
    ("screens/run_health.py", "Health"): ("files", "problems"),
}
# The pages that draw Plotly charts (see app/chart_code.py).
CHART_PAGES = ("Run", "Alerts", "Compare")
HOME = st.Page("screens/runs_overview.py", title="Runs", url_path="start", default=True)
ALIAS_PAGES = [
    st.Page(file, title=title, url_path=path) for (file, title), paths in ALIASES.items() for path in paths
]
# Page files are named apart from their URL paths: with equal names, streamlit.testing runs a switched-to
# page without this frame (seen with Streamlit 1.67).
page = st.navigation([*PAGES, HOME, *ALIAS_PAGES], position="hidden")
with st.sidebar:
    for shown in PAGES:  # the navigation, without the aliases
        st.page_link(shown)
    # before any call to the collector: the browser loads the chart code while the page asks for its data
    # (a page without charts waits until the browser is idle: the next page opened may draw some)
    chart_code.load_charts_early(idle=page.title not in CHART_PAGES)

ui.guard_door()
conf = ui.settings()
api = ui.api()
try:
    runs = api.runs()
except ApiError as err:
    # The collector went away or failed: say so, and find (or start) one afresh on the next run (who answered
    # is read first: asked after the connection is dropped, it would look for one, or start one, right here).
    who = ui.answering()
    ui.forget_collector()
    st.error(f"{who} did not answer the list of runs: {err}. Reload the page to reconnect.")
    st.stop()
run_ids = [r.id for r in runs]

# A run can be named in the address (`/run?run=ID`) or chosen by a page before switching to another page.
pending = st.session_state.pop(ui.PENDING_RUN_KEY, None)
if not st.session_state.get("_address_read"):
    # Only the address the session was opened with; later the sidebar's choice writes it.
    st.session_state["_address_read"] = True
    pending = pending or st.query_params.get("run")
if pending in run_ids:
    st.session_state[ui.RUN_KEY] = pending
if st.session_state.get(ui.RUN_KEY) not in run_ids:
    st.session_state[ui.RUN_KEY] = run_ids[0] if run_ids else None
if pending and pending not in run_ids:  # a mistyped or old address: say so, never show another run silently
    shown = st.session_state[ui.RUN_KEY]
    st.warning(
        f"No run `{printable(pending)}` in this database"
        + (f": showing `{shown}` instead." if shown else ".")
    )

with st.sidebar:
    if run_ids:
        st.selectbox(
            "Run", run_ids, key=ui.RUN_KEY, help="The run shown on the Run, Checkpoints and Health pages"
        )
        st.query_params["run"] = st.session_state[ui.RUN_KEY]
    conn = ui.connection()
    # Each root's state from the collector: a remote one is connected, connecting or disconnected.
    health = api.health()
    root_states = {s.root: s for s in health.root_states}

    def root_label(root) -> str:
        known = root_states.get(str(root))
        state = known.state if known else "local"
        return f"`{root}`" + ("" if state == "local" else f" ({state})")

    lake = conn.info.get("lake")  # a team's API (`serve --store` without roots): every collector's runs
    where = f"Team lake `{lake}`" if lake else f"Roots: {', '.join(root_label(r) for r in conf.roots)}"
    # (health's, not the marker's: a team API started before the lake existed learns it once attached)
    read_only = bool(lake and (health.lake.read_only if health.lake else conn.info.get("lake_read_only")))
    st.session_state[ui.READ_ONLY_KEY] = ui.READ_ONLY_WHY if read_only else None
    if read_only:
        where += " (read-only: its Postgres role may only read, so stops, acks and resolves are refused here)"
    st.caption(
        f"Database `{conf.db}`  \n{where}  \n"
        f"Collector pid {conn.info.get('pid')} on port {conn.info.get('port')}"
        + (" (started by this dashboard)" if conn.started_here else "")
        + f"  \nLive charts refresh every {conf.refresh_s:g} s"
    )
    for root in root_states.values():
        if root.state == "disconnected":
            why = f": {root.error}" if root.error else ""
            st.warning(
                f"`{root.root}` is disconnected{why}. Its runs show what was read before; the collector "
                "reconnects by itself and reads on from where it stopped."
            )
    ui.problem_files_note(health.problem_files)
    missing = [] if lake else roots_differ(conn.info, conf.roots)
    if missing:
        st.warning(
            f"The running collector does not watch {', '.join(missing)} (it was started with other roots); "
            "stop it to have the dashboard start one with these roots."
        )

ingest = health.ingest
if ingest and ingest.state == "stalled":  # (a full disk: the collector answers but stores nothing new)
    st.error(ingest.message or "The collector's ingest is stalled.", icon=":material/storage:")

try:
    page.run()
except ApiError as err:
    # One failed call (a missing run, an endpoint this collector lacks) costs the page, not the dashboard.
    st.error(f"{ui.answering()} could not answer this page: {err}")
