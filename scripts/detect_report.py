"""`python -m scripts.detect_report FILE...`: alerts and checkpoint advice for trainer_state.json files.

Reads each file with the project's HF parser (`collector.formats.parser_for("hf_trainer_state")`), runs the
detectors over the whole history as one backfill, and asks `collector.runs.inputs.advise` (the collector's own
advice over the same run inputs) for the advice (which infers the checkpoint list from save steps, marked inferred: a lone trainer_state.json copy has no
folders beside it). Prints a Markdown table: per file, the alerts (rule, severity, steps) and the advice
against the run's own `best_model_checkpoint`. `--json` prints the same as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from collector.advice.hf_saves import checkpoint_step
from collector.detect.engine import AlertEvent, detect_series
from collector.formats import parser_for
from collector.runs.inputs import RunInputs, advise
from collector.settings.config import DetectConfig

Series = dict[str, tuple[list[int], list[float]]]


def load_trainer_state(path: Path) -> tuple[Series, dict]:
    """(series by metric name, whole-file info) of one trainer_state.json. Raises ValueError (line and
    reason) when the file is not a readable trainer_state.json, OSError when it cannot be read."""
    result = parser_for("hf_trainer_state")(Path(path).read_bytes())
    if result.bad and not result.points:
        bad = result.bad[0]
        raise ValueError(f"line {bad.line}: {bad.reason}")
    series: Series = {}
    for step, metric, value in zip(
        result.points.step, result.points.metric, result.points.value, strict=True
    ):
        steps, values = series.setdefault(metric, ([], []))
        steps.append(step)
        values.append(value)
    return series, dict(result.info)


def analyse(path: Path) -> dict:
    """Alerts (final state of every episode) and advice for one trainer_state.json: the advice from the same
    run inputs the collector's run service judges (`collector.runs.inputs.advise`), built from the file."""
    series, info = load_trainer_state(path)
    alerts: list[AlertEvent] = detect_series(series, run_info=info, run_id=Path(path).stem)
    last_step = info.get("global_step") or max((max(s) for s, _ in series.values() if s), default=None)
    stats = [
        {"metric": m, "points": len(s), "first_step": min(s), "last_step": max(s)}
        for m, (s, _) in series.items()
        if s
    ]
    alert_dicts = [a.to_dict() for a in alerts]
    run = RunInputs(
        run_id=Path(path).stem,
        path=str(path),
        format="hf_trainer_state",
        info=info,
        status=None,
        state=None,
        latest_marker=last_step,  # a lone copy: its last step is what a resume would load
        last_step=last_step,
        checkpoints=[],  # no folders beside a copy: the advice infers them from the save steps
        stats=stats,
        alerts=alert_dicts,
        thresholds=DetectConfig(),
        series=lambda metric, points: series[metric],
    )
    return {
        "file": Path(path).name,
        "alerts": alert_dicts,
        "advice": advise(run),
        "run_best_checkpoint": checkpoint_step(info.get("best_model_checkpoint")),
    }


def _alerts_cell(alerts: list[dict]) -> str:
    if not alerts:
        return "none"
    parts = []
    for a in alerts:
        steps = (
            str(a["first_step"])
            if a["first_step"] == a["last_step"]
            else f"{a['first_step']}-{a['last_step']}"
        )
        parts.append(f"{a['rule']} {a['severity']} {a['metric']} @{steps}")
    return "<br>".join(parts)


def _advice_cell(row: dict) -> str:
    advice = row["advice"]
    rec = advice["recommended"]
    own = row["run_best_checkpoint"]
    if rec is None:
        return "no complete checkpoint"
    if any(c.get("inferred") for c in advice["checkpoints"]):
        deletable = (
            f"{len(advice['checkpoints'])} checkpoint(s) inferred from the state file: no deletion advice"
        )
    else:
        deletable = f"deletable {len(advice['deletable'])} of {len(advice['checkpoints'])}"
    if "no evaluation" in rec["reason"]:
        return f"ckpt {rec['step']}: the latest; the run logs no evaluation to choose by; {deletable}"
    by = f"by {advice['metric']} ({advice['direction']})"
    if own is None:
        return f"ckpt {rec['step']} {by}; {deletable}"
    if own == rec["step"]:
        return f"ckpt {rec['step']} {by}, agrees with the run's best_model_checkpoint; {deletable}"
    value = next((c["value"] for c in advice["checkpoints"] if c["step"] == rec["step"]), None)
    return (
        f"ckpt {rec['step']} {by}; the run's own is checkpoint-{own} because the Trainer only compares "
        f"evaluations made at save steps, while this advice gives each save its nearest evaluation "
        f"({advice['metric']} {value:.4g} for {rec['step']}); {deletable}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.detect_report", description=__doc__.splitlines()[0]
    )
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a Markdown table")
    args = parser.parse_args(argv)
    rows, failed = [], 0
    for path in args.files:
        try:
            rows.append(analyse(path))
        except OSError as exc:
            print(f"skipped {path}: cannot read it ({exc.strerror})", file=sys.stderr)
            failed += 1
        except ValueError as exc:
            print(f"skipped {path}: {exc}; nothing reported for this file", file=sys.stderr)
            failed += 1
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print("| file | alerts (rule severity metric @steps) | advice |")
        print("|---|---|---|")
        for row in rows:
            print(f"| {row['file']} | {_alerts_cell(row['alerts'])} | {_advice_cell(row)} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
