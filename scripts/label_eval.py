"""Judge runwatch against the labelled real runs (tests/collector/detect/real_runs_expected.toml, issue 12).

Every labelled file goes through the real collector path, as a user would run it:
`python -m collector ingest --db TMP PATH...`, then `python -m collector runs/alerts/checkpoints --json`.
Each file is given as a root by itself (read where it lies in ../shared); the few whose corpus name hides the
name their tool gives them (TensorBoard `events.out.tfevents.*` files saved as `<owner>__<repo>__...`) are
presented under their original name from a temporary folder outside the repository, deleted afterwards.

Per file: expected alerts met (true positives), expected alerts missed, false alarms (warn-or-error alerts that
match no expectation; those a label foresaw are marked), advice agreement, status agreement. Overall: precision
(matched alerts / (matched + false alarms)) and recall (expectations met / expectations). Files runwatch does
not read (no run found, or a run without a single point) are listed as such.

    .venv/bin/python -m scripts.label_eval [--json] [--only SUBSTRING] [--extra DIR]

`--extra DIR` also judges the extra labelled set (tests/collector/detect/real_runs_extra.toml: public logs that
../shared lacks, named by repository, path, commit and sha256) from the copies fetched into DIR, and reports
them as a row of their own; the shared set's figures are unchanged by it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LABELS = REPO / "tests" / "collector" / "detect" / "real_runs_expected.toml"
EXTRA_LABELS = REPO / "tests" / "collector" / "detect" / "real_runs_extra.toml"
SHARED = REPO.parent / "shared"
CORPUS_DIRS = {
    "real-runs": SHARED / "real-runs",
    "real-runs-wild": SHARED / "real-runs-wild" / "files",
}
SEVERITY_RANK = {"info": 0, "warn": 1, "error": 2}
TB_NAME = "events.out.tfevents."


@dataclass
class FileResult:
    """What runwatch said about one labelled file and how it compares with the label."""

    file: str
    corpus: str
    format: str
    healthy: bool
    read: str  # "ok", "no run" (runwatch found no run in it) or "no points" (it has values runwatch did not read)
    run: str | None = None
    last_step: int | None = None
    logged_steps: int = 0  # points of the run's most-logged metric (the false-alarm rate's denominator)
    alerts: list[dict] = field(default_factory=list)  # every alert, trimmed to rule/severity/metric/steps
    expected: int = 0
    met: list[str] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)
    false_alarms: list[str] = field(default_factory=list)
    foreseen_false_alarms: list[str] = field(default_factory=list)
    matched_alerts: int = 0
    advice_expected: object = None
    advice_got: int | None = None
    advice_agrees: bool | None = None
    status_expected: str | None = None
    status_got: str | None = None
    status_agrees: bool | None = None


def load_labels(path: Path = LABELS) -> dict[str, dict]:
    """The labels, keyed by file name."""
    with open(path, "rb") as f:
        return tomllib.load(f)


def corpus_files() -> dict[str, str]:
    """Every real file of both corpora: file name -> corpus (README.md and the facts file are not runs)."""
    found = {}
    for corpus, folder in CORPUS_DIRS.items():
        for name in sorted(os.listdir(folder)):
            if (folder / name).is_file() and name not in ("README.md", "sources.jsonl"):
                found[name] = corpus
    return found


def _wild_facts() -> dict[str, dict]:
    """Wild corpus file name -> its record in sources.jsonl (original path, computed facts)."""
    records = {}
    for line in (SHARED / "real-runs-wild" / "sources.jsonl").read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            records[Path(record["file"]).name] = record
    return records


def has_metric_values(name: str, facts: dict[str, dict]) -> bool:
    """Whether the file holds any metric value at all (a few wild logs hold only progress or a crash)."""
    record = facts.get(name)
    return record is None or bool(record["facts"].get("metrics"))


def _logged_steps(db: str) -> dict[str, int]:
    """Per run: the point count of its most-logged metric."""
    from collector.store import read as store_read
    from collector.store.db import Store

    store = Store(db)
    try:
        counts: dict[str, int] = {}
        for row in store_read.metric_stats(store):
            counts[row["run"]] = max(counts.get(row["run"], 0), int(row["points"] or 0))
        return counts
    finally:
        store.close()


def _present(name: str, corpus: str, scratch: Path, originals: dict[str, str]) -> Path:
    """The path handed to the collector for one file: the shared file itself, or (when its corpus name hides
    the name its tool gave it) a copy under the original name in `scratch`, outside the repository."""
    shared = CORPUS_DIRS[corpus] / name
    original = originals.get(name, name)
    if original.startswith(TB_NAME) and not name.startswith(TB_NAME):
        folder = scratch / f"tb-{len(list(scratch.iterdir()))}"
        folder.mkdir()
        shutil.copyfile(shared, folder / original)
        return folder / original
    return shared


def _cli(*args: str) -> object:
    done = subprocess.run(
        [sys.executable, "-m", "collector", *args, "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"collector {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return json.loads(done.stdout) if done.stdout.strip() else None


def _rules(entry: dict) -> list[str]:
    rule = entry["rule"]
    return [rule] if isinstance(rule, str) else list(rule)


def _windows(entry: dict) -> list[tuple[float, float]] | None:
    steps = entry.get("steps")
    if steps is None:
        return None
    if steps and isinstance(steps[0], list):
        return [(lo, hi) for lo, hi in steps]
    return [(steps[0], steps[1])]


def _overlaps(alert: dict, windows: list[tuple[float, float]] | None) -> bool:
    if windows is None:
        return True
    first = alert.get("first_step")
    last = alert.get("last_step", first)
    if first is None:
        return False
    last = first if last is None else last
    return any(first <= hi and last >= lo for lo, hi in windows)


def _names_metric(alert: dict, metric: str) -> bool:
    if not metric:
        return True
    return metric in (alert.get("metric") or "") or metric in (alert.get("message") or "")


def matches(alert: dict, entry: dict) -> bool:
    """Whether one alert fulfils one `expect` entry of a label."""
    rank = SEVERITY_RANK[alert["severity"]]
    if alert["rule"] not in _rules(entry) or rank < SEVERITY_RANK[entry.get("severity", "info")]:
        return False
    if "severity_max" in entry and rank > SEVERITY_RANK[entry["severity_max"]]:
        return False
    return _names_metric(alert, entry.get("metric", "")) and _overlaps(alert, _windows(entry))


def _forbidden(alert: dict, entry: dict) -> bool:
    if alert["rule"] not in _rules(entry):
        return False
    if SEVERITY_RANK[alert["severity"]] < SEVERITY_RANK[entry.get("severity", "warn")]:
        return False
    return _names_metric(alert, entry.get("metric", ""))


def _describe(alert: dict) -> str:
    return f"{alert['rule']}/{alert['severity']} {alert.get('metric')} @{alert.get('first_step')}-{alert.get('last_step')}"


def _describe_expect(entry: dict) -> str:
    rules = "|".join(_rules(entry))
    return (
        f"{rules}>={entry.get('severity', 'info')} {entry.get('metric', '')} {entry.get('steps', 'any step')}"
    )


def judge(
    label: dict, result: FileResult, alerts: list[dict], recommended: int | None, latest: list[int]
) -> None:
    """Fill `result`'s comparison fields from the alerts and advice runwatch gave for its file."""
    result.alerts = [
        {k: a.get(k) for k in ("rule", "severity", "metric", "first_step", "last_step")} for a in alerts
    ]
    used: set[int] = set()
    expects = label.get("expect", [])
    result.expected = len(expects)
    for entry in expects:
        hit = next((i for i, a in enumerate(alerts) if i not in used and matches(a, entry)), None)
        if hit is None:  # an alert may stand for several expectations of one incident
            hit = next((i for i, a in enumerate(alerts) if matches(a, entry)), None)
        if hit is None:
            result.missed.append(_describe_expect(entry))
        else:
            used.add(hit)
            result.met.append(_describe_expect(entry))
    result.matched_alerts = len(used)
    for i, alert in enumerate(alerts):
        if i in used or SEVERITY_RANK[alert["severity"]] < SEVERITY_RANK["warn"]:
            continue
        duplicate = any(matches(alert, entry) for entry in expects)
        result.false_alarms.append(
            _describe(alert) + (" (a second alert for a met expectation)" if duplicate else "")
        )
        if any(_forbidden(alert, entry) for entry in label.get("forbid", [])):
            result.foreseen_false_alarms.append(_describe(alert))
    result.advice_expected = label.get("advice_step")
    result.advice_got = recommended
    if result.advice_expected is None:
        result.advice_agrees = recommended is None or recommended in latest
    else:
        wanted = result.advice_expected
        wanted = wanted if isinstance(wanted, list) else [wanted]
        result.advice_agrees = recommended in wanted
    result.status_expected = label.get("status")
    if result.status_expected is not None:
        result.status_agrees = result.status_got == result.status_expected


def evaluate(labels_path: Path = LABELS, only: str | None = None) -> dict:
    """Run every labelled file through the collector and compare with its label.

    Returns {"files": [FileResult as dict...], "summary": {...}}; raises when a collector command fails.
    """
    labels = load_labels(labels_path)
    names = sorted(n for n in labels if only is None or only in n)
    facts = _wild_facts()
    originals = {name: Path(record["path"]).name for name, record in facts.items()}
    with tempfile.TemporaryDirectory(prefix="runwatch-labels-") as tmp:
        scratch = Path(tmp) / "presented"
        scratch.mkdir()
        presented = {n: _present(n, labels[n]["corpus"], scratch, originals) for n in names}
        results = _judge_files(labels, presented, Path(tmp) / "labels.duckdb", facts)
    return {"files": [asdict(r) for r in results], "summary": summarise(results)}


def evaluate_extra(folder: Path, labels_path: Path = EXTRA_LABELS, only: str | None = None) -> dict:
    """Judge the extra labelled set's files found in `folder` (each named by its label's key), as `evaluate`.

    A file is handed to the collector at its repository path (`outputs/checkpoint-500/trainer_state.json`: the
    layout a user's run folder has) in a temporary folder of its own, given as the root. Files not
    in `folder` are listed in "not_fetched", and files whose sha256 differs from the label's in "mismatched"
    (neither is judged). Returns {"files", "summary", "not_fetched", "mismatched"}.
    """
    labels = load_labels(labels_path)
    names = sorted(n for n in labels if only is None or only in n)
    not_fetched, mismatched = [], []
    with tempfile.TemporaryDirectory(prefix="runwatch-extra-") as tmp:
        presented: dict[str, Path] = {}
        homes: list[Path] = []
        for i, name in enumerate(names):
            copy = folder / name
            if not copy.is_file():
                not_fetched.append(name)
                continue
            digest = hashlib.sha256(copy.read_bytes()).hexdigest()
            if digest != labels[name]["sha256"]:
                mismatched.append(f"{name} (sha256 {digest}, the label says {labels[name]['sha256']})")
                continue
            home = Path(tmp) / f"run-{i}"
            homes.append(home)
            presented[name] = home / labels[name]["path"]
            presented[name].parent.mkdir(parents=True)
            shutil.copyfile(copy, presented[name])
        results = _judge_files(labels, presented, Path(tmp) / "extra.duckdb", {}, homes) if presented else []
    return {
        "files": [asdict(r) for r in results],
        "summary": summarise(results),
        "not_fetched": not_fetched,
        "mismatched": mismatched,
    }


def _judge_files(
    labels: dict, presented: dict[str, Path], db_path: Path, facts: dict, roots: list[Path] | None = None
) -> list[FileResult]:
    """Ingest the presented files (or the `roots` holding them) into one database and judge each file by its
    run (the run at the file's path, or at the nearest folder above it) against its label."""
    db = str(db_path)
    _cli("ingest", "--db", db, *[str(p) for p in (roots or presented.values())])
    runs = {Path(r["path"]).resolve(): r for r in _cli("runs", "--db", db)}
    alerts_by_run: dict[str, list[dict]] = {}
    for alert in _cli("alerts", "--db", db):
        alerts_by_run.setdefault(alert["run"], []).append(alert)
    logged = _logged_steps(db)
    results: list[FileResult] = []
    for name, path in presented.items():
        label = labels[name]
        run = next((runs[p] for p in (path.resolve(), *path.resolve().parents) if p in runs), None)
        corpus = label.get("corpus", "extra")
        result = FileResult(name, corpus, label["format"], bool(label["healthy"]), "ok")
        if run is None:
            result.read = "no run"
            judge(label, result, [], None, [])
            results.append(result)
            continue
        result.run = run["id"]
        result.status_got = run.get("status")
        result.last_step = run.get("last_step")
        result.logged_steps = logged.get(run["id"], 0)
        if result.logged_steps == 0 and label.get("has_metrics", True) and has_metric_values(name, facts):
            result.read = "no points"
        advice = _cli("checkpoints", "--db", db, "--run", run["id"]) or {}
        recommended = (advice.get("recommended") or {}).get("step")
        latest = [s for s in [run.get("last_step")] if s is not None]
        latest += [c["step"] for c in advice.get("checkpoints", [])[-1:]]
        judge(label, result, alerts_by_run.get(run["id"], []), recommended, latest)
        results.append(result)
    return results


def summarise(results: list[FileResult]) -> dict:
    """Precision, recall, advice and status agreement over all files, and the files runwatch cannot read."""
    matched = sum(r.matched_alerts for r in results)
    false_alarms = sum(len(r.false_alarms) for r in results)
    expected = sum(r.expected for r in results)
    met = sum(len(r.met) for r in results)
    expected_read = sum(r.expected for r in results if r.read == "ok")
    met_read = sum(len(r.met) for r in results if r.read == "ok")
    advice = [r.advice_agrees for r in results if r.advice_agrees is not None]
    status = [r.status_agrees for r in results if r.status_agrees is not None]
    return {
        "files": len(results),
        "unreadable": [f"{r.file} ({r.read})" for r in results if r.read != "ok"],
        "expected_alerts": expected,
        "met": met,
        "missed": expected - met,
        "matched_alerts": matched,
        "false_alarms": false_alarms,
        "foreseen_false_alarms": sum(len(r.foreseen_false_alarms) for r in results),
        "precision": round(matched / (matched + false_alarms), 3) if matched + false_alarms else 1.0,
        "recall": round(met / expected, 3) if expected else 1.0,
        "recall_on_read_files": round(met_read / expected_read, 3) if expected_read else 1.0,
        "advice_agreement": round(sum(advice) / len(advice), 3) if advice else 1.0,
        "advice_checked": len(advice),
        "status_agreement": round(sum(status) / len(status), 3) if status else 1.0,
        "status_checked": len(status),
        "healthy_files_with_false_alarms": sum(1 for r in results if r.healthy and r.false_alarms),
    }


def _table(report: dict) -> str:
    lines = [
        "| file | read | met/expected | missed | false alarms | advice (want -> got) | status (want -> got) |"
    ]
    lines.append("|---|---|---|---|---|---|---|")
    for r in report["files"]:
        advice = "" if r["advice_agrees"] else f"{r['advice_expected'] or 'latest'} -> {r['advice_got']}"
        status = "" if r["status_agrees"] in (None, True) else f"{r['status_expected']} -> {r['status_got']}"
        lines.append(
            f"| {r['file'][:70]} | {r['read']} | {len(r['met'])}/{r['expected']} | {'; '.join(r['missed'])} "
            f"| {'; '.join(r['false_alarms'])} | {advice} | {status} |"
        )
    s = report["summary"]
    lines.append("")
    lines.append(
        f"precision {s['precision']} ({s['matched_alerts']} matched, {s['false_alarms']} false alarms, "
        f"{s['foreseen_false_alarms']} of them foreseen by a label), recall {s['recall']} "
        f"({s['met']}/{s['expected_alerts']}), advice {s['advice_agreement']} of {s['advice_checked']}, "
        f"status {s['status_agreement']} of {s['status_checked']}"
    )
    lines.append(f"recall on the files runwatch reads: {s['recall_on_read_files']}")
    lines.append(f"files runwatch does not read: {', '.join(s['unreadable']) or 'none'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the whole report as JSON")
    parser.add_argument("--only", help="only the labelled files whose name holds this")
    parser.add_argument(
        "--extra",
        type=Path,
        metavar="DIR",
        help="also judge the extra labelled set (real_runs_extra.toml) from the copies fetched into DIR",
    )
    args = parser.parse_args(argv)
    report = evaluate(only=args.only)
    if args.extra is not None:
        if not args.extra.is_dir():
            parser.error(f"--extra {args.extra}: not a folder")
        report["extra"] = evaluate_extra(args.extra, only=args.only)
    if args.json:
        print(json.dumps(report, indent=1, default=str))
        return 0
    print(_table(report))
    if "extra" in report:
        extra = report["extra"]
        print(f"\nextra labelled set ({args.extra}): public logs ../shared lacks, a row of their own\n")
        print(_table(extra))
        print(f"not fetched: {', '.join(extra['not_fetched']) or 'none'}")
        print(f"sha256 differs (not judged): {', '.join(extra['mismatched']) or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
