"""The dashboard's door: loopback names only, a login when it listens elsewhere, the launcher's options."""

from __future__ import annotations

import sys

import pytest
from streamlit import config as st_config
from streamlit.testing.v1 import AppTest

from app import door
from app.__main__ import command
from tests.app.conftest import REPO

APP = str(REPO / "app" / "streamlit_app.py")


@pytest.mark.parametrize(
    ("address", "loopback"),
    [("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("[::1]", True), ("localhost", True)]
    + [
        ("0.0.0.0", False),
        ("::", False),
        ("", False),
        (None, False),
        ("10.1.2.3", False),
        ("gpu-box", False),
    ],
)
def test_loopback_addresses(address, loopback):
    assert door.is_loopback(address) is loopback


@pytest.mark.parametrize(
    ("header", "refused"),
    [
        ("127.0.0.1:8501", False),
        ("localhost:8501", False),
        ("LOCALHOST", False),
        ("[::1]:8501", False),
        ("evil.example:8501", True),  # DNS rebinding: a foreign name resolved to 127.0.0.1
        ("127.0.0.1.evil.example", True),
        ("", True),
    ],
)
def test_host_header_on_loopback(header, refused):
    reason = door.host_refusal(header, "127.0.0.1", {})
    assert (reason is not None) is refused
    if refused:
        assert door.ALLOWED_HOSTS_ENV in reason


def test_extra_host_names_and_open_addresses():
    assert door.host_refusal("box.lan:8501", "127.0.0.1", {door.ALLOWED_HOSTS_ENV: "box.lan, other"}) is None
    # On another address every name reaches the login, which guards the data.
    assert door.host_refusal("anything:1", "0.0.0.0", {}) is None
    # No Host header at all (streamlit.testing): nothing to check.
    assert door.host_refusal(None, "127.0.0.1", {}) is None


def test_password_is_the_users_or_the_token():
    assert door.expected_password({door.PASSWORD_ENV: "pw"}, "tok") == "pw"
    assert door.expected_password({}, "tok") == "tok"
    assert door.password_matches("tok", "tok")
    assert not door.password_matches("tok ", "tok")
    assert not door.password_matches("", None)  # no token file and no password: nobody gets in


def test_launcher_passes_loopback_and_no_usage_statistics():
    cmd = command(["--", "--db", "x.duckdb", "--root", "runs"])
    assert cmd[:4] == [sys.executable, "-m", "streamlit", "run"]
    flags = dict(zip(cmd[5:13:2], cmd[6:13:2], strict=True))
    assert flags["--server.address"] == "127.0.0.1"
    assert flags["--browser.gatherUsageStats"] == "false"
    assert cmd[cmd.index("--") + 1 :] == ["--db", "x.duckdb", "--root", "runs"]
    assert command(["--host", "0.0.0.0", "--port", "9000"])[6:9:2] == ["0.0.0.0", "9000"]


def test_the_app_carries_its_own_server_options():
    # `streamlit run /path/to/app` from any folder reads app/.streamlit/config.toml (Streamlit's per-script config).
    text = (REPO / "app" / ".streamlit" / "config.toml").read_text()
    assert 'address = "127.0.0.1"' in text and "gatherUsageStats = false" in text


@pytest.fixture
def open_address(monkeypatch):
    """The dashboard as if started with `--server.address 0.0.0.0` (AppTest runs it in this process)."""
    before = st_config.get_option("server.address")
    st_config.set_option("server.address", "0.0.0.0")
    yield
    st_config.set_option("server.address", before)


def test_on_another_address_the_dashboard_asks_for_the_token_before_any_data(app_env, open_address):
    at = AppTest.from_file(APP, default_timeout=120).run()
    assert not at.exception
    assert len(at.text_input) == 1 and at.text_input[0].label == "Password"
    assert not at.dataframe, "no run data before the password"
    at.text_input[0].input("wrong").run()
    assert any("not the password" in e.value for e in at.error)
    assert not at.dataframe
    token = (app_env.db.parent / f"{app_env.db.name}.token").read_text().strip()
    at.text_input[0].input(token).run()
    assert not at.exception
    assert at.dataframe, "the runs table once the token is given"
