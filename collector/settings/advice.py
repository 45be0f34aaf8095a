"""The `[advice]` settings of runwatch.toml: which evaluation picks the checkpoint to keep, and how far before
a spike an error alert's action goes back; part of `collector.settings.config.DetectConfig` (`advice`)."""

from __future__ import annotations

from dataclasses import dataclass

from collector.detect.base import checked_table


class AdviceConfigError(ValueError):
    """An `[advice]` table that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class AdviceSettings:
    """Which evaluation picks the checkpoint to keep; None leaves the choice to the run (HF
    `metric_for_best_model`, else the validation loss)."""

    metric: str | None = None
    direction: str | None = None  # "min" or "max"; None: from the metric's name
    # an error alert's action replays a spike from a checkpoint at least this many steps before it
    restart_before_steps: int = 100


def parse_advice(current: AdviceSettings, values: object, where: str) -> AdviceSettings:
    """`current` with one `[advice]` table applied; raises AdviceConfigError naming `where` and the key."""
    if values is None:
        return current
    values = checked_table(values, ("metric", "direction", "restart_before_steps"), where, AdviceConfigError)
    restart = values.get("restart_before_steps", current.restart_before_steps)
    if isinstance(restart, bool) or not isinstance(restart, int) or restart < 0:
        raise AdviceConfigError(
            f"{where} restart_before_steps: expected a whole number >= 0, got {restart!r}"
        )
    metric = values.get("metric", current.metric)
    if metric is not None and (not isinstance(metric, str) or not metric):
        raise AdviceConfigError(
            f"{where} metric: expected a metric name (a non-empty string), got {metric!r}"
        )
    direction = values.get("direction", current.direction)
    if direction is not None and direction not in ("min", "max"):
        raise AdviceConfigError(f'{where} direction: expected "min" or "max", got {direction!r}')
    if direction is not None and metric is None:
        raise AdviceConfigError(f"{where} direction needs a metric (metric = \"...\"): a direction alone would "
                                f"apply to whatever metric the run chose")  # fmt: skip
    return AdviceSettings(metric=metric, direction=direction, restart_before_steps=restart)
