"""MLflow's file store (`mlruns/<experiment>/<run>/`): one file per metric, param and tag; this module reads metrics.

`metrics/<name>` holds `<timestamp ms> <value> <step>` lines, appended as the run logs (`<name>` may be a path:
`metrics/train/loss` is the metric `train/loss`); `params/<name>` and `tags/<name>` hold one value each, the
run's configuration. The metric name, param and tag come from the file's path, not its content.
"""

from __future__ import annotations

import re
from pathlib import PurePath

from collector.core.model import BadLine, Format, ParseResult
from collector.formats._common import as_step, bad_text, complete_lines

# `1732431600000 0.5 10`: milliseconds, value, step (older MLflow wrote lines without the step: step 0).
_LINE = re.compile(rb"^\s*(-?\d+)\s+(\S+)(?:\s+(-?\d+))?\s*$")
_METRIC_LINE = re.compile(rb"^\d{9,} \S+ -?\d+\r?$")


def name_under(path: str, folder: str) -> str | None:
    """The name of an MLflow entry from its path: what follows the last `<folder>/` (`metrics/train/loss`
    gives `train/loss`), or None when the path has no such folder."""
    parts = PurePath(path).parts
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == folder:
            return "/".join(parts[i + 1 :])
    return None


def parse(data: bytes, first_line: int = 1, *, path: str = "", state: object = None) -> ParseResult:
    """Points of one metric file: each complete `<timestamp ms> <value> <step>` line is a point of the metric
    named by the path under `metrics/`, at its step, with its wall time in seconds. `nan`, `inf` values are
    kept. A line of another shape is reported in `bad`; a path without a `metrics/` folder makes every line
    bad (the caller registered a file that is not a metric)."""
    lines, consumed = complete_lines(data)
    result = ParseResult(consumed=consumed, lines=len(lines))
    metric = name_under(path, "metrics")
    points = result.points
    for line_no, raw in enumerate(lines, start=first_line):
        if not raw.strip():
            continue
        match = _LINE.match(raw)
        value = _float(match.group(2)) if match else None
        if metric is None or match is None or value is None:
            reason = "not under a metrics/ folder" if metric is None else "not a `timestamp value step` line"
            result.bad.append(BadLine(line_no, reason, bad_text(raw)))
            continue
        step = as_step(int(match.group(3))) if match.group(3) is not None else 0
        points.add(step, metric, value, int(match.group(1)) / 1000.0)
    return result


def _float(text: bytes) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def sniff(head: bytes) -> bool:
    """Whether a file under a `metrics/` folder is an MLflow metric: its first line `<ms> <value> <step>`."""
    return _METRIC_LINE.match(head.split(b"\n", 1)[0]) is not None


FORMAT = Format(
    name="mlflow_metric",
    parse=parse,
    sniffed=("metrics/*", "metrics/*/*", "metrics/*/*/*"),
    sniff=sniff,
)
