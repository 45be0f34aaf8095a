"""False-alarm rate on the healthy real runs (issue 12): warn-or-worse alerts per 10,000 logged steps.

The runs are the files labelled `healthy = true` in tests/collector/detect/real_runs_expected.toml (a careful
engineer wants no warning or error on them); each goes through the real collector path
(`scripts.label_eval.evaluate`). A run's logged steps are the points of its most-logged metric (a file logging
every 100 trainer steps has 1 logged step per 100). Files runwatch does not read count no steps and are listed.
Target from the issue: 0 errors and at most 1 warning per 10,000 logged steps.

    .venv/bin/python bench/false_alarms.py [--json]

Writes bench/out/false_alarms.json (or under RUNWATCH_BENCH_OUT).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import gen  # noqa: E402

from scripts.label_eval import evaluate  # noqa: E402

PER = 10_000


def rate(report: dict) -> dict:
    """Per healthy file and in total: logged steps, errors, warnings, and both per 10,000 logged steps."""
    rows = []
    for f in report["files"]:
        if not f["healthy"]:
            continue
        errors = sum(1 for a in f["alerts"] if a["severity"] == "error")
        warnings = sum(1 for a in f["alerts"] if a["severity"] == "warn")
        rows.append(
            {
                "file": f["file"],
                "read": f["read"],
                "logged_steps": f["logged_steps"],
                "errors": errors,
                "warnings": warnings,
                "alerts": [a for a in f["alerts"] if a["severity"] != "info"],
            }
        )
    steps = sum(r["logged_steps"] for r in rows)
    errors = sum(r["errors"] for r in rows)
    warnings = sum(r["warnings"] for r in rows)
    return {
        "healthy_files": len(rows),
        "read_files": sum(1 for r in rows if r["logged_steps"] > 0),
        "not_read": [r["file"] for r in rows if r["read"] != "ok"],
        "logged_steps": steps,
        "errors": errors,
        "warnings": warnings,
        "errors_per_10k_steps": round(errors * PER / steps, 3) if steps else None,
        "warnings_per_10k_steps": round(warnings * PER / steps, 3) if steps else None,
        "files": rows,
    }


def table(figures: dict) -> str:
    lines = ["| healthy file | logged steps | errors | warnings |", "|---|---:|---:|---:|"]
    for r in sorted(figures["files"], key=lambda r: (-(r["errors"] + r["warnings"]), r["file"])):
        steps = r["logged_steps"] if r["read"] == "ok" else f"{r['logged_steps']} ({r['read']})"
        lines.append(f"| {r['file'][:80]} | {steps} | {r['errors']} | {r['warnings']} |")
    lines.append(
        f"| **all {figures['healthy_files']} healthy files** | {figures['logged_steps']} | {figures['errors']} "
        f"| {figures['warnings']} |"
    )
    lines.append("")
    lines.append(
        f"per 10,000 logged steps: {figures['errors_per_10k_steps']} errors, "
        f"{figures['warnings_per_10k_steps']} warnings (target 0 and <= 1); "
        f"{len(figures['not_read'])} healthy files not read by runwatch yet"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    figures = rate(evaluate())
    path = gen.write_json("false_alarms", figures)
    print(json.dumps(figures, indent=1) if args.json else table(figures))
    print(f"figures written to {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
