"""The files of a run as the API shows them: those read (with the points each gave, and a warning when its
lines gave none), those not read, with the reason, and those whose read fails; and every file with a problem,
over all runs (`problem_files`), so that nothing is skipped in silence."""

from __future__ import annotations

from collections import Counter

from collector import formats
from collector.formats import unread
from collector.runs.lookup import find_run
from collector.store import failing as store_failing
from collector.store import read as store_read
from collector.store.db import Store

PROBLEMS = ("failing", "not_read", "deleted", "bad_lines", "no_points")
_FAILING_KEYS = ("path", "reason", "attempts", "since", "last_failed_at", "next_try_at")


def files_of(store: Store, run_id: str) -> tuple[list[dict], list[dict]]:
    """(`sources`, `skipped_files`) of the run detail: each source with its `warning` (or None); each file not
    read with `path`, `reason`, `bytes`, `copy` (true for a copy of metrics the run reads elsewhere) and
    `expected` (true for a file that is no problem to show: such a copy, or runwatch's own stop request)."""
    sources = [s | {"warning": source_warning(s)} for s in store_read.sources(store, run_id)]
    skipped = [
        {k: f[k] for k in ("path", "reason", "bytes")}
        | {"copy": unread.is_copy(f["reason"]), "expected": unread.is_expected(f["reason"])}
        for f in store_read.skipped_files(store, run_id)
    ]
    return sources, skipped


def failing_of(store: Store, run_id: str) -> list[dict]:
    """`failing_files` of the run detail: each file whose last read failed as a whole, with `path`, `reason`,
    `attempts` (in a row), `since`, `last_failed_at` and `next_try_at` (epoch seconds)."""
    return [{k: f[k] for k in _FAILING_KEYS} for f in store_failing.failing_files(store, run_id)]


def source_warning(source: dict) -> str | None:
    """The sentence for a metrics file whose lines gave no point (None when it gave some, or is not one)."""
    fmt = source["format"]
    metrics_file = fmt in formats.names() and formats.get(fmt).role == "metrics"
    lines = source["lines"] if metrics_file and source["state"] != "deleted" else 0
    return unread.zero_points_warning(lines, source["points"])


def problem_files(store: Store, run: str | None = None) -> list[dict]:
    """Every file (of `run`, or of all runs) that is not read in full, one entry per problem: `run`, `path`,
    `problem` (`failing`: its read fails as a whole and is retried; `not_read`: not a file runwatch reads,
    with why (copies of metrics read elsewhere and runwatch's own stop request are not problems); `deleted`:
    gone, what was read stays; `bad_lines`: lines quarantined; `no_points`: read, but no line gave a point),
    `reason`, and `attempts`, `since`, `next_try_at` (failing files) and `bad_lines` (quarantined lines), else
    null."""
    if run is not None:
        find_run(store, run)  # NotFound: an unknown run has no files, and saying so beats an empty list
    out = [
        _problem(f["run"], f["path"], "failing", f["reason"], attempts=f["attempts"], since=f["since"])
        | {"next_try_at": f["next_try_at"]}
        for f in store_failing.failing_files(store, run)
    ]
    out += [
        _problem(f["run"], f["path"], "not_read", f["reason"])
        for f in store_read.skipped_files(store, run)
        if not unread.is_expected(f["reason"])
    ]
    for s in store_read.sources(store, run):
        if s["state"] == "deleted":
            out.append(
                _problem(s["run"], s["path"], "deleted", "the file is gone; what was read from it stays")
            )
        if s["bad_lines"]:
            reason = f"{s['bad_lines']} line(s) quarantined, each with its line number and why"
            out.append(_problem(s["run"], s["path"], "bad_lines", reason, bad_lines=s["bad_lines"]))
        if warning := source_warning(s):
            out.append(_problem(s["run"], s["path"], "no_points", warning))
    return sorted(out, key=lambda p: (p["run"] or "", p["path"], PROBLEMS.index(p["problem"])))


def problem_counts(store: Store) -> dict[str, int]:
    """How many files have each problem of `problem_files`, over all runs (every problem named, 0 or more)."""
    counts = Counter(p["problem"] for p in problem_files(store))
    return {name: counts.get(name, 0) for name in PROBLEMS}


def _problem(run: str | None, path: str, problem: str, reason: str, **extra: object) -> dict:
    base = {"run": run, "path": path, "problem": problem, "reason": reason}
    return base | {"attempts": None, "since": None, "next_try_at": None, "bad_lines": None} | extra
