"""schemathesis against the collector's own OpenAPI spec, over real HTTP to a real daemon: no input is a 5xx.

Every operation gets generated paths, queries and bodies (run ids with `..` and `%00`, huge and negative
numbers, bad enums); `/stream` is read for a bounded time (its body never ends on a live run). The checks
are the ones promised: no server error, and every 200 answer parses into the response model its route names
in the spec. Bounded: `EXAMPLES` cases per operation, derandomised.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import Counter

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from collector.api import models
from collector.core.runtime import read_marker, read_token
from tests.collector.test_api import write_checkpointed_run, write_run
from tests.collector.test_daemon_support import Daemon, wait_for

EXAMPLES = 40
STREAM_READ_S = 0.5
KNOWN_RUNS = ("a", "ck")


@pytest.fixture(scope="module")
def fuzz_daemon(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz")
    root = tmp / "root"
    (root / "a").mkdir(parents=True)
    write_run(root / "a" / "metrics.jsonl", steps=3000)
    write_checkpointed_run(root / "ck")
    daemon = Daemon(tmp / "rw.duckdb", [root]).start()
    client = daemon.client()
    wait_for(lambda: len(client.get("/api/runs")) == 2, "both runs ingested")
    wait_for(lambda: client.get("/api/alerts"), "an alert to act on")
    yield daemon
    daemon.ensure_stopped()


def answer_matches_its_model(case, response) -> None:
    """A 200 answer parses into the response model its route names in the spec (`collector.api.models`).
    Checked with the model, not a JSON Schema validator: the API writes NaN bare, which is a number to
    Python and pydantic but no JSON value to schemathesis' validator."""
    if response.status_code != 200:
        return
    declared = case.operation.definition.raw["responses"]["200"]["content"]["application/json"]["schema"]
    nullable = "anyOf" in declared  # `Model | None` (a run's stop state: null when none is known)
    if nullable:
        declared = next(d for d in declared["anyOf"] if d.get("type") != "null")
    name = (declared.get("items") or declared)["$ref"].rsplit("/", 1)[-1]
    model = getattr(models, name)
    shape = list[model] if declared.get("type") == "array" else model
    shape = shape | None if nullable else shape
    TypeAdapter(shape).validate_python(json.loads(response.content))


def call(case, daemon) -> int:
    """Send one generated case; the status code (a stream is read for a bounded time)."""
    headers = {"Authorization": f"Bearer {read_token(daemon.db)}"}
    if not case.path.endswith("/stream"):
        response = case.call(headers=headers, timeout=30)
        case.validate_response(response, checks=(not_a_server_error,))
        answer_matches_its_model(case, response)
        return response.status_code
    # A live stream never ends: its status and first bytes are what can fail.
    base = f"http://127.0.0.1:{read_marker(daemon.db)['port']}"
    timeout = httpx.Timeout(10, read=STREAM_READ_S)  # a quiet live stream sends nothing until a new point
    with httpx.stream(
        "GET", base + case.formatted_path, params=case.query, headers=headers, timeout=timeout
    ) as r:
        deadline = time.monotonic() + STREAM_READ_S
        with contextlib.suppress(httpx.ReadTimeout):
            for _ in r.iter_raw():
                if time.monotonic() > deadline:
                    break
        assert r.status_code < 500, f"{case.path} {case.query}: {r.status_code}"
        return r.status_code


def test_no_input_is_a_server_error(fuzz_daemon):
    base = f"http://127.0.0.1:{read_marker(fuzz_daemon.db)['port']}"
    schema = schemathesis.openapi.from_url(f"{base}/openapi.json")
    statuses: Counter[int] = Counter()
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 12, [op.label for op in operations]
    for operation in operations:

        @given(
            case=st.one_of(operation.as_strategy(), operation.as_strategy(GenerationMode.NEGATIVE)),
            known=st.booleans(),
            run=st.sampled_from(KNOWN_RUNS),
        )
        @settings(
            max_examples=EXAMPLES,
            derandomize=True,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            phases=(Phase.explicit, Phase.generate),  # no shrinking: a failure prints its case as generated
        )
        def fuzz(case, known, run):
            # Half the cases name a run and alert that exist, so the queries behind the 404s are reached.
            if known and case.path_parameters:
                case.path_parameters = {**case.path_parameters}
                if "run" in case.path_parameters:
                    case.path_parameters["run"] = run
                if "alert_id" in case.path_parameters:
                    case.path_parameters["alert_id"] = 1
            try:
                statuses[call(case, fuzz_daemon)] += 1
            except Exception as err:
                raise AssertionError(
                    f"{case.method} {case.formatted_path} query={case.query} body={case.body!r}: {err!r}"
                ) from err

        fuzz()
    print(
        f"schemathesis: {sum(statuses.values())} requests over {len(operations)} operations: {dict(statuses)}"
    )
    assert not any(code >= 500 for code in statuses)
