"""`python -m collector.detect.report FILE...`: alerts and checkpoint advice for trainer_state.json files.

Reads each file with the project's HF parser (`collector.parsers.hf_trainer_state`; plain `json` when that
parser is not importable), runs the detectors over the whole history as one backfill, infers the checkpoint
list from save steps (marked inferred: a lone trainer_state.json copy has no folders beside it), and prints a
Markdown table: per file, the alerts (rule, severity, steps) and the advice against the run's own
`best_model_checkpoint`. `--json` prints the same as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from collector.advice import checkpoint_step, choose_metric, hf_checkpoints_from_state, recommend_checkpoint
from collector.detect.engine import AlertEvent, detect_series
from collector.detect.roles import role_of

Series = dict[str, tuple[list[int], list[float]]]


def load_trainer_state(path: Path) -> tuple[Series, dict]:
    """(series by metric name, whole-file info) of one trainer_state.json. Raises ValueError (line and
    reason) when the file is not a readable trainer_state.json, OSError when it cannot be read."""
    data = Path(path).read_bytes()
    try:
        from collector.parsers.hf_trainer_state import parse
    except ImportError:
        parse = None
    series: Series = {}
    if parse is not None:
        result = parse(data)
        if result.bad and not result.points:
            bad = result.bad[0]
            raise ValueError(f"line {bad.line}: {bad.reason}")
        for step, metric, value in zip(
            result.points.step, result.points.metric, result.points.value, strict=True
        ):
            series.setdefault(metric, ([], []))
            series[metric][0].append(step)
            series[metric][1].append(value)
        info = dict(result.info)
    else:
        try:
            state = json.loads(data)
        except json.JSONDecodeError as exc:
            raise ValueError(f"line {exc.lineno}: not valid JSON ({exc.msg})") from exc
        for entry in state.get("log_history", []):
            for key, value in entry.items():
                if key != "step" and isinstance(value, int | float) and not isinstance(value, bool):
                    series.setdefault(key, ([], []))
                    series[key][0].append(int(entry["step"]))
                    series[key][1].append(float(value))
        info = {k: v for k, v in state.items() if k != "log_history"}
    return series, info


def analyse(path: Path) -> dict:
    """Alerts (final state of every episode) and advice for one trainer_state.json."""
    series, info = load_trainer_state(path)
    alerts: list[AlertEvent] = detect_series(series, run_info=info, run_id=Path(path).stem)
    evals = {
        m: list(zip(*series[m], strict=True))
        for m in series
        if role_of(m) in ("val_loss", "eval_metric", "val_score")
    }
    metric, direction = choose_metric(info, list(series), evals)
    last_step = info.get("global_step") or max((max(s) for s, _ in series.values() if s), default=None)
    checkpoints = hf_checkpoints_from_state(info, last_step)
    bad = [(a.first_step, a.last_step) for a in alerts if a.rule in ("nonfinite", "grad_spike")]
    advice = recommend_checkpoint(checkpoints, evals.get(metric, []), bad, metric, direction)
    own = checkpoint_step(info.get("best_model_checkpoint"))
    return {
        "file": Path(path).name,
        "alerts": [a.to_dict() for a in alerts],
        "advice": advice,
        "run_best_checkpoint": own,
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
        deletable = f"{len(advice['checkpoints'])} checkpoints inferred from save_steps: no deletion advice"
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
        prog="python -m collector.detect.report", description=__doc__.splitlines()[0]
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
