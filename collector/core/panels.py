"""The run page's role panels, each declared once here: its title, the roles it draws, how it draws them, and,
for a role that only a panel reads, the metric names that play it.

The API sends a run's panels with the run (`RunDetail.panels`: those whose roles the run logs); the app draws
what it is sent and names no panel itself. A role the detection rules read (loss, grad_norm, reward, ...) is
named in `roles.py`, with the metric names of every trainer; a panel's own role (no rule reads it) is named
by its panel's `names`, so that adding such a panel is one declaration here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Panel:
    """A chart of the run page. `roles`: the roles whose metrics it draws, in its legend's order. `names`: the
    metric names (lower-case, as `roles.role_of` compares them) that play its first role, for a role only this
    panel reads. `checkpoints`: mark the run's checkpoints on it. `always_log`: a logarithmic y axis (grad
    norms span decades: their normal band only reads on one). `smooth`: offer smoothing (a schedule, such as
    the learning rate, is drawn as logged: smoothing would bend its shape)."""

    title: str
    roles: tuple[str, ...]
    y_title: str = ""
    checkpoints: bool = False
    always_log: bool = False
    smooth: bool = True
    names: tuple[str, ...] = ()


# In the page's order (the panels that lead a run of each kind are picked by the app, by title).
PANELS = (
    Panel("Validation score", ("val_score",), y_title="score"),
    Panel("Loss", ("loss", "val_loss"), y_title="loss"),
    Panel("Learning rate", ("lr",), y_title="learning rate", smooth=False),
    Panel("Gradient norm", ("grad_norm",), y_title="grad norm", always_log=True),
    Panel("Time per step", ("step_time",), y_title="seconds", checkpoints=True),
    Panel(
        "GPU memory",
        ("gpu_memory",),
        y_title="GiB",
        # peak memory in GiB (bytes / 1024**3): verl's perf/ metrics, torchtune's training.get_memory_stats
        names=(
            "perf/max_memory_allocated_gb",
            "perf/max_memory_reserved_gb",
            "peak_memory_active",
            "peak_memory_alloc",
            "peak_memory_reserved",
        ),
    ),
    Panel("Reward", ("reward",), y_title="reward"),
    Panel("KL divergence", ("kl",), y_title="KL"),
    Panel("Entropy", ("entropy",), y_title="entropy"),
    Panel("Response length", ("response_length",), y_title="tokens"),
)


def own_role_names() -> dict[str, str]:
    """Metric name (lower-case) -> role, for the roles panels name themselves (`Panel.names`)."""
    return {name: panel.roles[0] for panel in PANELS for name in panel.names}


def panels_for(roles: set[str]) -> list[Panel]:
    """The panels that draw at least one of `roles` (a run's metrics' roles), in the page's order."""
    return [panel for panel in PANELS if roles.intersection(panel.roles)]
