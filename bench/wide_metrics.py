"""Collector memory on per-layer metrics: peak RSS of `python -m collector ingest` on verl JSONL files whose
lines carry hundreds to tens of thousands of metric names (`layer{k}/grad_norm`), with a small run beside
each that must be read too (issue 24.1).

Each case is a root of two runs: the wide file and a 50-step run. Peak RSS is the child's own `ru_maxrss`
(from wait4, forked from a small interpreter: bench/rusage.py). `--tree DIR` runs another checkout's collector on the same files (a before/after figure).

    .venv/bin/python bench/wide_metrics.py [--cases 500x92,20000x3,2000x800,70000x10] [--tree DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen  # noqa: E402
from rusage import read_result, wrapped  # noqa: E402

NAME = "wide_metrics"
CASES = "500x92,20000x3,500x3000,2000x800,70000x10"


def write_root(root: Path, layers: int, lines: int) -> int:
    """The two runs under `root`; the points they hold."""
    shutil.rmtree(root, ignore_errors=True)
    (root / "per-layer").mkdir(parents=True)
    (root / "beside").mkdir()
    with (root / "per-layer" / "metrics.jsonl").open("w") as f:
        for step in range(1, lines + 1):
            data = {"train/loss": 2.0 - step / 1000}
            data.update({f"layer{k}/grad_norm": 0.5 + (k % 7) / 100 + step / 1e5 for k in range(layers)})
            f.write(json.dumps({"step": step, "data": data}) + "\n")
    (root / "beside" / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "data": {"train/loss": 1 / s}}) + "\n" for s in range(1, 51))
    )
    return lines * (layers + 1) + 50


def ingest(tree: Path, db: Path, root: Path) -> tuple[int, float, float, str]:
    """(exit code, peak RSS in MB, seconds, output) of one `collector ingest` in `tree`."""
    for p in db.parent.glob(db.name + "*"):
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    result = db.parent / (db.name + ".rusage")
    proc = subprocess.run(
        wrapped([sys.executable, "-m", "collector", "ingest", "--db", str(db), str(root), "--json"], result),
        cwd=tree,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    found = read_result(result)
    if found is None:
        return proc.returncode or 1, float("nan"), float("nan"), proc.stdout
    code, wall_s, peak_mb = found
    return code, peak_mb, wall_s, proc.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=CASES, help=f"LAYERSxLINES,... (default {CASES})")
    ap.add_argument("--tree", type=Path, default=gen.REPO, help="the checkout whose collector runs")
    args = ap.parse_args()
    work = gen.OUT / "work" / NAME
    print(
        f"{'metrics a line':>14} {'lines':>6} {'MB':>6} {'points':>9} {'peak RSS MB':>11} {'s':>6}  all stored"
    )
    for case in args.cases.split(","):
        layers, lines = map(int, case.split("x"))
        root = work / "root"
        points = write_root(root, layers, lines)
        size = (root / "per-layer" / "metrics.jsonl").stat().st_size / 1e6
        code, peak, seconds, out = ingest(args.tree, work / "rw.duckdb", root)
        try:
            stored = json.loads(out.splitlines()[-1])["points_added"] == points if code == 0 else False
        except (ValueError, IndexError, KeyError):
            stored = False
        print(
            f"{layers + 1:>14,} {lines:>6} {size:>6.1f} {points:>9,} {peak:>11.0f} {seconds:>6.1f}  {stored}"
        )
        if code != 0:
            print(f"    exit {code}: {out[-500:]}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
