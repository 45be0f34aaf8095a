"""Starting `streamlit run app` headless on a free port, and a headless Chromium driven by Playwright.

Chromium is Debian's package (`make browser`), never a Playwright download.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
CHART = '[data-testid="stPlotlyChart"] .js-plotly-plot'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chromium_or_skip() -> str:
    """The Chromium binary, or a skip that says how to install it."""
    path = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
    if not path:
        pytest.skip(
            "Debian's chromium is not installed (`make browser` installs it); the browser test needs it"
        )
    return path


@contextlib.contextmanager
def streamlit_app(
    db: Path,
    roots: list[Path],
    home: Path,
    log: Path,
    refresh: float = 2,
    launch: list[str] | None = None,
    cwd: Path = REPO,
    env_extra: dict[str, str] | None = None,
) -> Iterator[str]:
    """Run `streamlit run app -- --db DB --root R...` headless on a free port; yield its address.

    `launch(port)` replaces the command before the app's own flags (to start it as a user would, e.g.
    `python -m app` or `streamlit run /abs/app` from another folder `cwd`, with no server flags)."""
    port = free_port()
    home.mkdir(parents=True, exist_ok=True)
    head = (
        [part.replace("{port}", str(port)) for part in launch]
        if launch is not None
        else [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            "app",
            "--server.headless",
            "true",
            "--server.address",
            "127.0.0.1",
            "--server.port",
            str(port),
            "--browser.gatherUsageStats",
            "false",
            "--server.fileWatcherType",
            "none",
        ]
    )
    cmd = [
        *head,
        "--",
        "--db",
        str(db),
        *[arg for root in roots for arg in ("--root", str(root))],
        "--refresh",
        str(refresh),
    ]
    # A fresh HOME: no first-run e-mail prompt, no user config.
    env = {**os.environ, "HOME": str(home), **(env_extra or {})}
    for name in ("RUNWATCH_DB", "RUNWATCH_ROOTS", "RUNWATCH_REFRESH"):
        env.pop(name, None)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:

        def healthy() -> bool:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as answer:
                return answer.read().strip() == b"ok"

        wait_for(healthy, f"streamlit to answer on {url} (log: {log})", 120, proc=proc, log=log, poll_s=0.25)
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()


@contextlib.contextmanager
def chromium_page(width: int = 1400, height: int = 1000, args: tuple[str, ...] = ()) -> Iterator:
    """A Playwright page in headless Debian Chromium (`args`: extra command-line switches)."""
    from playwright.sync_api import sync_playwright

    executable = chromium_or_skip()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, headless=True, args=[*CHROMIUM_ARGS, *args])
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.set_default_timeout(120_000)
            yield page
        finally:
            browser.close()


def wait_for_charts(page, count: int = 1) -> None:
    """Wait until at least `count` plotly charts are drawn and the app is no longer running its script."""
    page.wait_for_function(
        "n => document.querySelectorAll(arguments_selector).length >= n".replace(
            "arguments_selector", repr(CHART)
        ),
        arg=count,
    )
    wait_idle(page)


def wait_idle(page) -> None:
    """Wait until Streamlit shows no running-script indicator, no loading skeleton and no stale element."""
    page.wait_for_function(
        """() => !document.querySelector('[data-testid="stStatusWidget"]')
               && !document.querySelector('[data-testid="stSkeleton"]')
               && !document.querySelector('[data-stale="true"]')"""
    )


def open_page(page, url: str, charts: int = 0) -> str:
    """Open `url`, wait for its title, `charts` drawn charts and the end of the script run; its title. Fails
    where Streamlit says the page was not found."""
    page.goto(url)
    page.wait_for_selector("h1")
    if charts:
        wait_for_charts(page, charts)
    wait_idle(page)
    assert page.get_by_text("Page not found").count() == 0, f"{url}: Streamlit says the page was not found"
    return page.locator("h1").first.inner_text()


def screenshots_dir(tmp_path: Path) -> Path:
    path = Path(os.environ.get("RUNWATCH_SCREENSHOTS") or tmp_path / "screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def screenshot_whole_page(page, path: Path) -> None:
    """Screenshot the whole app: Streamlit scrolls inside its main block, so grow the window to fit it first."""
    height = page.evaluate(
        """() => {
            const main = document.querySelector('[data-testid="stMain"]');
            return Math.max(main ? main.scrollHeight : 0, document.body.scrollHeight);
        }"""
    )
    width = page.viewport_size["width"]
    page.set_viewport_size({"width": width, "height": min(max(int(height) + 40, 800), 12000)})
    wait_idle(page)
    page.screenshot(path=str(path), full_page=True)


def wait_stop_button(page, disabled: bool, or_gone: bool = False) -> None:
    """Wait until the page shows one "Stop run" button, disabled or not as asked (`or_gone`: or none). Only the
    visible ones count: while it redraws, Streamlit may keep a hidden copy of an element."""
    want = f"(b.length === 1 && b[0].disabled === {str(disabled).lower()})" + (
        " || b.length === 0" if or_gone else ""
    )
    page.wait_for_function(
        "() => { const b = [...document.querySelectorAll('button')]"
        ".filter(b => b.innerText.trim() === 'Stop run' && b.checkVisibility());"
        f" return {want}; }}"
    )
