"""What a hostile client sends the API, against a real collector over real HTTP and a real WebSocket client:
a note or body of megabytes is refused before it is read (413) or named as too long (422, the value not echoed)
and nothing changes; the live socket refuses a rebinding page's Host and a foreign Origin, as HTTP does."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket

import pytest
import websockets

from collector.core.runtime import marker_path, read_token
from tests.collector.test_daemon_support import Daemon, wait_for


@pytest.fixture
def daemon(tmp_path):
    root, db = tmp_path / "runs", tmp_path / "rw.duckdb"
    (root / "nan").mkdir(parents=True)
    lines = [{"step": s, "data": {"train/loss": 2.0 / s}} for s in range(1, 40)]
    lines.append({"step": 40, "data": {"train/loss": None}})  # a NaN: an incident to acknowledge
    (root / "nan" / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    d = Daemon(db, [root]).start()
    yield d, json.loads(marker_path(db).read_text())["port"], read_token(db)
    d.ensure_stopped()


def post(port: int, path: str, body: bytes, token: str | None, chunked: bool = False) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {token}"} if token else {})
    try:
        if chunked:
            conn.request("POST", path, body=iter([body[i : i + 65536] for i in range(0, len(body), 65536)]),
                         headers=headers, encode_chunked=True)  # fmt: skip
        else:
            conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read().decode()
    except (BrokenPipeError, ConnectionResetError):  # refused before the whole body was sent
        return 413, ""
    finally:
        conn.close()


def test_a_huge_note_or_body_is_refused_and_changes_nothing(daemon):
    d, port, token = daemon
    client = d.client()
    incident = wait_for(lambda: client.get("/api/incidents")[0], "the NaN's incident")
    ack = f"/api/incidents/{incident['id']}/ack"
    big = json.dumps({"note": "A" * 5_000_000}).encode()
    for who in (token, None):  # the body is refused before the token is even looked at
        for chunked in (False, True):
            status, text = post(port, ack, big, who, chunked)
            assert status == 413, (who is None, chunked, status, text[:300])
            assert "AAAA" not in text
    status, text = post(port, ack, json.dumps({"note": "N" * 20_000}).encode(), token)
    assert status == 422 and "at most 10000 characters" in text and "NNNN" not in text, text[:300]
    status, text = post(port, "/api/runs/nan/stop", json.dumps({"reason": "R" * 20_000}).encode(), token)
    assert status == 422 and "RRRR" not in text, text[:300]
    assert client.get("/api/incidents")[0]["state"] == "open"
    status, text = post(port, ack, json.dumps({"note": "looked at it"}).encode(), token)
    assert status == 200 and json.loads(text)["incident"]["state"] == "acked", text[:300]
    assert d.stop() == 0


async def open_live(port: int, host: str, token: str, origin: str | None) -> str:
    """Open the live socket of run `nan` naming `host` in the Host header: its first message, or the refusal."""
    sock = socket.create_connection(("127.0.0.1", port))
    url = f"ws://{host}/api/monitoring/nan/live?token={token}"
    try:
        async with websockets.connect(url, sock=sock, origin=origin, open_timeout=30) as ws:
            return json.loads(await asyncio.wait_for(ws.recv(), 30))["type"]
    except websockets.InvalidStatus as e:
        return f"refused {e.response.status_code}"


def test_the_live_socket_refuses_a_rebinding_host_and_a_foreign_origin(daemon):
    d, port, token = daemon
    wait_for(lambda: d.client().get("/api/runs/nan"), "the run")
    cases = {
        (f"127.0.0.1:{port}", None): "status",
        (f"localhost:{port}", f"http://localhost:{port}"): "status",
        (f"attacker.example:{port}", None): "refused 403",
        (f"attacker.example:{port}", f"http://attacker.example:{port}"): "refused 403",
        (f"127.0.0.1:{port}", "http://attacker.example"): "refused 403",
    }
    for (host, origin), expected in cases.items():
        got = asyncio.run(open_live(port, host, token, origin))
        assert got == expected, (host, origin, got)
    assert d.stop() == 0
