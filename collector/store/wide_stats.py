"""The per-metric checks of a bulk read's wide stage (`rw_wide`: step, c0, c1, ...), in bounded statements.

A function over a cursor in the caller's transaction; `points.bulk_from_wide` compares what it gives with
the values counted in the file's bytes.
"""

from __future__ import annotations

import duckdb

# Bits a bulk read may spend on counting repeated steps exactly (steps in its range x metrics): 32 MiB.
BULK_BITMAP_BITS = 1 << 28
# Metrics a bulk read stages side by side at most: DuckDB's wide table and its per-metric checks grow with
# the columns (20,000 metrics do not fit its memory limit at all), so a file logging more (per-layer
# statistics of a big model) goes to the parser, whose memory is bounded by its chunk whatever the names.
BULK_MAX_METRICS = 1000
STATS_COLUMNS = 256  # metrics checked in one statement


def wide_stats(
    cur: duckdb.DuckDBPyConnection, metrics: int, low: int | None, high: int | None, infinities: bool
) -> tuple[list, int]:
    """For each of the `metrics` columns of `rw_wide` (steps `low`..`high`, None when empty), five numbers
    in a flat list: values, distinct steps, first step, last step, value at the last step; and, with
    `infinities`, how many rows hold an infinite value (else 0)."""
    # Repeated steps of a metric are counted exactly with one bit per step of the range (about 10x
    # cheaper than count(DISTINCT), which hashes every value); a range too sparse for bits (huge step
    # numbers) takes the hashing count.
    bitmap = low is not None and (high - low + 1) * max(metrics, 1) <= BULK_BITMAP_BITS
    stats: list = []
    infinite = 0
    if not metrics or low is None:
        return stats, infinite
    # A few hundred columns a statement, and no FILTER clause: DuckDB gives each filtered aggregate its
    # own copy of every column's vector, so 500 metrics asked at once took gigabytes outside its memory
    # limit. A CASE that yields NULL is skipped by the aggregate all the same.
    for first in range(0, metrics, STATS_COLUMNS):
        cols = range(first, min(metrics, first + STATS_COLUMNS))
        per_key = []
        for i in cols:
            step_if = f"CASE WHEN c{i} IS NOT NULL THEN step END"
            distinct = (
                f"bit_count(bitstring_agg({step_if}, ?, ?))" if bitmap else f"count(DISTINCT {step_if})"
            )
            per_key.append(f"count(c{i}), {distinct}, min({step_if}), max({step_if}), arg_max(c{i}, step)")
        # An infinity is rare, and DuckDB makes one of a number too long for a float (a 5,000-digit
        # integer), which the parser quarantines as unreadable: such a chunk goes to the parser, which
        # decides. (A CSV cell reads as infinite in DuckDB exactly when it does in Python's `float`.)
        if infinities:
            per_key.append("count(*) FILTER (WHERE " + " OR ".join(f"isinf(c{i})" for i in cols) + ")")
        row = cur.execute(
            f"SELECT {', '.join(per_key)} FROM rw_wide", [low, high] * len(cols) if bitmap else []
        ).fetchall()[0]
        if infinities:
            infinite += row[-1]
            row = row[:-1]
        stats.extend(row)
    return stats, infinite
