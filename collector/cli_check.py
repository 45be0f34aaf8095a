"""`python -m collector check RUN_OR_PATH [--fail-on warn|error] [--db DB] [--json]`: judge a run in one pass.

For CI, scripts and agents: prints the verdict per run (OK / WARN / ERROR, its alerts with the action of each
error alert, the checkpoint to keep)
and exits 2 when an alert (open or since cleared) is at or above `--fail-on` (default error), 1 on a usage
error, 0 otherwise. The reading and the queries are the CLI's own (`ingest`, then `runs` and `alerts`).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

_RANK = {"info": 0, "warn": 1, "error": 2}


def check(
    args: argparse.Namespace,
    ingest: Callable[[argparse.Namespace], int],
    query: Callable[[argparse.Namespace], Any],
) -> int:
    """`check`: a path is read once into a database (a temporary one unless --db) and every run found in it
    is judged; a run id is judged from --db. Exit 2 when any alert (open or since cleared) is at least
    --fail-on, 1 on a usage error, else 0."""
    import tempfile

    target = Path(args.target).expanduser()
    with tempfile.TemporaryDirectory(prefix="runwatch-check-") as tmp:
        if target.exists():
            db = args.db.expanduser().resolve() if args.db else Path(tmp) / "check.duckdb"
            reading = argparse.Namespace(db=db, json=True, paths=[target])
            with io.StringIO() as said, contextlib.redirect_stdout(said):
                ingest(reading)
                not_read = json.loads(said.getvalue() or "{}").get("not_read", {})
            run_ids = None
        elif args.db is not None:
            db, run_ids, not_read = args.db.expanduser().resolve(), [args.target], {}
        else:
            raise ValueError(f"{target} does not exist (give a run folder or file, or a run id with --db)")
        listing = argparse.Namespace(db=db, command="runs")
        runs = [r for r in query(listing) if run_ids is None or r["id"] in run_ids]
        if run_ids is not None and not runs:
            raise ValueError(f"no run {args.target!r} in {db}")
        verdicts = []
        for r in runs:
            alerts = query(argparse.Namespace(db=db, command="alerts", run=r["id"], rule=None, severity=None,
                                               state="all"))  # fmt: skip
            worst = max((a["severity"] for a in alerts), key=_RANK.__getitem__, default=None)
            verdicts.append(
                {
                    "run": r["id"],
                    "status": r["status"],
                    "last_step": r["last_step"],
                    "recommended_step": r["recommended_step"],
                    "recommendation_reason": _recommendation_reason(db, r, query),
                    # files and entries of the run not read, with why (as `ingest` lists them)
                    "not_read": not_read.get(r["id"], []),
                    "verdict": worst if worst in ("warn", "error") else "ok",
                    "alerts": [
                        {
                            k: a.get(k)
                            for k in (
                                "rule",
                                "severity",
                                "metric",
                                "first_step",
                                "last_step",
                                "message",
                                "action",
                            )
                        }
                        for a in sorted(alerts, key=lambda a: (-_RANK[a["severity"]], a["first_step"]))
                    ],
                }
            )
    failed = any(_RANK.get(v["verdict"], 0) >= _RANK[args.fail_on] for v in verdicts)
    if args.json:
        print(json.dumps({"runs": verdicts, "fail_on": args.fail_on, "failed": failed}, allow_nan=True))
    else:
        for v in verdicts or [{"run": str(target), "verdict": "no run found", "alerts": [], "status": "-"}]:
            keep = v.get("recommended_step")
            print(f"{v['run']}: {v['verdict'].upper()} (status {v['status']}"
                  + (f", keep step {keep})" if keep is not None else ")"))  # fmt: skip
            if v.get("recommendation_reason"):
                print(f"  checkpoint: {v['recommendation_reason']}")
            for a in v["alerts"]:
                print(
                    f"  [{a['severity']}] {a['rule']} {a['metric']} @{a['first_step']}-{a['last_step']}: {a['message']}"
                )
                if a.get("action"):  # what to do: the checkpoint to go back to and the resume command
                    print(f"    action: {a['action']['text']}")
    return 2 if failed else 0


def _recommendation_reason(db: Path, run: dict, query: Callable[[argparse.Namespace], Any]) -> str:
    """Why `recommended_step` is what it is: the advice's reason, or why there is none (never a bare null)."""
    asked = argparse.Namespace(db=db, command="checkpoints", run=run["id"], metric=None, direction=None)
    advice = query(asked)
    rec = advice.get("recommended")
    if run["recommended_step"] is not None and rec:
        return rec["reason"]
    return advice.get("no_recommendation") or "No checkpoint of this run was seen or inferred."
