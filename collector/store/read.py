"""Read queries over the store for the API and the CLI: runs, series (downsampled or raw), sources, quarantine.

SQL lives here and in `store.py` / `store_alerts.py` only; every query takes parameters.
"""

from __future__ import annotations

import json
import math

import numpy as np

from collector.core.model import AFTER_ALL_STEPS, BEFORE_ALL_STEPS
from collector.core.roles import step_order
from collector.store.db import Store


def runs(store: Store, run: str | None = None, runs: list[str] | None = None) -> list[dict]:
    """Runs with their state, newest activity first (or just `run`, or those of `runs` the store holds)."""
    where, params = ("id = ?", [run]) if run is not None else of_runs("id", runs)
    return store.dicts(
        f"""SELECT id, root, path, format, status, last_step, total_steps, created_at, updated_at, last_point_at,
                   config, status_info, latest_marker, detected_to
            FROM runs WHERE {where} ORDER BY coalesce(last_point_at, created_at) DESC, id""",
        params,
    )


def of_runs(column: str, runs: list[str] | None) -> tuple[str, list]:
    """A condition that `column` is one of `runs` (`true` for None: every run), and its parameters. One list
    parameter, not one per run: a thousand run ids bind as fast as one."""
    if runs is None:
        return "true", []
    return f"{column} IN (SELECT unnest(?::VARCHAR[]))", [list(runs)]


def run_progress(store: Store, run: str | None = None) -> list[dict]:
    """Every run (or just `run`) with how far it got: `id`, `last_step`, `status`; what grouping its alerts into
    incidents reads (`runs` reads each run's config and status texts too: a trainer_state.json can be a MB)."""
    where, params = ("WHERE id = ?", [run]) if run is not None else ("", [])
    return store.dicts(f"SELECT id, last_step, status FROM runs {where} ORDER BY id", params)


def metric_stats(store: Store, run: str | None = None, runs: list[str] | None = None) -> list[dict]:
    """Per (run, metric) of `run`, else of `runs`, else of every run: point count, first and last step and the
    value at the last."""
    where, params = of_runs("run_id", [run] if run is not None else runs)
    return store.dicts(
        f"""SELECT run_id AS run, metric, points, first_step, last_step, last_value FROM metric_stats WHERE {where}
            ORDER BY run_id, metric""",
        params,
    )


def metric_shapes(store: Store, run: str) -> dict[str, dict]:
    """Per metric of `run`: `constant` (its value when its points, two or more, all hold the same finite value,
    else None) and `same_as` (the first metric by name logging the very same values at the same steps, else
    None: verl's `critic/score/mean` and `critic/rewards/mean`, a value logged under two names). One pass of
    aggregates, then a comparison of whole series only among metrics whose aggregates agree."""
    rows = store.rows(
        """SELECT metric, count(*), min(value), max(value), min(step), max(step), sum(value)
           FROM points WHERE run_id = ? GROUP BY metric ORDER BY metric""",
        [run],
    )
    out = {m: {"constant": None, "same_as": None} for m, *_ in rows}
    candidates: dict[tuple, list[str]] = {}
    for metric, n, lo, hi, first, last, total in rows:
        if n > 1 and lo == hi and math.isfinite(lo):
            out[metric]["constant"] = lo
        elif n > 1:
            key = (n, repr(lo), repr(hi), first, last, repr(round(total, 6)) if total is not None else None)
            candidates.setdefault(key, []).append(metric)
    alike = [metric for group in candidates.values() if len(group) > 1 for metric in group]
    if not alike:
        return out
    shapes = store.rows(
        f"""SELECT metric, hash(list(step ORDER BY step)), hash(list(value ORDER BY step)) FROM points
            WHERE run_id = ? AND metric IN ({", ".join("?" * len(alike))}) GROUP BY metric ORDER BY metric""",
        [run, *alike],
    )
    first_of: dict[tuple, str] = {}
    for metric, steps, values in shapes:
        first = first_of.setdefault((steps, values), metric)
        out[metric]["same_as"] = None if first == metric else first
    return out


def open_alerts(store: Store, rule: str, runs: list[str] | None = None) -> dict[str, dict]:
    """Per run (of `runs`, or every run) with alerts not yet resolved (open or acknowledged): `counts` (of
    them by severity), `has_rule` (one of `rule` among them) and `first_error` (the first raised error among
    them: `rule`, `metric`, `first_step`, `message`; None without one). One grouped pass over the alerts."""
    among, params = of_runs("run_id", runs)
    out: dict[str, dict] = {}
    for run, severity, n, has_rule, first in store.rows(
        f"""SELECT run_id, severity, count(*), bool_or(rule = ?),
                   arg_min(struct_pack(rule, metric, first_step, message), (first_step, id))
            FROM alerts WHERE state != 'resolved' AND {among} GROUP BY run_id, severity""",
        [rule, *params],
    ):
        facts = out.setdefault(
            run, {"counts": {"error": 0, "warn": 0, "info": 0}, "has_rule": False, "first_error": None}
        )
        facts["counts"][severity] = n
        facts["has_rule"] = facts["has_rule"] or has_rule
        if severity == "error":
            facts["first_error"] = dict(first)
    return out


def last_cleared_steps(store: Store, runs: list[str]) -> dict[str, int]:
    """Per run of `runs` with a resolved alert: the last step any of them reached (a run gone further than its
    keep-firing window past it has no cleared incident left open)."""
    among, params = of_runs("run_id", runs)
    return dict(
        store.rows(
            f"""SELECT run_id, max(coalesce(last_step, first_step)) FROM alerts
                WHERE state = 'resolved' AND {among} GROUP BY run_id""",
            params,
        )
    )


def advice_signatures(
    store: Store, alert_rules: tuple[str, ...], run: str | None = None, runs: list[str] | None = None
) -> dict[str, tuple]:
    """Per run (every run, or just `run`, or those of `runs`), a value that changes whenever its checkpoint
    index, its alerts of `alert_rules` or its error alerts, its replaced points or its files' formats change:
    what a cached answer built from them is checked against. Four parts, (count, figure) each or None (the run
    has no such row: a run without checkpoints has a first part of None), from one query."""
    of_run, params = ("run_id = ?", [run]) if run is not None else of_runs("run_id", runs)
    rules = ", ".join("?" * len(alert_rules))
    parts = (  # (table, rows, figure); a figure as text: the parts' figures are of different types
        ("checkpoints", "true", "sum(hash(step, path, complete, bytes, info))"),
        ("alerts", f"(rule IN ({rules}) OR severity = 'error')", "sum(hash(id, rule, severity, first_step, last_step, state, active))"),
        ("points_replaced", "true", "max(replaced_at)"),
        ("sources", "true", "sum(hash(path, format))"),
    )  # fmt: skip
    sql = " UNION ALL ".join(
        f"SELECT {i}, run_id, count(*), ({figure})::VARCHAR FROM {table} WHERE {rows} AND {of_run} GROUP BY run_id"
        for i, (table, rows, figure) in enumerate(parts)
    )
    out: dict[str, list] = {}
    for i, name, count, figure in store.rows(sql, [*params, *alert_rules, *params, *params, *params]):
        out.setdefault(name, [None] * len(parts))[i] = (count, figure)
    return {name: tuple(parts) for name, parts in out.items()}


def point_count(store: Store) -> int:
    """How many points the store holds, over every run."""
    return store.rows("SELECT count(*) FROM point_rows")[0][0]


def series(
    store: Store,
    run: str,
    metric: str,
    points: int = 2000,
    start: int | None = None,
    end: int | None = None,
    after: int | None = None,
) -> dict:
    """One metric of one run: raw when it has at most `points` points (or with `after`), else bucketed.

    Bucketed by step range into at most `points` buckets; each bucket keeps its first, last, min and max
    (over its finite values; NaN only when it has none), its last step, and `nonfinite`, how many NaN or
    infinite points it holds. `values` is the bucket's last value, except that a bucket holding a NaN
    reports NaN (else an infinity it holds), so neither a NaN nor a spike beside it is ever sampled away.
    """
    whole = start is None and end is None and after is None
    low = BEFORE_ALL_STEPS if start is None else start
    high = AFTER_ALL_STEPS if end is None else end
    if after is not None:
        low = max(low, after + 1)
    if whole:
        # The per-metric summary kept at ingest gives the count and the range without a pass over points.
        found = store.rows(
            "SELECT points, first_step, last_step FROM metric_stats WHERE run_id = ? AND metric = ?",
            [run, metric],
        )
        total, first, last = found[0] if found else (0, None, None)
    elif after is not None:
        total = first = last = (
            None  # raw: the count is the rows read (a live poll reads the lake once, not twice)
        )
    else:
        total, first, last = store.rows(
            """SELECT count(*), min(step), max(step) FROM points
               WHERE run_id = ? AND metric = ? AND step BETWEEN ? AND ?""",
            [run, metric, low, high],
        )[0]
    out = {"run": run, "metric": metric, "total_points": total}
    if after is not None or total <= max(points, 1):
        table = (
            store.cursor()
            .execute(
                "SELECT step, value FROM points WHERE run_id = ? AND metric = ? AND step BETWEEN ? AND ? ORDER BY step",
                [run, metric, low, high],
            )
            .fetchnumpy()
        )
        out.update(steps=table["step"].tolist(), values=table["value"].tolist(), downsampled=False)
        if total is None:
            out["total_points"] = len(out["steps"])
        return out
    span = last - first + 1
    # Bucket b holds the steps first + [b*span/points, (b+1)*span/points), in 128-bit arithmetic: steps span
    # the whole int64 range, and (step - first) * points overflows 64 bits from a span of ~4.6e15 on.
    bucket_of = "((step::HUGEINT - ?::HUGEINT) * ?) // ?::HUGEINT"
    rows = store.rows(
        # DuckDB sorts NaN above every number: max() is NaN (or +inf) and min() -inf exactly when the bucket
        # holds such a point; only those buckets need the slower finite-only pass below.
        f"""SELECT {bucket_of} AS bucket, max(step), arg_min(value, step), arg_max(value, step),
                  min(value), max(value)
           FROM points WHERE run_id = ? AND metric = ? AND step BETWEEN ? AND ?
           GROUP BY bucket ORDER BY bucket""",
        [first, points, span, run, metric, first, last],
    )
    bad_buckets = [r[0] for r in rows if not (math.isfinite(r[4]) and math.isfinite(r[5]))]
    finite_range: dict[int, tuple] = {}
    if bad_buckets:
        # Only the steps of the first to the last bucket holding a NaN/inf are read again.
        low_step = first + -(-bad_buckets[0] * span // points)
        high_step = first + -(-(bad_buckets[-1] + 1) * span // points) - 1
        finite_range = {
            b: (mn, mx, n)
            for b, mn, mx, n in store.rows(
                f"""SELECT {bucket_of} AS bucket, min(value) FILTER (WHERE isfinite(value)),
                          max(value) FILTER (WHERE isfinite(value)), count(*) FILTER (WHERE NOT isfinite(value))
                   FROM points WHERE run_id = ? AND metric = ? AND step BETWEEN ? AND ?
                   GROUP BY bucket""",
                [first, points, span, run, metric, low_step, high_step],
            )
        }
    nan = math.nan
    steps, values, mins, maxs, firsts, lasts, nonfinite = [], [], [], [], [], [], []
    for bucket, step, first_value, last_value, low_all, high_all in rows:
        steps.append(step)
        firsts.append(first_value)
        lasts.append(last_value)
        if bucket not in finite_range:
            values.append(last_value)
            mins.append(low_all)
            maxs.append(high_all)
            nonfinite.append(0)
            continue
        mn, mx, bad = finite_range[bucket]
        # The value shows the bucket's worst point (NaN first, else an infinity), so a NaN or an infinity
        # anywhere stays on the line; min/max carry the finite range, so a spike beside it stays too.
        values.append(nan if high_all != high_all else high_all if math.isinf(high_all) else low_all)
        mins.append(nan if mn is None else mn)
        maxs.append(nan if mx is None else mx)
        nonfinite.append(bad)
    out.update(
        steps=steps,
        values=values,
        min=mins,
        max=maxs,
        first=firsts,
        last=lasts,
        nonfinite=nonfinite,
        downsampled=True,
    )
    return out


def points_from(
    store: Store, run: str, metrics: list[str] | None, after_step: int, limit: int, wall_time: bool = False
) -> list[tuple]:
    """(step, metric, value) of a run with step > `after_step`, in step order, at most `limit` rows (with
    `wall_time=True`, (step, metric, value, wall_time)).

    Reads a window of steps sized from the run's density first: a top-`limit` over every later point
    would make reading a long run in slices (the live feed's playback, judging a backlog) quadratic. A
    window may hold fewer than `limit` rows; an empty one means the run holds nothing past `after_step`.
    """
    where, params = "", []
    if metrics:
        where = f" AND metric IN ({', '.join('?' for _ in metrics)})"
        params = list(metrics)
    columns = "step, metric, value, wall_time" if wall_time else "step, metric, value"
    sql = f"""SELECT {columns} FROM points WHERE run_id = ? AND step > ? AND step <= ?{where}
              ORDER BY step, metric LIMIT ?"""
    total, first, last = store.rows(
        f"SELECT sum(points), min(first_step), max(last_step) FROM metric_stats WHERE run_id = ?{where}",
        [run, *params],
    )[0]
    if total:
        span = math.ceil(limit * (last - first + 1) / total) * 2
        rows = store.rows(sql, [run, after_step, after_step + span, *params, limit])
        if rows or after_step + span >= last:
            return rows
    return store.rows(sql, [run, after_step, AFTER_ALL_STEPS, *params, limit])  # a gap in the steps


def point_columns(
    store: Store, run: str, after_step: int, limit: int
) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
    """About `limit` points of a run with step > `after_step`, whole steps only, each step's points in
    `core.roles.step_order` (training metrics with gradient norms last, then evaluations, each by name: the order the live path judges
    them in), as columns for judging a backlog in bulk: (steps int64, metric codes into the returned names, the
    names, values float64). Empty columns: nothing stored past `after_step`.
    """
    names = [r[0] for r in store.rows("SELECT metric FROM series WHERE run_id = ? ORDER BY metric", [run])]
    sql = """SELECT p.step, s.code, p.value FROM point_rows p
             JOIN (SELECT id, (row_number() OVER (ORDER BY metric)) - 1 AS code FROM series WHERE run_id = ?) s
               ON p.series = s.id
             WHERE p.step > ? AND p.step <= ? ORDER BY p.step, s.code"""
    total, first, last = store.rows(
        "SELECT sum(points), min(first_step), max(last_step) FROM metric_stats WHERE run_id = ?", [run]
    )[0]
    upto = AFTER_ALL_STEPS
    if total:  # a window of steps holding about `limit` points (whole steps, however dense the run)
        upto = after_step + max(1, math.ceil(limit * (last - first + 1) / total))
    table = store.cursor().execute(sql, [run, after_step, upto]).fetchnumpy()
    if not len(table["step"]) and upto < AFTER_ALL_STEPS:  # a gap in the steps: the next stored step on
        nxt = store.rows("SELECT min(step) FROM points WHERE run_id = ? AND step > ?", [run, after_step])[0][
            0
        ]
        if nxt is not None:
            table = store.cursor().execute(sql, [run, after_step, nxt]).fetchnumpy()
    steps, codes = np.asarray(table["step"], dtype=np.int64), np.asarray(table["code"], dtype=np.int64)
    values = np.asarray(table["value"], dtype=np.float64)
    # each name's place in `step_order` among the run's names (evaluations after the training metrics of
    # their step, gradient norms last of those)
    rank = np.empty(len(names), dtype=np.int64)
    rank[sorted(range(len(names)), key=lambda i: step_order(names[i]))] = np.arange(len(names))
    if len(codes) and (rank != np.arange(len(names))).any():
        order = np.lexsort((rank[codes], steps))
        steps, codes, values = steps[order], codes[order], values[order]
    return steps, codes, names, values


def playback_range(store: Store, run: str, metrics: list[str] | None, start: int, end: int) -> dict:
    """What a playback of steps `start`..`end` holds: `steps` (distinct steps with points), `total` (points),
    `first_step`, `last_step`, and `timed` (every point there has a wall time)."""
    where, params = "", []
    if metrics:
        where = f" AND metric IN ({', '.join('?' for _ in metrics)})"
        params = list(metrics)
    steps, total, first, last, timed = store.rows(
        f"""SELECT count(DISTINCT step), count(*), min(step), max(step), count(wall_time) FROM points
            WHERE run_id = ? AND step >= ? AND step <= ?{where}""",
        [run, start, end, *params],
    )[0]
    return {
        "steps": steps,
        "total": total,
        "first_step": first,
        "last_step": last,
        "timed": bool(total) and timed == total,
    }


def recent_wall_times(store: Store, run: str, steps: int) -> list[float]:
    """The wall times of the run's last `steps` timed steps (the latest logged at each), oldest first: the pace
    a detector learns. One row a step, whatever the number of metrics (a window per metric over 20,000
    per-layer metrics ran out of DuckDB's memory)."""
    rows = store.rows(
        """SELECT step, max(wall_time) FROM points
           WHERE run_id = ? AND wall_time IS NOT NULL AND NOT isnan(wall_time)
           GROUP BY step ORDER BY step DESC LIMIT ?""",
        [run, steps],
    )
    return [wall for _, wall in reversed(rows)]


def sources(store: Store, run: str | None = None) -> list[dict]:
    """Sources with their offsets, segments, the points they gave and quarantined-line counts."""
    where, params = ("WHERE s.run_id = ?", [run]) if run is not None else ("", [])
    return store.dicts(
        f"""SELECT s.id, s.run_id AS run, s.path, s.format, s.byte_offset AS offset, s.lines, s.segment, s.state,
                   coalesce(s.points, 0) AS points,
                   (SELECT count(*) FROM quarantine q WHERE q.source_id = s.id) AS bad_lines
            FROM sources s {where} ORDER BY s.path""",
        params,
    )


def source_formats(store: Store, run: str) -> list[str]:
    """The formats of a run's files, by path: what `sources` lists without its per-file counts (a count of
    quarantined lines per file costs a query each)."""
    return [f for (f,) in store.rows("SELECT format FROM sources WHERE run_id = ? ORDER BY path", [run])]


def skipped_files(store: Store, run: str | None = None) -> list[dict]:
    """Files under runs' folders that are not read: `run`, `path`, `reason`, `bytes`."""
    where, params = ("WHERE run_id = ?", [run]) if run is not None else ("", [])
    return store.dicts(
        f"SELECT run_id AS run, path, reason, bytes FROM skipped_files {where} ORDER BY run_id, path", params
    )


def quarantined(store: Store, run: str | None = None, limit: int = 200) -> list[dict]:
    """Quarantined lines (file, segment, line number, reason, text), oldest first."""
    where, params = ("WHERE s.run_id = ?", [run]) if run is not None else ("", [])
    return store.dicts(
        f"""SELECT s.path, q.segment, q.line, q.reason, q.text FROM quarantine q JOIN sources s ON s.id = q.source_id
            {where} ORDER BY q.created_at, q.line LIMIT ?""",
        [*params, limit],
    )


def replaced_points(store: Store, run: str, metric: str) -> list[dict]:
    """Earlier values of a metric replaced by later writes of the same step (the older lives)."""
    return store.dicts(
        """SELECT step, value, segment, source_id, replaced_at FROM points_replaced
           WHERE run_id = ? AND metric = ? ORDER BY step, replaced_at""",
        [run, metric],
    )


def epochs(store: Store, run: str, metric: str, epoch_metric: str) -> list[dict]:
    """Per-epoch mean, std, min, max of `metric`, the epoch of a step being the run's `epoch_metric` there."""
    return store.dicts(
        """WITH e AS (SELECT step, floor(value)::BIGINT AS epoch FROM points WHERE run_id = ? AND metric = ?),
                m AS (SELECT step, value FROM points WHERE run_id = ? AND metric = ? AND NOT isnan(value))
           SELECT e.epoch, avg(m.value) AS mean, stddev_samp(m.value) AS std, min(m.value) AS min,
                  max(m.value) AS max, count(*) AS points
           FROM m ASOF JOIN e ON m.step >= e.step GROUP BY e.epoch ORDER BY e.epoch""",
        [run, epoch_metric, run, metric],
    )


def run_config(store: Store, run: str) -> dict | None:
    """The run's stored config (every info file's part merged); None when it has none."""
    row = store.cursor().execute("SELECT config FROM runs WHERE id = ?", [run]).fetchone()
    return parse_json(row[0]) if row else None


def parse_json(text: str | None) -> dict | None:
    """A JSON column back to a dict (None when empty or unreadable)."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else {"value": value}


def memory_limit(store: Store) -> str:
    """DuckDB's memory limit in force, as DuckDB says it (`152.5 MiB`)."""
    return store.rows("SELECT current_setting('memory_limit')")[0][0]
