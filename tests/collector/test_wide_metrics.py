"""Per-layer metrics (hundreds to tens of thousands of names a line) keep `collector ingest` within a memory
bound, and the run beside them is read all the same (issue 24.1).

Each file is over 1 MiB, so it reaches the DuckDB bulk path, whose wide stage once took gigabytes for a
few hundred metrics (DuckDB copied every column's vector for each filtered aggregate). The bound is
generous (the collector peaks near 250 MB on these files) but far below the 3-10 GB it reached.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.rusage import read_result, wrapped
from tests.collector.test_daemon_support import REPO, cli_json

PEAK_RSS_BOUND_MB = 400


def write_layers(path: Path, layers: int, lines: int) -> int:
    """A verl JSONL of `lines` steps, each with the loss and `layer{k}/grad_norm` for every layer: the points."""
    path.parent.mkdir(parents=True)
    with path.open("w") as f:
        for step in range(1, lines + 1):
            data = {"train/loss": 2.0 - step / 1000}
            data.update({f"layer{k}/grad_norm": 0.5 + (k % 7) / 100 + step / 1e5 for k in range(layers)})
            f.write(json.dumps({"step": step, "data": data}) + "\n")
    return lines * (layers + 1)


def run_ingest(db: Path, root: Path) -> tuple[int, str, dict, float]:
    """`collector ingest --db DB ROOT --json` as a real subprocess: (exit code, stderr, its summary, its
    peak RSS in MB)."""
    args = [sys.executable, "-m", "collector", "ingest", "--db", str(db), str(root), "--json"]
    out_path, err_path, result = Path(f"{db}.stdout"), Path(f"{db}.stderr"), Path(f"{db}.rusage")
    # Forked from a small interpreter, not from pytest: a child's ru_maxrss starts from the high-water mark
    # of the process that forked it (a suite's pytest is past a gigabyte).
    with open(out_path, "w") as out, open(err_path, "w") as err:
        subprocess.run(wrapped(args, result), cwd=REPO, stdout=out, stderr=err)
    found = read_result(result)
    assert found is not None, f"the measuring wrapper wrote nothing: {err_path.read_text()[-2000:]}"
    code, _, peak_mb = found
    return code, err_path.read_text(), json.loads(out_path.read_text() or "{}"), peak_mb


@pytest.mark.parametrize(("layers", "lines"), [(500, 92), (20_000, 3)], ids=["500-layers", "20000-names"])
def test_per_layer_metrics_stay_within_the_memory_bound(tmp_path, layers, lines):
    root = tmp_path / "runs"
    expected = write_layers(root / "per-layer" / "metrics.jsonl", layers, lines)
    assert (root / "per-layer" / "metrics.jsonl").stat().st_size > 1 << 20  # the bulk path's size
    other = root / "beside" / "metrics.jsonl"
    other.parent.mkdir()
    other.write_text(
        "".join(json.dumps({"step": s, "data": {"train/loss": 1 / s}}) + "\n" for s in range(1, 51))
    )
    db = tmp_path / "rw.duckdb"

    code, err, summary, peak_mb = run_ingest(db, root)

    assert code == 0, err
    assert peak_mb < PEAK_RSS_BOUND_MB, f"ingest peaked at {peak_mb:.0f} MB on {layers} metrics a line"
    runs = {r["id"]: r for r in cli_json(db, "runs")}
    assert runs["beside"]["last_step"] == 50
    assert runs["per-layer"]["last_step"] == lines
    assert summary["points_added"] == expected + 50


def test_wide_runs_are_judged_whole_beside_each_other(tmp_path):
    """500 layers x 400 steps and 20,000 names x 30 steps beside a plain run: every run is judged (a stored
    run's pace was read with a window per metric, and DuckDB ran out of memory on 600,000 points: "detection
    failed on new points"), and a NaN in the 20,000th name is an alert."""
    root = tmp_path / "runs"
    expected = write_layers(root / "layers" / "metrics.jsonl", 500, 400)
    expected += write_layers(root / "names" / "metrics.jsonl", 20_000, 30)
    with (root / "names" / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"step": 31, "data": {"layer19999/grad_norm": float("nan")}}) + "\n")
    (root / "beside").mkdir()
    (root / "beside" / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "data": {"train/loss": 1 / s}}) + "\n" for s in range(1, 2001))
    )
    db = tmp_path / "rw.duckdb"

    code, err, summary, _ = run_ingest(db, root)

    assert code == 0, err
    assert "detection failed" not in err and "Traceback" not in err, err[-3000:]
    assert summary["points_added"] == expected + 1 + 2000
    (alert,) = cli_json(db, "alerts", "--run", "names")
    assert alert["rule"] == "nonfinite" and alert["metric"] == "layer19999/grad_norm"
