"""The HTTP API over real HTTP against a real daemon: token, runs, downsampled metrics with NaN, alerts
(ack/resolve with a note and history), checkpoints advice, path confinement, the live stream, OpenAPI."""

from __future__ import annotations

import json
import math

import httpx
import pytest

from collector.api.client import ApiError
from collector.core.runtime import read_marker
from tests.collector.test_daemon_support import Daemon, wait_for

STEPS = 5000
NAN_STEP = 3000


def write_run(path, steps: int = STEPS) -> None:
    with path.open("w") as f:
        for step in range(1, steps + 1):
            loss = 0.5 + 2.0 * 0.9995**step + 0.01 * (step % 7)
            if step == NAN_STEP:
                f.write(f'{{"step":{step},"data":{{"train/loss":NaN,"train/grad_norm":1.0}}}}\n')
                continue
            grad = 400.0 if step == 1234 else 1.0 + (step % 5) * 0.01
            f.write(json.dumps({"step": step, "data": {"train/loss": loss, "train/grad_norm": grad}}) + "\n")


def write_checkpointed_run(run_dir) -> None:
    """A verl run folder: val/loss best at step 20, complete checkpoints at 10, 20, 30, an incomplete one
    at 40 (shards only), and the marker naming 30."""
    import numpy as np
    from safetensors.numpy import save_file

    run_dir.mkdir(parents=True)
    with (run_dir / "metrics.jsonl").open("w") as f:
        for step in range(1, 41):
            f.write(json.dumps({"step": step, "data": {"train/loss": 3.0 - step * 0.05}}) + "\n")
            if step % 10 == 0:
                f.write(
                    json.dumps(
                        {"step": step, "data": {"val/loss": {10: 2.0, 20: 1.5, 30: 1.7, 40: 1.9}[step]}}
                    )
                    + "\n"
                )
    for step in (10, 20, 30):
        hf = run_dir / f"global_step_{step}" / "huggingface"
        hf.mkdir(parents=True)
        (hf / "config.json").write_text("{}")
        (hf / "tokenizer.json").write_text("{}")
        save_file({"w": np.zeros((4, 4), dtype=np.float32)}, str(hf / "model.safetensors"))
    (run_dir / "global_step_40").mkdir()
    (run_dir / "global_step_40" / "model_world_size_1_rank_0.pt").write_bytes(b"x" * 100)
    (run_dir / "latest_checkpointed_iteration.txt").write_text("30")


@pytest.fixture(scope="module")
def served(tmp_path_factory, real_runs):
    tmp = tmp_path_factory.mktemp("api")
    root = tmp / "root"
    (root / "a").mkdir(parents=True)
    write_run(root / "a" / "metrics.jsonl")
    write_checkpointed_run(root / "ck")
    daemon = Daemon(tmp / "rw.duckdb", [root, real_runs]).start()
    client = daemon.client()
    wait_for(
        lambda: (
            any(r["id"] == "a" and r["last_step"] == STEPS for r in client.get("/api/runs"))
            and len(client.get("/api/runs")) == 12
        ),
        "every run ingested",
    )
    wait_for(lambda: client.get("/api/alerts", params={"run": "a", "rule": "nonfinite"}), "the NaN alert")
    yield daemon, client, root
    daemon.ensure_stopped()


def base_url(daemon) -> str:
    info = read_marker(daemon.db)
    return f"http://127.0.0.1:{info['port']}"


def test_token_is_required(served):
    daemon, _, _ = served
    url = base_url(daemon)
    assert httpx.get(url + "/api/health").json()["ok"] is True  # the one open route
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic x"}):
        r = httpx.get(url + "/api/runs", headers=headers)
        assert r.status_code == 401 and "token" in r.json()["detail"]
    assert httpx.post(url + "/api/alerts/1/ack", json={}).status_code == 401


def test_openapi_documents_the_routes(served):
    daemon, _, _ = served
    spec = httpx.get(base_url(daemon) + "/openapi.json").json()
    for path in (
        "/api/runs",
        "/api/runs/{run}/metrics",
        "/api/alerts/{alert_id}/ack",
        "/api/runs/{run}/stream",
    ):
        assert path in spec["paths"], path


def test_runs_carry_the_contract_fields(served):
    _, client, _ = served
    runs = {r["id"]: r for r in client.get("/api/runs")}
    a = runs["a"]
    assert (a["format"], a["last_step"], set(a["open_alerts"])) == ("jsonl", STEPS, {"error", "warn", "info"})
    for field in (
        "id",
        "path",
        "format",
        "status",
        "last_step",
        "total_steps",
        "train_loss",
        "val_loss",
        "open_alerts",
    ):
        assert field in a
    hf = runs["yongshuaiy__LLMs-final__output-checkpoint-669"]
    assert hf["format"] == "hf_trainer_state" and hf["total_steps"] == 669 and hf["val_loss"] > 0


def test_metrics_downsampled_keep_the_nan_and_the_spike(served):
    _, client, _ = served
    body = client.get(
        "/api/runs/a/metrics",
        params=[("metric", "train/loss"), ("metric", "train/grad_norm"), ("points", 100)],
    )
    loss, grad = body["series"]
    assert body["run"] == "a" and loss["downsampled"] and loss["total_points"] == STEPS
    assert len(loss["steps"]) == len(loss["values"]) == len(loss["min"]) == len(loss["max"]) == 100
    assert sum(math.isnan(v) for v in loss["values"]) == 1 and sum(loss["nonfinite"]) == 1
    assert not any(math.isnan(v) for v in loss["max"])  # the NaN's bucket keeps its finite range
    assert max(grad["max"]) == 400.0
    raw = client.get("/api/runs/a/metrics", params={"metric": "train/loss", "points": STEPS})["series"][0]
    assert not raw["downsampled"] and raw["steps"] == list(range(1, STEPS + 1))
    assert math.isnan(raw["values"][NAN_STEP - 1]) and "min" not in raw
    after = client.get("/api/runs/a/metrics", params={"metric": "train/loss", "after": STEPS - 3})["series"][
        0
    ]
    assert after["steps"] == [STEPS - 2, STEPS - 1, STEPS]


def test_errors_name_what_is_wrong(served):
    _, client, _ = served
    with pytest.raises(ApiError) as e:
        client.get("/api/runs/nope/metrics", params={"metric": "x"})
    assert e.value.status == 404 and "nope" in str(e.value)
    with pytest.raises(ApiError) as e:
        client.get("/api/alerts", params={"state": "later"})
    assert e.value.status == 400
    with pytest.raises(ApiError) as e:
        client.post("/api/alerts/999999/ack", {"note": "x"})
    assert e.value.status == 404


def test_alerts_ack_and_resolve_with_a_note(served):
    _, client, _ = served
    alert = client.get("/api/alerts", params={"run": "a", "rule": "nonfinite"})[0]
    for field in ("id", "run", "rule", "severity", "first_step", "last_step", "state", "message"):
        assert field in alert
    assert alert["first_step"] == NAN_STEP
    acked = client.post(f"/api/alerts/{alert['id']}/ack", {"note": "fp16 overflow, known"})
    assert acked["state"] == "acked" and acked["note"] == "fp16 overflow, known"
    assert alert["id"] in [a["id"] for a in client.get("/api/alerts", params={"state": "acked"})]
    done = client.post(f"/api/alerts/{alert['id']}/resolve", {"note": "lowered the lr"})
    assert done["state"] == "resolved"
    history = client.get(f"/api/alerts/{alert['id']}")["history"]
    assert [(h["event"], h["note"]) for h in history][-2:] == [
        ("acked", "fp16 overflow, known"),
        ("resolved", "lowered the lr"),
    ]


def test_checkpoint_advice_for_a_real_run(served):
    _, client, _ = served
    advice = client.get("/api/runs/yongshuaiy__LLMs-final__output-checkpoint-669/checkpoints")
    assert advice["recommended"]["step"] == 200  # the overfit run: keep the step before eval_loss turned
    assert 200 not in advice["deletable"] and advice["checkpoints"]
    for c in advice["checkpoints"]:
        assert {"step", "path", "complete", "bytes", "value"} <= set(c)
    health = client.get("/api/runs/a/health")
    assert health and {"id", "phase", "title", "state", "evidence"} <= set(health[0])


def test_checkpoint_index_advice_and_marker_of_a_verl_run(served):
    _, client, _ = served
    advice = wait_for(lambda: client.get("/api/runs/ck/checkpoints")["checkpoints"], "the checkpoint index")
    advice = client.get("/api/runs/ck/checkpoints")
    assert [(c["step"], c["complete"]) for c in advice["checkpoints"]] == [
        (10, True),
        (20, True),
        (30, True),
        (40, False),
    ]
    assert advice["recommended"]["step"] == 20 and advice["metric"] == "val/loss"
    assert advice["deletable"] == [10]  # not the best, not the marker's 30, not the newest incomplete 40
    assert all(c["bytes"] > 0 for c in advice["checkpoints"])
    by_max = client.get("/api/runs/ck/checkpoints", params={"metric": "val/loss", "direction": "max"})
    assert by_max["direction"] == "max" and by_max["recommended"]["step"] != 20
    with pytest.raises(ApiError) as e:
        client.get("/api/runs/ck/checkpoints", params={"direction": "sideways"})
    assert e.value.status == 400 and "direction must be" in str(e.value)
    assert next(r for r in client.get("/api/runs") if r["id"] == "ck")["recommended_step"] == 20
    epochs = client.get(
        "/api/runs/yongshuaiy__LLMs-final__output-checkpoint-669/epochs", params={"metric": "loss"}
    )
    assert (
        epochs["epoch_metric"] == "epoch" and len(epochs["epochs"]) == 3 and epochs["epochs"][0]["points"] > 0
    )


def test_paths_outside_the_roots_are_refused(served, tmp_path):
    _, client, root = served
    with pytest.raises(ApiError) as e:
        client.post("/api/ingest", {"paths": [str(tmp_path)]})
    assert e.value.status == 403 and "outside the watched roots" in str(e.value)
    with pytest.raises(ApiError):
        client.post("/api/ingest", {"paths": [str(root / ".." / "..")]})
    assert client.post("/api/ingest", {"paths": [str(root / "a")]})["queued"] == [str((root / "a").resolve())]


def test_stream_plays_back_from_a_step(served):
    _, client, _ = served
    events = list(
        client.stream("/api/runs/a/stream", params={"metric": "train/loss", "start_step": 4990, "speed": 10})
    )
    points = [e for e in events if e["event"] == "point"]
    assert [e["step"] for e in points] == list(range(4990, 5001))
    assert all(e["metric"] == "train/loss" for e in points)
    assert events[-1]["event"] == "playback_complete"


def test_an_incident_is_acked_and_resolved_through_all_of_its_alerts(tmp_path):
    # issue 23.2: the alert review acts on incidents; acting on one sets each of its alerts, the evidence
    from collector.api.models import IncidentChange

    (tmp_path / "root" / "spiky").mkdir(parents=True)
    with (tmp_path / "root" / "spiky" / "metrics.jsonl").open("w") as f:
        # recurring gradient spikes, one incident: two over, the last one (the last step) still open
        for step in range(1, 2001):
            grad = 400.0 if step in (500, 900, 2000) else 1.0 + (step % 5) * 0.01
            f.write(
                json.dumps({"step": step, "data": {"train/loss": 2.0 - step * 1e-4, "train/grad_norm": grad}})
            )
            f.write("\n")
    daemon = Daemon(tmp_path / "rw.duckdb", [tmp_path / "root"]).start()
    try:
        client = daemon.client()
        spec = httpx.get(base_url(daemon) + "/openapi.json").json()
        assert "IncidentChange" in json.dumps(spec["paths"]["/api/incidents/{incident_id}/ack"])
        incident = wait_for(
            lambda: next(
                (
                    i
                    for i in client.get("/api/incidents", params={"rule": "grad_spike"})
                    if i["alert_count"] == 3
                ),
                None,
            ),
            "the three spikes as one incident",
        )
        states = {a: client.get(f"/api/alerts/{a}")["state"] for a in incident["alert_ids"]}
        first, second, last = incident["alert_ids"]
        assert incident["state"] == "open" and states == {first: "resolved", second: "resolved", last: "open"}
        acked = IncidentChange.model_validate(
            client.post(f"/api/incidents/{incident['id']}/ack", {"note": "known: bad shard"})
        )
        assert acked.changed == [last] and acked.incident.state == "acked"  # only what was open
        assert (client.get(f"/api/alerts/{last}")["note"]) == "known: bad shard"
        again = client.post(f"/api/incidents/{incident['id']}/ack", {"note": "twice"})
        assert again["changed"] == []  # nothing open is left to acknowledge
        done = client.post(f"/api/incidents/{incident['id']}/resolve", {"note": "skipped the shard"})
        assert done["changed"] == [last]
        assert {client.get(f"/api/alerts/{a}")["state"] for a in incident["alert_ids"]} == {"resolved"}
        assert done["incident"]["id"] == incident["id"] and done["incident"]["alert_count"] == 3
        for unknown in (
            999999,
            incident["alert_ids"][1],
        ):  # no alert; an alert that is evidence, not the incident
            with pytest.raises(ApiError) as e:
                client.post(f"/api/incidents/{unknown}/resolve", {})
            assert e.value.status == 404 and "no incident" in str(e.value)
    finally:
        daemon.ensure_stopped()


def test_run_detail_says_what_the_run_page_says_instead_of_drawing(tmp_path):
    # issue 23.1: a series logged twice, a constant, a value logged once at the end, and the run's kind come
    # from the API (the page draws, it does not decide)
    run = tmp_path / "root" / "grpo"
    run.mkdir(parents=True)
    with (run / "metrics.jsonl").open("w") as f:
        for step in range(1, 51):
            score = 0.2 + step * 0.01
            data = {"critic/score/mean": score, "critic/rewards/mean": score, "actor/lr": 5e-4}
            data |= {"actor/entropy": 1.0 - step * 0.001, "actor/kl_loss": step * 1e-3}
            f.write(json.dumps({"step": step, "data": data}) + "\n")
            if step == 10:  # one evaluation so far (make demo's val/loss early on): a series to come
                f.write(json.dumps({"step": step, "data": {"val-core/acc": 0.3}}) + "\n")
        f.write(json.dumps({"step": 50, "data": {"train_runtime": 1234.5}}) + "\n")
    daemon = Daemon(tmp_path / "rw.duckdb", [tmp_path / "root"]).start()
    try:
        client = daemon.client()

        def all_metrics() -> dict | None:
            detail = client.get("/api/runs/grpo")
            return detail if len(detail["metrics"]) == 7 else None

        detail = wait_for(all_metrics, "every metric")
        facts = {m["metric"]: m for m in detail["metrics"]}
        assert detail["kind"] == "rl"
        assert facts["critic/score/mean"]["same_as"] == "critic/rewards/mean"
        assert facts["critic/rewards/mean"]["same_as"] is None
        assert facts["actor/lr"]["constant"] == 5e-4 and facts["actor/entropy"]["constant"] is None
        assert facts["train_runtime"]["summary_only"] and not facts["actor/entropy"]["summary_only"]
        assert not facts["val-core/acc"]["summary_only"]  # one point at step 10 of 50: not the run's end
        assert facts["actor/kl_loss"]["last_value"] == pytest.approx(0.05)
    finally:
        daemon.ensure_stopped()
