"""The training platform's callback files: `{job_id}_metrics.jsonl` (nested groups) and `{job_id}_status.json`."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from collector.formats import jsonl, platform_status
from tests.collector.test_parsers_support import FuzzSample, points_as_tuples

T0 = datetime(2026, 11, 24, 7, 0, tzinfo=UTC).timestamp()


def test_metrics_lines_flatten_their_groups_and_read_the_iso_timestamp():
    lines = [
        {
            "step": 1,
            "timestamp": "2026-11-24T07:00:00Z",
            "loss": {"total": 1.5, "policy": 1.25},
            "reward": {"mean": 0.25, "std": 0.5},
            "kl": {"value": 0.01},
        },
        {
            "step": 2,
            "timestamp": "2026-11-24T07:00:10+00:00",
            "loss": {"total": 1.25, "policy": None},
            "reward": {"mean": 0.5, "std": 0.25},
            "kl": {"value": 0.02},
        },
        {"step": 3, "timestamp": T0 + 20, "loss": {"total": 1.0}},
    ]
    data = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    result = jsonl.parse(data)
    assert result.bad == []
    assert points_as_tuples(result) == [
        (1, "loss/total", 1.5, T0),
        (1, "loss/policy", 1.25, T0),
        (1, "reward/mean", 0.25, T0),
        (1, "reward/std", 0.5, T0),
        (1, "kl/value", 0.01, T0),
        (2, "loss/total", 1.25, T0 + 10),
        (2, "reward/mean", 0.5, T0 + 10),
        (2, "reward/std", 0.25, T0 + 10),
        (2, "kl/value", 0.02, T0 + 10),
        (3, "loss/total", 1.0, T0 + 20),
    ]


def status_doc(**fields) -> bytes:
    doc = {
        "job_id": "job-7",
        "status": "running",
        "current_step": 120,
        "total_steps": 1000,
        "anomaly_detected": False,
        "anomaly_reason": None,
        "updated_at": "2026-11-24T07:00:00Z",
    } | fields
    return json.dumps(doc, indent=2).encode()


def test_status_reads_into_runwatch_terms_and_keeps_the_platform_keys():
    result = platform_status.parse(status_doc())
    assert result.bad == []
    info = result.info
    assert info["state"] == "running" and info["status"] == "running"
    assert info["current_step"] == 120 and info["total_steps"] == 1000
    assert info["updated_at"] == T0 and info["updated_at_iso"] == "2026-11-24T07:00:00Z"
    assert info["job_id"] == "job-7" and info["anomaly_detected"] is False
    run = platform_status.run_info(info)
    assert (run.status, run.total_steps, run.status_info) == ("running", 1000, info)


def test_status_words_and_an_anomaly():
    info = platform_status.parse(
        status_doc(status="FAILED", anomaly_detected=True, anomaly_reason="loss is NaN")
    ).info
    assert info["state"] == "failed" and info["anomaly_reason"] == "loss is NaN"
    assert platform_status.parse(status_doc(status="succeeded")).info["state"] == "completed"
    odd = platform_status.parse(status_doc(status="queued")).info
    assert odd["state"] == "queued" and platform_status.run_info(odd).status is None
    assert platform_status.parse(status_doc(updated_at="yesterday")).info["updated_at"] is None


def test_a_half_written_status_is_one_bad_line_and_read_again_later():
    result = platform_status.parse(status_doc()[:40])
    assert len(result.bad) == 1 and result.consumed == 0 and "status file" in result.bad[0].reason


def test_sniff_wants_the_platform_keys():
    assert platform_status.sniff(status_doc())
    assert not platform_status.sniff(b'{"state": "running", "step": 3}')


# What the garbage fuzz (test_parsers_garbage) damages for this format.
FUZZ = {
    "platform_status": FuzzSample(
        b'{"job_id": "j", "status": "running", "current_step": 3, "updated_at": "2026-11-24T07:00:00Z"}'
    )
}
