"""The seed's platform interface (`/api/monitoring/...`) on a real collector subprocess: the REST routes with
curl's headers, and the live and playback WebSockets with a real WebSocket client (the `websockets` package),
its token given as a query parameter, as a subprotocol, and refused without it or from a foreign origin."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from collector.api.monitoring import origin_allowed
from collector.core.runtime import read_marker, read_token
from tests.collector.test_daemon_support import Daemon
from tests.waiting import wait_for

JOB = "job-1"


def write_status(run: Path, state: str, step: int) -> None:
    doc = {"state": state, "step": step, "total_steps": 100, "pid": 1, "updated_at": time.time()}
    tmp = run / ".status.tmp"
    tmp.write_text(json.dumps(doc))
    tmp.replace(run / "status.json")


def append(run: Path, first: int, last: int) -> None:
    with open(run / "metrics.jsonl", "a") as f:
        for step in range(first, last + 1):
            f.write(json.dumps({"step": step, "data": {"train/loss": 2.0 / step, "train/lr": 1e-4}}) + "\n")


@pytest.fixture
def served(tmp_path: Path):
    run = tmp_path / "runs" / "exp" / JOB
    run.mkdir(parents=True)
    append(run, 1, 20)
    write_status(run, "running", 20)
    daemon = Daemon(tmp_path / "runwatch.duckdb", [tmp_path / "runs"]).start()
    client = daemon.client()
    wait_for(
        lambda: next(r for r in client.get("/api/runs") if r["id"] == f"exp/{JOB}" and r["last_step"] == 20),
        "the run",
    )
    client.close()
    port = read_marker(daemon.db)["port"]
    try:
        yield run, f"127.0.0.1:{port}", read_token(daemon.db)
    finally:
        daemon.stop()


def test_rest_routes_as_the_seed_document_calls_them(served):
    run, where, token = served
    auth = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=f"http://{where}", headers=auth) as http:
        # the job id alone finds the run `exp/job-1`
        body = http.get(f"/api/monitoring/{JOB}/metrics", params={"start_step": 3, "end_step": 5}).json()
        assert body["job_id"] == f"exp/{JOB}"
        assert [r["step"] for r in body["metrics"]] == [3, 4, 5]
        assert body["metrics"][0]["train/loss"] == pytest.approx(2.0 / 3)
        assert body["truncated"] is False
        page = http.get(f"/api/monitoring/exp/{JOB}/metrics", params={"limit": 7}).json()
        assert (len(page["metrics"]), page["truncated"], page["next_start_step"]) == (7, True, 8)
        assert http.get(f"/api/monitoring/{JOB}/metrics/anomalies").json() == {
            "job_id": f"exp/{JOB}",
            "anomalies": [],
        }

        append(run, 21, 25)
        queued = http.post(f"/api/monitoring/{JOB}/metrics/sync").json()
        assert queued == {"job_id": f"exp/{JOB}", "queued": [str(run)]}
        wait_for(
            lambda: len(http.get(f"/api/monitoring/{JOB}/metrics").json()["metrics"]) == 25,
            "the synced steps",
        )

        assert http.get("/api/monitoring/nope/metrics").status_code == 404
        assert (
            http.get(f"/api/monitoring/{JOB}/metrics", params={"start_step": 5, "end_step": 2}).status_code
            == 422
        )
    assert httpx.get(f"http://{where}/api/monitoring/{JOB}/metrics").status_code == 401


def test_a_nan_is_kept_in_the_history_and_is_an_anomaly(served):
    run, where, token = served
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 21, "data": {"train/loss": NaN}}\n')
    auth = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=f"http://{where}", headers=auth) as http:
        record = wait_for(
            lambda: json.loads(http.get(f"/api/monitoring/{JOB}/metrics", params={"start_step": 21}).text)[
                "metrics"
            ][0],
            "step 21 stored",
        )
        assert math.isnan(record["train/loss"])  # sent as a bare NaN, as the rest of the API
        anomalies = wait_for(
            lambda: json.loads(http.get(f"/api/monitoring/{JOB}/metrics/anomalies").text)["anomalies"],
            "the NaN's incident",
        )
    (incident,) = anomalies
    assert incident["rule"] == "nonfinite" and incident["first_step"] == 21
    assert incident["severity"] == "error" and incident["action"] is not None


def test_live_socket_pushes_metrics_status_and_finished(served):
    run, where, token = served

    async def watch() -> list[dict]:
        got = []
        url = f"ws://{where}/api/monitoring/{JOB}/live"
        async with connect(url, subprotocols=["runwatch", f"bearer.{token}"], open_timeout=60) as ws:
            assert ws.subprotocol == "runwatch"
            got.append(json.loads(await asyncio.wait_for(ws.recv(), 60)))  # the status now
            append(run, 21, 22)
            while sum(m["type"] == "metric" for m in got) < 2:
                got.append(json.loads(await asyncio.wait_for(ws.recv(), 60)))
            write_status(run, "completed", 22)
            async for message in ws:
                got.append(json.loads(message))
        return got

    messages = asyncio.run(watch())
    assert messages[0] == {
        "type": "status",
        "data": {
            "job_id": f"exp/{JOB}",
            "status": "running",
            "current_step": 20,
            "total_steps": 100,
            "anomaly_detected": False,
        },
    }
    metrics = [m for m in messages if m["type"] == "metric"]
    assert [m["data"]["step"] for m in metrics] == [21, 22]
    assert metrics[0]["data"]["train/loss"] == pytest.approx(2.0 / 21) and "timestamp" in metrics[0]["data"]
    statuses = [m["data"] for m in messages if m["type"] == "status"]
    assert statuses[-1]["status"] == "completed" and statuses[-1]["current_step"] == 22
    assert messages[-1] == {"type": "finished", "status": "completed"}
    assert {m["type"] for m in messages} == {"status", "metric", "finished"}


def test_playback_socket_sends_info_metrics_with_progress_and_complete(served):
    _, where, token = served

    async def play(query: str) -> list[dict]:
        url = f"ws://{where}/api/monitoring/{JOB}/playback?{query}&token={token}"
        got = []
        async with connect(url, open_timeout=60) as ws:
            try:
                async for m in ws:
                    got.append(json.loads(m))
            except ConnectionClosed as e:
                assert e.rcvd.code == 1008  # a refusal: its reason came as the last message
        return got

    messages = asyncio.run(play("start_step=2&end_step=5&speed=10"))
    assert messages[0] == {
        "type": "playback_info",
        "total_metrics": 4,
        "start_step": 2,
        "end_step": 5,
        "speed": 10.0,
    }
    metrics = messages[1:-1]
    assert [m["data"]["step"] for m in metrics] == [2, 3, 4, 5]
    assert [(m["current_index"], m["total"], m["progress"]) for m in metrics] == [
        (0, 4, 0.25),
        (1, 4, 0.5),
        (2, 4, 0.75),
        (3, 4, 1.0),
    ]
    assert messages[-1] == {"type": "playback_complete"}
    refused = asyncio.run(play("speed=50"))
    assert refused[0]["type"] == "error" and "speed 50 is outside 0.1-10" in refused[0]["message"]


def test_sockets_refuse_a_missing_token_a_foreign_origin_and_an_unknown_job(served):
    _, where, token = served

    async def attempt(path: str, **kwargs) -> object:
        got = []
        try:
            async with connect(f"ws://{where}{path}", open_timeout=60, **kwargs) as ws:
                async for m in ws:
                    got.append(json.loads(m))
        except InvalidStatus as e:
            return e.response.status_code
        except ConnectionClosed as e:
            return got, e.rcvd.code
        return got, None

    assert asyncio.run(attempt(f"/api/monitoring/{JOB}/live")) == 403
    assert asyncio.run(attempt(f"/api/monitoring/{JOB}/live?token=wrong")) == 403
    assert (
        asyncio.run(attempt(f"/api/monitoring/{JOB}/live?token={token}", origin="http://evil.example")) == 403
    )
    messages, code = asyncio.run(attempt(f"/api/monitoring/nope/live?token={token}"))
    assert code == 1008 and "no run or job 'nope'" in messages[0]["message"]


def test_origin_rule():
    assert origin_allowed(None, "127.0.0.1:8000", {})
    assert origin_allowed("http://localhost:8501", "127.0.0.1:8000", {})
    assert origin_allowed("http://[::1]:8501", "127.0.0.1:8000", {})
    assert origin_allowed("http://box:8000", "box:8000", {})  # the collector's own origin
    assert not origin_allowed("http://box:9999", "box:8000", {})
    assert not origin_allowed("https://evil.example", "127.0.0.1:8000", {})
    assert origin_allowed(
        "https://lab.example", "127.0.0.1:8000", {"RUNWATCH_ALLOWED_ORIGINS": "https://lab.example/"}
    )


def test_live_socket_sends_the_status_first_while_steps_keep_coming(served):
    """The status is the first message even when steps are stored between the run's read and the first read
    of its points (it was a metric then: a flaky first message seen in a fresh clone)."""
    run, where, token = served
    done = threading.Event()

    def write() -> None:
        step = 21
        while not done.is_set():
            append(run, step, step)
            step += 1
            time.sleep(0.005)

    async def first() -> dict:
        url = f"ws://{where}/api/monitoring/{JOB}/live"
        async with connect(url, subprotocols=["runwatch", f"bearer.{token}"], open_timeout=60) as ws:
            return json.loads(await asyncio.wait_for(ws.recv(), 60))

    writer = threading.Thread(target=write)
    writer.start()
    try:
        firsts = [asyncio.run(first())["type"] for _ in range(20)]
    finally:
        done.set()
        writer.join()
    assert firsts == ["status"] * 20
