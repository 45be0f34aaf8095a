"""The dashboard's door in headless Chromium, started as users start it: from another folder, and opened up.

- `streamlit run /abs/path/app` from a folder without `.streamlit/` listens on 127.0.0.1 only (the socket
  table says so), answers to loopback names only (a rebinding name mapped to 127.0.0.1 gets a refusal and no
  data) and sends nothing to any host but itself (no usage statistics).
- `python -m app --host 0.0.0.0` listens on every interface and asks for the token before showing any run.
"""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import pytest

from tests.app.browser_support import REPO, chromium_or_skip, chromium_page, streamlit_app, wait_idle

pytestmark = pytest.mark.browser
REBIND = "rebind.example"  # a foreign name; Chromium is told it resolves to 127.0.0.1


def listening(port: int) -> set[str]:
    return {
        c.laddr.ip
        for c in psutil.net_connections(kind="inet")
        if c.status == "LISTEN" and c.laddr.port == port
    }


def host_of(url: str) -> str | None:
    """The host a request goes to: a `blob:` URL's is its creator's origin (the page's own; the app's chart code
    is imported through one); None for a `data:` URL, which goes nowhere."""
    if url.startswith("data:"):
        return None
    inner = url.removeprefix("blob:")
    return urlsplit(inner).hostname or url[:60]


def test_started_elsewhere_it_listens_on_loopback_and_refuses_foreign_names(app_env, tmp_path: Path):
    chromium_or_skip()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    launch = [sys.executable, "-m", "streamlit", "run", str(REPO / "app"), "--server.port", "{port}"]
    seen_hosts: set[str] = set()
    with (
        streamlit_app(
            app_env.db, [app_env.root], tmp_path / "home", tmp_path / "st.log", launch=launch, cwd=elsewhere
        ) as url,
        chromium_page(args=(f"--host-resolver-rules=MAP {REBIND} 127.0.0.1",)) as page,
    ):
        port = urlsplit(url).port
        assert listening(port) == {"127.0.0.1"}, listening(port)
        page.on("request", lambda request: seen_hosts.add(host_of(request.url)))

        page.goto(f"http://{REBIND}:{port}/")
        page.get_by_text("answers to").first.wait_for()
        wait_idle(page)
        assert page.locator('[data-testid="stDataFrame"]').count() == 0, "a foreign name got the runs table"

        page.goto(f"{url}/")
        page.wait_for_selector('[data-testid="stDataFrame"]')
        wait_idle(page)
        assert page.get_by_text("answers to").count() == 0
    assert seen_hosts - {None} <= {"127.0.0.1", REBIND}, f"the page reached other hosts: {seen_hosts}"


def test_opened_to_the_network_it_asks_for_the_token(app_env, tmp_path: Path):
    chromium_or_skip()
    launch = [sys.executable, "-m", "app", "--host", "0.0.0.0", "--port", "{port}"]
    with (
        streamlit_app(
            app_env.db, [app_env.root], tmp_path / "home", tmp_path / "st.log", launch=launch
        ) as url,
        chromium_page() as page,
    ):
        assert listening(urlsplit(url).port) == {"0.0.0.0"}
        page.goto(f"{url}/")
        box = page.get_by_label("Password", exact=True).and_(page.locator("input"))
        box.wait_for()
        wait_idle(page)
        assert page.locator('[data-testid="stDataFrame"]').count() == 0, "runs shown before the password"
        box.fill(Path(f"{app_env.db}.token").read_text().strip())
        box.press("Enter")
        page.wait_for_selector('[data-testid="stDataFrame"]')
