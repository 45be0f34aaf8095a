"""`python bench/detect_speed.py [--steps N]`: how fast the detectors digest a backfill.

A synthetic verl-style history (train/loss, train/grad_norm, train/lr, train/time(s), one point each per
step, seeded) is fed to one `RunDetector` in batches of 100,000 points, as the collector feeds a backfill;
then the same points again (a whole-file re-read, which the engine skips). Prints points per second for
both, and per role for 100,000 points of a single metric.
"""

from __future__ import annotations

import argparse
import math
import random
import time

from collector.core.model import Points
from collector.detect.engine import RunDetector

BATCH = 100_000


def history(steps: int, seed: int = 0) -> Points:
    """A healthy-looking run: falling noisy loss, noisy grad_norm, constant lr, steady step time."""
    rng = random.Random(seed)
    points = Points()
    for s in range(1, steps + 1):
        points.add(s, "train/loss", 2.0 * math.exp(-s / steps) + 0.5 + rng.gauss(0, 0.02))
        points.add(s, "train/grad_norm", math.exp(rng.gauss(0, 0.2)))
        points.add(s, "train/lr", 1e-4)
        points.add(s, "train/time(s)", 0.5 + abs(rng.gauss(0, 0.02)))
    return points


def feed(detector: RunDetector, points: Points) -> float:
    """Seconds to feed `points` in backfill-sized batches."""
    start = time.perf_counter()
    for i in range(0, len(points), BATCH):
        end = i + BATCH
        detector.update(
            Points(points.step[i:end], points.metric[i:end], points.value[i:end], points.wall_time[i:end])
        )
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python bench/detect_speed.py", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps", type=int, default=100_000, help="steps of synthetic history (4 points each)"
    )
    args = parser.parse_args(argv)
    points = history(args.steps)
    detector = RunDetector("bench")
    first = feed(detector, points)
    again = feed(detector, points)
    print(f"backfill: {len(points):,} points in {first:.2f} s = {len(points) / first / 1e3:,.0f} k points/s")
    print(f"re-read:  {len(points):,} points in {again:.2f} s = {len(points) / again / 1e3:,.0f} k points/s")
    rng = random.Random(1)
    for metric in (
        "train/loss",
        "train/grad_norm",
        "train/lr",
        "train/time(s)",
        "critic/score/mean",
        "train/mfu",
    ):
        single = Points()
        for s in range(1, 100_001):
            single.add(s, metric, 1.0 + rng.gauss(0, 0.02))
        seconds = feed(RunDetector("bench"), single)
        print(f"  {metric:20s} {len(single) / seconds / 1e3:7,.0f} k points/s")


if __name__ == "__main__":
    main()
