"""Series as the app holds them: the API's metric series (`collector.api.models.Series`), merged with live
points, smoothed for drawing.

Pure functions over plain lists; no I/O, no Streamlit. A series here is a dict with lists of one length:
`steps`, `values`, `mins`, `maxs` (a raw point has min = max = value), plus `downsampled`, `total_points`
and `nonfinite_steps` (steps whose value, or some value in whose bucket, is NaN or infinite).
"""

from __future__ import annotations

import math

from collector.api.models import Series

# "lr(1e-3)" is the old verl trainer's name for the learning rate multiplied by 1000.


def _floats(values: list[float | None]) -> list[float]:
    """The model's values with null (a value the API could not write as a number) as NaN."""
    return [math.nan if v is None else v for v in values]


def is_finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def raw_points(metric: str, steps: list[int], values: list[float | None]) -> Series:
    """Raw points (a playback's so far; none, for a metric the API has no points of) as an API series."""
    return Series(metric=metric, steps=steps, values=values, downsampled=False, total_points=len(steps))


def from_api(series: Series) -> dict:
    """Turn one API series (`steps`, `values`, optional `min`/`max`/`nonfinite`, `downsampled`) into the app's.

    Promises lists of equal length; a bucket or point holding NaN/inf is listed in `nonfinite_steps`: a
    bucket the API counts NaN/inf points in (`nonfinite`), or a value the API wrote as NaN, inf or null.
    """
    steps = list(series.steps)
    values = _floats(series.values)
    downsampled = series.downsampled
    if downsampled and series.min is not None and series.max is not None:
        mins = _floats(series.min)
        maxs = _floats(series.max)
    else:
        mins, maxs = list(values), list(values)
    counts = series.nonfinite if downsampled else None
    nonfinite = {step for step, n in zip(steps, counts or [], strict=False) if n}
    for step, value, lo, hi in zip(steps, values, mins, maxs, strict=True):
        if not (is_finite(value) and is_finite(lo) and is_finite(hi)):
            nonfinite.add(step)
    return {
        "metric": series.metric,
        "steps": steps,
        "values": values,
        "mins": mins,
        "maxs": maxs,
        "downsampled": downsampled,
        "total_points": series.total_points or len(steps),
        "nonfinite_steps": sorted(nonfinite),
    }


def last_step(series: dict) -> int | None:
    """The highest step held, or None for an empty series."""
    return series["steps"][-1] if series["steps"] else None


def append_new(series: dict, new: dict) -> dict:
    """Return `series` with the raw points of `new` (an app series) whose step is past its last step appended.

    Live polling asks the API for `after=last_step`, so normally every point is new; the step check keeps a
    repeated poll from drawing a point twice.
    """
    after = last_step(series)
    keep = [i for i, s in enumerate(new["steps"]) if after is None or s > after]
    if not keep:
        return series
    merged = {key: list(series[key]) for key in ("steps", "values", "mins", "maxs")}
    for i in keep:
        merged["steps"].append(new["steps"][i])
        merged["values"].append(new["values"][i])
        merged["mins"].append(new["mins"][i])
        merged["maxs"].append(new["maxs"][i])
    added_nonfinite = [s for s in new["nonfinite_steps"] if after is None or s > after]
    return {
        **series,
        **merged,
        "total_points": series["total_points"] + len(keep),
        "nonfinite_steps": sorted(set(series["nonfinite_steps"]) | set(added_nonfinite)),
    }


def debiased_ema(values: list[float], weight: float) -> list[float]:
    """TensorBoard's smoothing: an exponential moving average divided by (1 - weight^n) to remove the start bias.

    `weight` in [0, 1); 0 returns the values unchanged. Non-finite values pass through as they are and do not
    enter the average, so one NaN does not blank the rest of the line.
    """
    finite = [v for v in values if is_finite(v)]
    # As TensorBoard does: a constant series is left as it is (smoothing would only add rounding noise).
    if weight <= 0 or not finite or min(finite) == max(finite):
        return list(values)
    weight = min(weight, 0.999)
    smoothed: list[float] = []
    last = 0.0
    count = 0
    for value in values:
        if not is_finite(value):
            smoothed.append(value)
            continue
        last = last * weight + (1 - weight) * value
        count += 1
        smoothed.append(last / (1 - weight**count))
    return smoothed


def scaled(series: dict, factor: float) -> dict:
    """The series with values, mins and maxs multiplied by `factor` (NaN stays NaN)."""
    if factor == 1.0:
        return series
    return {
        **series,
        "values": [v * factor for v in series["values"]],
        "mins": [v * factor for v in series["mins"]],
        "maxs": [v * factor for v in series["maxs"]],
    }


def metric_group(metric: str) -> str:
    """The panel group of a metric: its prefix before the first `/` (`actor/kl` -> `actor`), or `other`."""
    return metric.split("/", 1)[0] if "/" in metric else "other"


def group_metrics(metrics: list[str], exclude: set[str] = frozenset()) -> dict[str, list[str]]:
    """Metrics grouped by prefix, groups and names sorted, leaving out those already drawn in a role panel."""
    groups: dict[str, list[str]] = {}
    for name in sorted(metrics):
        if name in exclude:
            continue
        groups.setdefault(metric_group(name), []).append(name)
    return dict(sorted(groups.items()))
