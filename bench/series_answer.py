"""The dashboard's cost of reading one metrics answer (`GET /api/runs/{run}/metrics`) as the API's types: an
answer of `--series` (80) metrics of `--points` (2,000) buckets each, as the API writes it (steps, values,
min, max, first, last, nonfinite; a few NaN and null values), read the way `app.api.DashboardApi.metrics`
reads it and turned into the app's series the way a page does. Medians of `--rounds` (7), in-process:

- `json`: `json.loads` of the answer's bytes (the client's part, the same with or without types);
- `parse`: the parsed JSON validated into `collector.api.models.SeriesAnswer` (a model over columns);
- `app_series`: `app.series.from_api` over every series (the lists the charts draw).

    .venv/bin/python bench/series_answer.py [--series 80] [--points 2000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import gen  # noqa: E402

from app.series import from_api  # noqa: E402
from collector.api.client import parse  # noqa: E402
from collector.api.models import SeriesAnswer  # noqa: E402

NAME = "series_answer"


def answer(series: int, points: int) -> bytes:
    """One downsampled metrics answer, as the API writes it (NaN bare, a missing value as null)."""

    def column(k: int, shift: float) -> list[float | None]:
        values: list[float | None] = [2.0 / (1 + i / 100) + shift + (i * k % 7) / 100 for i in range(points)]
        values[points // 3] = math.nan
        values[points // 2] = None
        return values

    return json.dumps(
        {
            "run": "bench",
            "series": [
                {
                    "metric": f"group{k % 8}/metric{k}",
                    "steps": list(range(0, points * 50, 50)),
                    "values": column(k, 0.0),
                    "min": column(k, -0.1),
                    "max": column(k, 0.1),
                    "first": column(k, 0.0),
                    "last": column(k, 0.0),
                    "nonfinite": [1 if i == points // 3 else 0 for i in range(points)],
                    "downsampled": True,
                    "total_points": points * 50,
                }
                for k in range(series)
            ],
        }
    ).encode()


def median_ms(work, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--series", type=int, default=80)
    ap.add_argument("--points", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    body = answer(args.series, args.points)
    data = json.loads(body)
    typed = parse(data, SeriesAnswer)
    figures = {
        "json_ms": median_ms(lambda: json.loads(body), args.rounds),
        "parse_ms": median_ms(lambda: parse(data, SeriesAnswer), args.rounds),
        "app_series_ms": median_ms(lambda: [from_api(s) for s in typed.series], args.rounds),
    }
    print(
        f"{args.series} series x {args.points} buckets ({len(body) / 1e6:.1f} MB), median of {args.rounds}:"
    )
    for name, ms in figures.items():
        print(f"  {name:<14} {ms:8.1f} ms")
    gen.write_json(NAME, {"series": args.series, "points": args.points, "rounds": args.rounds, **figures})


if __name__ == "__main__":
    main()
