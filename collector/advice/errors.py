"""The run's error episodes as the checkpoint advice weighs them. Pure: no I/O.

Stable interface:

- `error_episodes(alerts, metric_stats) -> list[dict]`: the error alerts whose steps say something about the
  weights saved there (every rule but `NOT_ABOUT_WEIGHTS_RULES`: a run that failed or went silent, a slow
  step), open or cleared, but not one a person resolved while it was still on; each `{rule, metric,
  first_step, last_step, from_start}`, `from_start` when it began at its metric's first logged points. An
  alert of the same rule and metric that comes back within the rule's keep-firing window after it (a
  warning of a divergence that flickers below its error threshold) goes on the error: the same incident.
- `covering(step, episodes) -> dict | None`: the first episode whose steps hold `step`.
- `never_learned(episodes, candidates) -> dict | None`: a `no_learning` error from the run's first steps
  that covers every candidate checkpoint: no checkpoint is better than the base model.
- `inside_text(step, episode) -> str`: "step 200 lies inside the response_truncation error (steps 75-250):
  responses there are cut at the length limit".
"""

from __future__ import annotations

from collector.detect import registry
from collector.detect.incidents import grouping
from collector.detect.rules import NOT_ABOUT_WEIGHTS_RULES
from collector.detect.trends import NoLearningLoss

_NO_LEARNING = NoLearningLoss.rule_id

# a series' first this many logging intervals still count as "from the start" (a rule needs a point or two)
_START_INTERVALS = 2


def error_episodes(alerts: list[dict], metric_stats: list[dict]) -> list[dict]:
    """The run's error episodes that judge its weights (see the module docstring), oldest first."""
    starts = {s["metric"]: _start_limit(s) for s in metric_stats}
    intervals = {s["metric"]: _interval(s) for s in metric_stats}
    found = []
    for a in alerts:
        if a.get("severity") != "error" or a.get("rule") in NOT_ABOUT_WEIGHTS_RULES:
            continue
        if _accepted(a):
            continue
        first, last = int(a["first_step"]), int(a["last_step"])
        limit = starts.get(a.get("metric") or "")
        window = grouping(a["rule"]).keep_firing_points * max(1.0, intervals.get(a.get("metric") or "", 1.0))
        found.append(
            {
                "rule": a["rule"],
                "metric": a.get("metric") or None,
                "first_step": first,
                "last_step": _flickers_to(a, last, window, alerts),
                "from_start": limit is not None and first <= limit,
            }
        )
    return sorted(found, key=lambda e: (e["first_step"], e["rule"]))


def _accepted(alert: dict) -> bool:
    # a person resolved it while the detector still saw it: they accepted it
    return alert.get("state") == "resolved" and bool(alert.get("active"))


def _flickers_to(error: dict, last: int, window: float, alerts: list[dict]) -> int:
    """The last step of the error's trouble: its own, or that of the alerts of its rule and metric that came
    back within `window` steps of it, one after another."""
    key = (error["rule"], error.get("metric") or None)
    later = sorted(
        (int(a["first_step"]), int(a["last_step"]))
        for a in alerts
        if (a["rule"], a.get("metric") or None) == key and int(a["first_step"]) > last and not _accepted(a)
    )
    for first, end in later:
        if first - last > window:
            break
        last = max(last, end)
    return last


def _interval(stats: dict) -> float:
    first, last, points = stats.get("first_step"), stats.get("last_step"), stats.get("points") or 0
    return (last - first) / (points - 1) if first is not None and last is not None and points > 1 else 1.0


def _start_limit(stats: dict) -> int | None:
    """The last step that still counts as a series' start: its first step plus two logging intervals."""
    first, last, points = stats.get("first_step"), stats.get("last_step"), stats.get("points") or 0
    if first is None:
        return None
    interval = (last - first) / (points - 1) if last is not None and points > 1 else 0
    return int(first + _START_INTERVALS * interval)


def covering(step: int, episodes: list[dict]) -> dict | None:
    """The first error episode whose steps hold `step`, else None."""
    return next((e for e in episodes if e["first_step"] <= step <= e["last_step"]), None)


def never_learned(episodes: list[dict], candidates: list[dict]) -> dict | None:
    """The `no_learning` error episode from the run's first steps that covers every candidate checkpoint
    (none saved after it ended), else None."""
    for e in episodes:
        if (
            e["rule"] == _NO_LEARNING
            and e["from_start"]
            and all(c["step"] <= e["last_step"] for c in candidates)
        ):
            return e
    return None


def never_learned_text(episode: dict) -> str:
    """Why no checkpoint is recommended for a run that never learned."""
    metric = f" on {episode['metric']}" if episode.get("metric") else ""
    return (
        f"The run never learned: no checkpoint is better than the base model (the no_learning error{metric} "
        f"runs from its first logged steps, step {episode['first_step']}, to step {episode['last_step']}, over "
        f"every checkpoint). Fix the cause and start again from the base model."
    )


def inside_text(step: int, episode: dict) -> str:
    """Where `step` lies and what the episode means for the weights saved there."""
    rule = episode["rule"]
    meaning = registry.meaning(rule) or f"your {rule} rule judged the run bad there"
    return (
        f"step {step} lies inside the {rule} error (steps {episode['first_step']}-{episode['last_step']}): "
        f"{meaning}"
    )
