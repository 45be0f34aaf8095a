"""`runwatch mcp` over stdio, driven by the official MCP SDK's own client (a real subprocess, a real database of
real runs): it lists the tools, lists runs with their verdicts, reads a run's incidents with their actions, its
checkpoint advice and a downsampled metric history, and asks a run to stop (refused without a reason), first
reading the database directly (no collector), then through a running collector."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.collector.test_daemon_support import Daemon
from tests.conftest import REAL_RUNS, REPO

OVERFIT = "yongshuaiy__LLMs-final__output-checkpoint-669"  # eval_loss best at 200, then rises
SPIKE = "Miguel-Alessio__qwen-chess-lora__logs"  # grad_norm burst to ~131 at step 2680
LIVE = "live-run"
RL = "grpo-run"  # verl's file logger: a reward and a validation score, no loss


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("mcp")
    root = base / "runs"
    root.mkdir()
    for name in (OVERFIT, SPIKE):
        shutil.copy(REAL_RUNS / f"{name}.json", root / f"{name}.json")
    live = root / LIVE
    live.mkdir()
    (live / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "data": {"train/loss": 2.0 / s}}) + "\n" for s in range(1, 11))
    )
    (live / "status.json").write_text(
        json.dumps({"state": "running", "step": 10, "total_steps": 100, "pid": 1, "updated_at": time.time()})
    )
    (root / RL).mkdir()
    (root / RL / "metrics.jsonl").write_text(
        "".join(
            json.dumps(
                {"step": s, "data": {"critic/score/mean": s / 10, "val-core/sums/reward/mean@1": s / 20}}
            )
            + "\n"
            for s in range(1, 6)
        )
    )
    db = base / "state" / "runwatch.duckdb"
    out = subprocess.run(
        [sys.executable, "-m", "collector", "ingest", "--db", str(db), str(root)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    return db


def call(db: Path, calls: list[tuple[str, dict]]) -> tuple[list[str], list]:
    """The server's tool names, and each call's result (structured content, or the error text)."""

    async def session() -> tuple[list[str], list]:
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "runwatch", "mcp", "--db", str(db)], cwd=REPO
        )
        async with Client(params) as client:
            tools = sorted(t.name for t in (await client.list_tools()).tools)
            results = []
            for name, arguments in calls:
                result = await client.call_tool(name, arguments)
                if result.is_error:
                    results.append(("error", " ".join(c.text for c in result.content)))
                else:
                    results.append(result.structured_content)
            return tools, results

    return asyncio.run(asyncio.wait_for(session(), 300))


def test_an_agent_reads_the_runs_and_asks_for_a_stop_from_the_database(db: Path):
    tools, (listed, incidents, advice, history, metrics, no_reason, blank, stop, one_file) = call(
        db,
        [
            ("list_runs", {}),
            ("run_incidents", {"run": SPIKE, "state": "all"}),
            ("checkpoint_advice", {"run": OVERFIT}),
            ("metric_history", {"run": SPIKE, "metric": "grad_norm", "points": 50}),
            ("list_metrics", {"run": SPIKE}),
            ("request_stop", {"run": LIVE}),
            ("request_stop", {"run": LIVE, "reason": "   "}),
            ("request_stop", {"run": LIVE, "reason": "reward collapsed (agent)"}),
            ("request_stop", {"run": OVERFIT, "reason": "done"}),
        ],
    )
    assert tools == [
        "checkpoint_advice",
        "list_metrics",
        "list_runs",
        "metric_history",
        "request_stop",
        "run_incidents",
    ]
    runs = {r["id"]: r for r in listed["runs"]}
    assert set(runs) == {OVERFIT, SPIKE, LIVE, RL}
    # what an RL run is judged by, as the dashboard's overview and `collector runs` show it
    assert runs[RL]["kind"] == "rl" and runs[RL]["train_loss"] is None
    assert runs[RL]["reward"] == 0.5 and runs[RL]["val_score"] == 0.25
    assert runs[OVERFIT]["kind"] == "sft" and runs[OVERFIT]["reward"] is None
    assert runs[OVERFIT]["verdict"] == "WARN" and runs[OVERFIT]["recommended_step"] == 200
    assert runs[LIVE]["verdict"] == "OK" and runs[LIVE]["status"] == "running"

    assert incidents["run"] == SPIKE
    spikes = [a for a in incidents["incidents"] if a["metric"] == "grad_norm"]
    assert spikes and all("action" in a for a in spikes)
    assert any(a["first_step"] <= 2680 <= a["last_step"] for a in spikes)

    assert advice["recommended"]["step"] == 200

    assert history["downsampled"] is True and len(history["steps"]) <= 50
    assert max(v for v in history["max"] if isinstance(v, float)) > 100  # the burst survives downsampling
    assert "grad_norm" in {m["metric"] if isinstance(m, dict) else m for m in metrics["metrics"]}

    # the Pydantic validation of a missing argument is the SDK's own refusal; a blank reason is ours
    assert no_reason[0] == "error" and "reason" in no_reason[1]
    assert blank[0] == "error" and blank[1].endswith(
        "refused: a stop needs a reason (say why the run should stop)"
    )
    assert stop["written"] is True and stop["request"]["reason"] == "reward collapsed (agent)"
    assert json.loads(Path(stop["path"]).read_text())["reason"] == "reward collapsed (agent)"
    # the stop's state after it, the fields of `GET /api/runs/{run}/stop`, and as `collector run` says it
    assert (
        stop["state"] == "written" and stop["by"] == "person" and stop["reason"] == "reward collapsed (agent)"
    )
    assert stop["said"].startswith("stop asked ") and stop["said"].endswith(f"; written: {stop['path']}")
    assert one_file[0] == "error"  # a run that is one file has no folder to write the request into


def test_through_a_running_collector(db: Path):
    stop_file = db.parent.parent / "runs" / LIVE / "runwatch.stop"
    asked_before = stop_file.exists()  # (the test above asks first when it runs)
    daemon = Daemon(db, [db.parent.parent / "runs"]).start()
    try:
        _, (listed, stop) = call(
            db, [("list_runs", {}), ("request_stop", {"run": LIVE, "reason": "second ask"})]
        )
    finally:
        daemon.stop()
    # (the daemon holds the database: an answer at all came through its API)
    assert {r["id"] for r in listed["runs"]} == {OVERFIT, SPIKE, LIVE, RL}
    # the first request stands: a second one is not written
    assert stop["written"] is (not asked_before)
    assert stop["request"] == json.loads(stop_file.read_text())
    # the state through the collector's API too: the request in force
    assert stop["state"] == "written" and stop["reason"] == stop["request"]["reason"]
