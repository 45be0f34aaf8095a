"""The API refuses a `Host` that is not a name of this machine (issue 24.8: DNS rebinding), against a real
daemon over real HTTP: a rebinding page's name gets 403 on every route, `/api/health` included, while
127.0.0.1, localhost and [::1] (with the port) and names listed in RUNWATCH_ALLOWED_HOSTS pass."""

from __future__ import annotations

import http.client
import json
import os

import pytest

from collector.core.runtime import marker_path
from tests.collector.test_daemon_support import Daemon


def get(port: int, path: str, host: str) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.putrequest("GET", path, skip_host=True)
        conn.putheader("Host", host)
        conn.endheaders()
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        conn.close()


@pytest.fixture
def daemon(tmp_path, monkeypatch):
    root, db = tmp_path / "runs", tmp_path / "rw.duckdb"
    root.mkdir()
    monkeypatch.setenv("RUNWATCH_ALLOWED_HOSTS", "box.lan")  # the daemon inherits it
    d = Daemon(db, [root]).start()
    yield d, json.loads(marker_path(db).read_text())["port"]
    d.ensure_stopped()


def test_a_rebinding_name_is_refused_and_loopback_names_pass(daemon):
    d, port = daemon
    for host in (
        f"127.0.0.1:{port}",
        f"localhost:{port}",
        f"[::1]:{port}",
        "localhost",
        f"box.lan:{port}",
    ):
        status, body = get(port, "/api/health", host)
        assert status == 200 and body["ok"] is True, (host, status, body)
    for host in (
        f"attacker.example:{port}",
        "attacker.example",
        f"127.0.0.1.attacker.example:{port}",
        f"127.0.0.1:{port}@attacker.example",
    ):
        for path in ("/api/health", "/api/identity?challenge=x", "/api/runs"):
            status, body = get(port, path, host)
            assert status == 403, (host, path, status, body)
            assert "attacker.example" in body["detail"] and "RUNWATCH_ALLOWED_HOSTS" in body["detail"]
            assert str(d.db) not in json.dumps(body)
    # The CLI, which names 127.0.0.1, still works through the daemon.
    assert d.client().get("/api/runs") == []
    assert os.environ["RUNWATCH_ALLOWED_HOSTS"] == "box.lan"
    assert d.stop() == 0
