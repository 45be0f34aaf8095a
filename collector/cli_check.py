"""`python -m collector check RUN_OR_PATH [--fail-on warn|error] [--db DB] [--json]`: judge a run in one pass.

For CI, scripts and agents: prints the count first (`N runs: E errors, W warnings, H healthy`, then `, N with no
points read` when there are such runs), then each troubled run (errors first: its alerts with the action of each,
the checkpoint to keep), then one line per healthy run, then each run of which no point was read (EMPTY). Exits 2 when an error alert (open or since cleared) was found, 3 when only warnings were and `--fail-on warn`,
1 on a usage error, 0 otherwise. The reading and the queries are the CLI's own (`ingest`, then `runs`, `alerts` and
`incidents`): each troubled run lists its incidents (each with its alert count); `--json` has both per run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collector.cli_tables import MIN_NAME, steps, width, wrap
from collector.core.printable import middle, printable
from collector.core.runtime import default_db
from collector.runs.lookup import no_run

if TYPE_CHECKING:
    from collector.api.models import Alert, Incident, RunSummary

_RANK = {"info": 0, "warn": 1, "error": 2}
# The exit codes of every command (README, "Exit codes"): a usage error is never read as a finding.
EXIT_OK, EXIT_USAGE, EXIT_ERROR_FOUND, EXIT_WARNINGS_FOUND = 0, 1, 2, 3


def check(
    args: argparse.Namespace,
    ingest: Callable[[argparse.Namespace], int],
    asking: Callable[[Path], contextlib.AbstractContextManager[Callable[[argparse.Namespace], Any]]],
) -> int:
    """`check`: a path is read once into a database (a temporary one unless --db) and every run found in it
    is judged; a run id is judged from --db (default $RUNWATCH_DB, else .runwatch/runwatch.duckdb). `asking(db)`
    gives what answers the CLI's commands on the database, each answer as its type (`collector.api.models`),
    for all of check's questions (`cli.asking_typed`). Returns the exit code (`exit_code`)."""
    import tempfile

    target = Path(args.target).expanduser()
    with tempfile.TemporaryDirectory(prefix="runwatch-check-") as tmp:
        if target.exists():
            db = args.db.expanduser().resolve() if args.db else Path(tmp) / "check.duckdb"
            reading = argparse.Namespace(db=db, json=True, paths=[target])
            with io.StringIO() as said, contextlib.redirect_stdout(said):
                ingest(reading)
                read = json.loads(said.getvalue() or "{}")
            # the runs found under the path, not every run of a --db that holds others too
            not_read, run_ids = read.get("not_read", {}), read.get("runs", [])
        elif args.db is not None or default_db().exists():
            db, run_ids, not_read = (args.db or default_db()).expanduser().resolve(), [args.target], {}
        else:
            raise ValueError(f"{target} does not exist (give a run folder or file, or a run id with --db)")
        with asking(db) as query:
            verdicts = _verdicts(db, run_ids, not_read, query)
    counts = {
        level: sum(v.verdict == level for v in verdicts) for level in ("error", "warn", "ok", "no_data")
    }
    code = exit_code(counts, args.fail_on)
    if args.json:
        summary = {"runs": len(verdicts), "errors": counts["error"], "warnings": counts["warn"]}
        summary |= {"healthy": counts["ok"], "no_data": counts["no_data"], "exit_code": code}
        print(json.dumps({"runs": [v.to_json() for v in verdicts], "fail_on": args.fail_on,
                          "failed": code != EXIT_OK, "summary": summary}, allow_nan=True))  # fmt: skip
    else:
        print("\n".join(report(verdicts, counts, target)))
    return code


def _verdicts(
    db: Path, run_ids: list[str] | None, not_read: dict, query: Callable[[argparse.Namespace], Any]
) -> list[Verdict]:
    """Each run's verdict (of `run_ids`: a run id, or the runs read from a path; else of every run in `db`), asking `query` (each answer as its type,
    `cli.typed`): the runs, then every run's alerts and incidents in one question each, then each run's advice."""
    runs: list[RunSummary] = [
        r for r in query(argparse.Namespace(db=db, command="runs")) if run_ids is None or r.id in run_ids
    ]
    if run_ids is not None and len(run_ids) == 1 and not runs:
        raise ValueError(f"{no_run(run_ids[0])} in {db}")
    one = run_ids[0] if run_ids is not None and len(run_ids) == 1 else None
    alerts_of = _by_run(query(argparse.Namespace(db=db, command="alerts", run=one, rule=None, severity=None,
                                                 state="all")))  # fmt: skip
    incidents_of = _by_run(query(argparse.Namespace(db=db, command="incidents", run=one, severity=None,
                                                    state="all", json=True)))  # fmt: skip
    verdicts = []
    for r in runs:
        alerts, incidents = alerts_of.get(r.id, []), incidents_of.get(r.id, [])
        worst = max((a.severity for a in alerts), key=_RANK.__getitem__, default=None)
        verdicts.append(
            Verdict(
                run=r,
                recommendation_reason=_recommendation_reason(db, r, query),
                not_read=not_read.get(r.id, []),
                verdict=_level(worst, r),
                alerts=sorted(alerts, key=lambda a: (-_RANK[a.severity], a.first_step)),
                incidents=sorted(incidents, key=lambda i: (-_RANK[i.severity], i.first_step)),
            )
        )
    return verdicts


def _level(worst: str | None, run: RunSummary) -> str:
    """A run's verdict from its worst alert: `error` or `warn`; else `ok`, or `no_data` for a run of which no
    point was read (not healthy: nothing was judged; its files are listed)."""
    if worst in ("warn", "error"):
        return worst
    return "ok" if run.last_step is not None else "no_data"


@dataclass
class Verdict:
    """One run judged: its summary, why its checkpoint is the one to keep, what of it was not read, its worst
    level (`error`, `warn`, `ok`, `no_data`), its alerts and incidents (the most severe first)."""

    run: RunSummary
    recommendation_reason: str
    not_read: list[dict]  # files and entries of the run not read, with why (as `ingest` lists them)
    verdict: str
    alerts: list[Alert]
    incidents: list[Incident]

    def to_json(self) -> dict:
        """The run's entry of `check --json` (README, "check")."""
        return {
            "run": self.run.id,
            "status": self.run.status,
            "last_step": self.run.last_step,
            "recommended_step": self.run.recommended_step,
            "recommendation_reason": self.recommendation_reason,
            "not_read": self.not_read,
            "verdict": self.verdict,
            "alerts": [
                {
                    "rule": a.rule,
                    "severity": a.severity,
                    "metric": a.metric,
                    "first_step": a.first_step,
                    "last_step": a.last_step,
                    "message": a.message,
                    "action": a.action.model_dump(exclude_unset=True) if a.action is not None else None,
                }
                for a in self.alerts
            ],
            # what a person reads: the alerts grouped by trouble (each names its alerts, `alert_ids`)
            "incidents": [i.model_dump(exclude_unset=True) for i in self.incidents],
        }


def exit_code(counts: dict[str, int], fail_on: str) -> int:
    """2 when an error was found; 3 when only warnings were and `fail_on` is warn; else 0."""
    if counts["error"]:
        return EXIT_ERROR_FOUND
    if counts["warn"] and fail_on == "warn":
        return EXIT_WARNINGS_FOUND
    return EXIT_OK


def report(verdicts: list[Verdict], counts: dict[str, int], target: Path) -> list[str]:
    """The verdict for people, fitted to the terminal: the count first, then each troubled run (errors
    first) with its incidents, their actions and the checkpoint to keep, then one line per healthy run."""
    n = len(verdicts)
    empty = f", {counts['no_data']} with no points read" if counts["no_data"] else ""
    lines = [f"{n} run{'s' * (n != 1)}: {_count(counts['error'], 'error')}, {_count(counts['warn'], 'warning')},"
             f" {counts['ok']} healthy{empty}"]  # fmt: skip
    if not verdicts:
        return [*lines, *wrap(f"no run found in {target}")]
    order = sorted(verdicts, key=lambda v: (-_RANK.get(v.verdict, 0), v.verdict == "no_data"))
    for v in order:
        keep = v.run.recommended_step
        said = f"(status {v.run.status}" + (f", keep step {keep})" if keep is not None else ")")
        label = "EMPTY" if v.verdict == "no_data" else v.verdict.upper().ljust(5)
        room = width() - len(label) - len(said) - 4
        lines.append(f"{label}  {middle(printable(v.run.id), max(room, MIN_NAME))}  {said}")
        if v.verdict == "ok":
            continue
        if v.verdict == "no_data":
            why = "; ".join(
                f"{printable(str(f.get('path', '')))}: {f.get('reason', '')}" for f in v.not_read[:2]
            )
            lines += wrap(f"no point was read{f' ({why})' if why else ''}: nothing to judge", indent="  ")
            continue
        for i in v.incidents:  # what a person reads: the alerts grouped by trouble
            where = steps(i.first_step, i.last_step)
            count = f" ({i.alert_count} alerts at steps {_steps(i.steps)})" if i.alert_count > 1 else ""
            rules = " -> ".join(i.rules)
            lines += wrap(f"[{i.severity}] {rules} {i.metric} @{where}{count}: {i.message}", indent="  ")
            if i.action:  # what to do: the checkpoint to go back to and the resume command
                lines += wrap(f"action: {i.action.text}", indent="    ")
        if v.recommendation_reason:
            lines += wrap(f"checkpoint: {v.recommendation_reason}", indent="  ")
    return lines


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' * (n != 1)}"


def _by_run(rows: list[Alert] | list[Incident]) -> dict[str, list]:
    """Rows (alerts, incidents) by their run, each run's in the order given."""
    out: dict[str, list] = {}
    for row in rows:
        out.setdefault(row.run, []).append(row)
    return out


def _steps(steps: list[int]) -> str:
    return ", ".join(str(s) for s in steps[:6]) + (", ..." if len(steps) > 6 else "")


def _recommendation_reason(db: Path, run: RunSummary, query: Callable[[argparse.Namespace], Any]) -> str:
    """Why `recommended_step` is what it is: the advice's reason, or why there is none (never a bare null)."""
    asked = argparse.Namespace(db=db, command="checkpoints", run=run.id, metric=None, direction=None)
    advice = query(asked)
    if run.recommended_step is not None and advice.recommended:
        return advice.recommended.reason
    return advice.no_recommendation or "No checkpoint of this run was seen or inferred."
