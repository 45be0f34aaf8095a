"""A remote root (over a real sshd on 127.0.0.1) beside a local one, in one dashboard (streamlit.testing)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.app.conftest import REPO, remote_beside_local, wait_for

APP = str(REPO / "app" / "streamlit_app.py")


def _lines(path: Path, first: int, last: int) -> None:
    with open(path, "a") as f:
        for s in range(first, last + 1):
            f.write(json.dumps({"step": s, "data": {"train/loss": 2.0 / s}}) + "\n")


@pytest.fixture
def two_roots(tmp_path, monkeypatch):
    db = tmp_path / "db" / "runwatch.duckdb"
    with remote_beside_local(tmp_path, monkeypatch, _lines, (30, 10), db) as (server, url, _, collector):
        monkeypatch.setenv("RUNWATCH_DB", str(db))
        monkeypatch.setenv("RUNWATCH_ROOTS", f"{url}:{tmp_path / 'laptop'}")
        yield server, url, collector.client()


def _overview(at: AppTest) -> dict:
    """The overview table's status by run ({} when this render drew no table: a slow API answer on a
    loaded machine; the caller renders again)."""
    if not at.dataframe:
        return {}
    table = at.dataframe[0].value
    return dict(zip(table["run"], table["status"], strict=True))


def _rendered(expected: dict) -> AppTest:
    """The app rendered until its overview shows `expected` (fails, naming what it showed, after 60 s)."""
    shown: list = []

    def render():
        at = AppTest.from_file(APP, default_timeout=120).run()
        if at.exception:  # shown at the end if it lasts
            shown.append([e.value for e in at.exception])
            return None
        shown.append(_overview(at))
        return at if shown[-1] == expected else None

    try:
        return wait_for(render, "the overview's statuses", 60)
    finally:
        assert shown and shown[-1] == expected, f"the overview showed {shown[-1:]}, expected {expected}"


def test_a_remote_root_beside_a_local_one_and_its_outage_in_one_dashboard(two_roots):
    server, url, client = two_roots
    at = _rendered({"gpu-run": "unknown", "laptop-run": "unknown"})
    assert set(at.sidebar.selectbox[0].options) == {"gpu-run", "laptop-run"}
    caption = " ".join(c.value for c in at.sidebar.caption)
    assert f"`{url}` (connected)" in caption
    assert not at.sidebar.warning

    server.stop()  # the GPU machine goes away
    wait_for(
        lambda: any(s["state"] == "disconnected" for s in client.get("/api/health")["root_states"]),
        "the remote root shown disconnected",
        60,
    )
    at = _rendered({"gpu-run": "unreachable", "laptop-run": "unknown"})
    assert f"`{url}` (disconnected)" in " ".join(c.value for c in at.sidebar.caption)
    assert any(url in w.value and "disconnected" in w.value for w in at.sidebar.warning)
