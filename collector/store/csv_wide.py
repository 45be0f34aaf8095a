"""DuckDB's bulk read of CSV history rows: staged as the wide table every bulk insert shares.

A function over a cursor in the caller's transaction. The caller hands a file of complete data rows (past
`skip` header lines) whose bytes it checks and counts: `width` fields a row, nothing but numbers and empty cells. The
rows are read with DuckDB's CSV reader (every column DOUBLE, so any other text stops the read), staged as
`rw_wide` and inserted by `points.bulk_from_wide`, the insert and checks of the JSONL bulk path.
"""

from __future__ import annotations

from collections.abc import Callable

import duckdb

from collector.store.db import SourceState
from collector.store.points import BulkMismatch, TooManyMetrics, bulk_from_wide
from collector.store.wide_stats import BULK_MAX_METRICS


def bulk_csv(
    cur: duckdb.DuckDBPyConnection,
    s: SourceState,
    path: str,
    width: int,
    roles: tuple[int, int | None, list[tuple[int, str]]],
    after_step: int,
    counted: Callable[[], tuple[int, int]],
    skip: int = 0,
) -> tuple[int, int]:
    """Insert the CSV data rows of `path` (`width` fields each) inside the caller's transaction.

    `roles` are the header's (step column, wall-time column or None, [(column, metric name)]), as the CSV
    parser reads them; `counted()` gives what the caller counted in the bytes (data rows, non-empty fields;
    asked after DuckDB's read, so the counting can run meanwhile); `skip` lines at the top of `path` (a
    header) are not read. Returns (points, highest step). Raises BulkMismatch when DuckDB's rows or non-empty cells differ
    from the counts, duckdb.Error when a cell is not a number or a step not a whole number in 64 bits: the
    caller rolls back and the CSV parser reads the rows (and quarantines bad ones with their line numbers).
    """
    if width > BULK_MAX_METRICS:
        raise TooManyMetrics(f"{width} columns: more than a bulk read stages ({BULK_MAX_METRICS})")
    step, wall, metrics = roles
    columns = {f"x{i}": "DOUBLE" for i in range(width)}
    used = {step, wall, *(i for i, _ in metrics)}
    # The parser reads a step through a float and wants a whole number: DuckDB would round 1.5 to 2.
    select = [
        f"""CASE WHEN x{step} IS NULL OR isnan(x{step}) OR isinf(x{step}) OR x{step} <> floor(x{step})
            THEN error('not a whole step') ELSE x{step} END::BIGINT AS step""",
        *(f"x{i} AS c{k}" for k, (i, _) in enumerate(metrics)),
        f"x{wall} AS wall_time" if wall is not None else "NULL::DOUBLE AS wall_time",
        *(f"x{i} AS o{i}" for i in range(width) if i not in used),  # read (and counted), not stored
    ]
    # In file order (a merge needs it). No quoting: the caller passes only rows without a quote.
    cur.execute(
        f"""CREATE OR REPLACE TEMP TABLE rw_wide AS SELECT {", ".join(select)}
            FROM read_csv(?, header = false, columns = ?, delim = ',', quote = '', escape = '',
                          auto_detect = false, strict_mode = true, null_padding = false, skip = ?)""",
        [path, columns, skip],
    )
    try:
        # Every non-empty cell once: the step (every row has one), metrics, the wall time, the other columns.
        values = [f"count(c{k})" for k, (i, _) in enumerate(metrics)]
        cells_sql = ["count(*)"] + [f"count(c{k})" for k, (i, _) in enumerate(metrics) if i != step]
        if wall is not None:
            cells_sql.append("count(wall_time)")
        cells_sql += [f"count(o{i})" for i in range(width) if i not in used]
        got_rows, got_cells, points = cur.execute(
            f"SELECT count(*), {' + '.join(cells_sql)}, {' + '.join(values) or '0'} FROM rw_wide"
        ).fetchall()[0]
        rows, cells = counted()
        if (got_rows, got_cells) != (rows, cells):
            raise BulkMismatch(
                f"read {got_rows} rows and {got_cells} cells, the bytes hold {rows} and {cells}"
            )
        names = [name for _, name in metrics]
        return bulk_from_wide(
            cur, s, after_step, names, lambda: points, wall_time=wall is not None, infinities_to_parser=False
        )
    finally:
        cur.execute("DROP TABLE IF EXISTS rw_wide")
