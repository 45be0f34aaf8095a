"""`runwatch mcp [--db DB] [--root ROOT...]`: runwatch for coding agents, over the Model Context Protocol (stdio).

Tools: `list_runs` (each run with its verdict), `run_incidents` (a run's incidents with their actions),
`checkpoint_advice`, `list_metrics`, `metric_history` (downsampled, min/max per bucket so spikes stay
visible) and `request_stop` (a reason is required; the stop is refused without one).

Where the answers come from respects "the collector is the only process that opens the database": through the
running collector's API when there is one; else, given `--root`, a collector is started for the database and
roots (detached, as the dashboard starts one) and asked; else each call opens the database, answers and closes
it (as the CLI does), so the server never holds the file between calls. Non-finite numbers are sent as the
strings "NaN", "Infinity", "-Infinity" (MCP speaks strict JSON).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from collector.api import incidents as api_incidents
from collector.api import runs as api_runs
from collector.api import series as api_series
from collector.api import stop as api_stop
from collector.api.client import ApiError, Client
from collector.api.models import StopState
from collector.runs.lookup import NotFound
from collector.runs.service import RunService
from collector.store.db import Store, StoreError

DEFAULT_DB = Path(".runwatch") / "runwatch.duckdb"
HISTORY_POINTS = 200  # buckets of a metric history by default: enough to see its shape, small for a model


def strict(value: Any) -> Any:
    """`value` with every non-finite float written as a string (strict JSON has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict(v) for v in value]
    return value


class Runwatch:
    """The database's answers: from its collector when one runs (started when `roots` are given), else read
    from the file directly for the length of one call."""

    def __init__(self, db: Path, roots: tuple[Path | str, ...] = ()) -> None:
        self.db = db
        self.roots = roots

    def _client(self) -> Client | None:
        client = Client.for_db(self.db)
        if client is None and self.roots:
            from app.connection import CollectorUnavailable, connect

            try:
                connect(self.db, self.roots)
            except CollectorUnavailable as e:
                raise ToolError(str(e)) from None
            client = Client.for_db(self.db)
        return client

    def ask(
        self,
        method: str,
        path: str,
        params: dict | None,
        direct: Callable[[Store], Any],
        body: dict | None = None,
    ) -> Any:
        try:
            client = self._client()
            if client is not None:
                try:
                    return client.post(path, body) if method == "POST" else client.get(path, params=params)
                finally:
                    client.close()
            if not self.db.is_file():
                raise ToolError(
                    f"no database at {self.db} and no collector for it: start `runwatch serve --db {self.db} ROOT...` "
                    "or give `runwatch mcp --root ROOT`"
                )
            store = Store(self.db)
            try:
                return direct(store)
            finally:
                store.close()
        except (ApiError, StoreError, NotFound, ValueError, OSError) as e:
            raise ToolError(str(e)) from None


def verdict(run: dict) -> str:
    """OK / WARN / ERROR from the run's open alerts (as `runwatch check` says it)."""
    counts = run.get("open_alerts") or {}
    return "ERROR" if counts.get("error") else ("WARN" if counts.get("warn") else "OK")


def build(source: Runwatch) -> MCPServer:
    """The MCP server and its tools over `source`."""
    server = MCPServer(
        "runwatch",
        instructions=(
            "runwatch watches LLM fine-tuning runs: start with list_runs, then a run's incidents, checkpoint "
            "advice or metric history. request_stop asks a training run to stop (it saves a checkpoint first)."
        ),
    )

    def run_path(run: str, tail: str = "") -> str:
        return f"/api/runs/{quote(run, safe='/')}{tail}"

    @server.tool()
    def list_runs() -> dict[str, Any]:
        """Every run with its verdict (OK, WARN, ERROR from its open alerts), status, last and total steps,
        latest train/val loss, open alert counts, the anomaly (first unresolved error) and the checkpoint step
        the advice keeps; its kind (rl or sft) and, what an RL run is judged by instead of a loss, its latest
        reward and validation score."""
        runs = source.ask("GET", "/api/runs", None, lambda s: api_runs.runs(RunService(s)))
        keep = ("id", "status", "last_step", "total_steps", "train_loss", "val_loss", "open_alerts")
        more = (
            "anomaly_detected",
            "anomaly_reason",
            "recommended_step",
            "path",
            "format",
            "kind",
            "reward",
            "val_score",
        )
        return strict({"runs": [{k: r.get(k) for k in keep + more} | {"verdict": verdict(r)} for r in runs]})

    @server.tool()
    def run_incidents(run: str, state: str = "open") -> dict[str, Any]:
        """A run's incidents (its alerts grouped by trouble, the cause first): rule, rules, severity, metric,
        steps, alert count, worst value, message, and the action to take (the checkpoint to go back to, the
        command that resumes from it, the steps to skip). `state`: open, acked, resolved or all."""
        if state not in ("open", "acked", "resolved", "all"):
            raise ToolError(f"state {state!r} is not one of open, acked, resolved, all")
        found = source.ask(
            "GET",
            f"/api/runs/{quote(run, safe='/')}/incidents",
            {"state": state},
            lambda s: api_incidents.incidents(RunService(s), run, None, state),
        )
        return strict({"run": run, "state": state, "incidents": found})

    @server.tool()
    def checkpoint_advice(
        run: str, metric: str | None = None, direction: str | None = None
    ) -> dict[str, Any]:
        """Which checkpoint of a run to keep and why, every checkpoint with its evaluation, and which are safe to
        delete. `metric`/`direction` (min or max) choose the deciding evaluation (default: the run's own)."""
        params = {k: v for k, v in (("metric", metric), ("direction", direction)) if v}
        return strict(
            source.ask(
                "GET",
                run_path(run, "/checkpoints"),
                params,
                lambda s: RunService(s).advice(run, metric, direction),
            )
        )

    @server.tool()
    def list_metrics(run: str) -> dict[str, Any]:
        """The metrics a run logs, each with its point count and first and last step."""
        found = source.ask("GET", run_path(run), None, lambda s: api_runs.run(RunService(s), run))
        return strict({"run": run, "metrics": found.get("metrics")})

    @server.tool()
    def metric_history(
        run: str,
        metric: str,
        points: int = HISTORY_POINTS,
        start_step: int | None = None,
        end_step: int | None = None,
    ) -> dict[str, Any]:
        """One metric of a run over steps, at most `points` buckets (raw points when the range holds fewer):
        `steps`, `values`, and per bucket `min`, `max` (so a spike or a NaN in a bucket stays visible)."""
        if not 1 <= points <= 20_000:
            raise ToolError(f"points {points} is outside 1-20000")
        params = {"metric": metric, "points": points}
        params |= {k: v for k, v in (("start", start_step), ("end", end_step)) if v is not None}
        answer = source.ask(
            "GET",
            run_path(run, "/metrics"),
            params,
            lambda s: api_series.metrics(s, run, [metric], points, start_step, end_step),
        )
        return strict(answer["series"][0])

    @server.tool()
    def request_stop(run: str, reason: str) -> dict[str, Any]:
        """Ask a training run to stop: runwatch writes RUN_DIR/runwatch.stop and the trainer (runwatch's verl
        trainer, the Hugging Face callback) saves a checkpoint, stops and records the reason. `reason` is
        required: say why (it is kept in the request and the run's status). Returns the request (`run`, `path`,
        `request`: the one in force, `written`) and the stop's state after it, as `GET /api/runs/{run}/stop`
        answers it: `state` (written, already_asked; on a team's lake asked, until the collector that owns
        the run writes or refuses it), `asked_at`, `by`, `reason`, `done_at`, `outcome`, `collector`,
        `collector_live`, and `said`, the state as `collector run` says it."""
        if not reason or not reason.strip():
            raise ToolError("refused: a stop needs a reason (say why the run should stop)")
        asked = source.ask(
            "POST",
            run_path(run, "/stop"),
            None,
            lambda s: api_stop.request_stop(s, run, reason.strip()),
            body={"reason": reason.strip()},
        )
        state = source.ask("GET", run_path(run, "/stop"), None, lambda s: api_stop.stop_state(s, run))
        if state is not None:  # (None only where the request went away since: a trainer removed it)
            asked |= state | {"said": StopState.model_validate(state).said(time.time())}
        return strict(asked)

    return server


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="runwatch mcp", description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    ap.add_argument(
        "--db",
        type=Path,
        default=Path(os.environ.get("RUNWATCH_DB") or DEFAULT_DB),
        help="the DuckDB file (default $RUNWATCH_DB or .runwatch/runwatch.duckdb)",
    )
    ap.add_argument(
        "--root",
        action="append",
        default=[],
        help="start a collector on this root when none runs (repeatable; else the database is read per call)",
    )
    args = ap.parse_args(argv)
    roots = tuple(r if r.startswith("ssh://") else Path(r).expanduser().resolve() for r in args.root)
    server = build(Runwatch(args.db.expanduser().resolve(), roots))
    print(f"runwatch mcp: serving {args.db} over stdio", file=sys.stderr)
    server.run("stdio")
    return 0
