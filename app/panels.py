"""Which metrics a run page draws in which panel, from the metric roles the collector names.

Roles (loss, val_loss, grad_norm, lr, ...) come from the API's run detail (`metrics`, typed as
`collector.api.models.MetricInfo`); nothing here names or judges them. A panel's normal band and warning line
come from the run detail's `decorations` (the run's own thresholds).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from collector.api.models import Decoration, MetricInfo


@dataclass(frozen=True)
class Panel:
    """A chart of the run page: its title, the roles it draws, and its decorations."""

    title: str
    roles: tuple[str, ...]
    y_title: str = ""
    normal_band: tuple[float, float] | None = None
    warning_line: float | None = None
    checkpoints: bool = False
    always_log: bool = False  # grad norms span decades: the normal band only reads on a log axis
    smooth: bool = True  # a schedule (learning rate) is drawn as logged: smoothing would bend its shape
    metrics: tuple[str, ...] = field(default=())


ROLE_PANELS = (
    Panel("Validation score", ("val_score",), y_title="score"),
    Panel("Loss", ("loss", "val_loss"), y_title="loss"),
    Panel("Learning rate", ("lr",), y_title="learning rate", smooth=False),
    Panel("Gradient norm", ("grad_norm",), y_title="grad norm", always_log=True),
    Panel("Time per step", ("step_time",), y_title="seconds", checkpoints=True),
    Panel("Reward", ("reward",), y_title="reward"),
    Panel("KL divergence", ("kl",), y_title="KL"),
    Panel("Entropy", ("entropy",), y_title="entropy"),
    Panel("Response length", ("response_length",), y_title="tokens"),
)


# The panels a run page shows first, by the run's kind (the API's `kind`): what a person judges that run by.
FIRST_PANELS = {
    "rl": ("Validation score", "Reward", "KL divergence", "Entropy", "Response length"),
    "sft": ("Loss", "Learning rate", "Gradient norm"),
}
# The headline tiles: (label, role) per run kind, each the last value of the run's first metric in that role.
HEADLINES = {
    "rl": (
        ("Validation score", "val_score"),
        ("Reward", "reward"),
        ("KL", "kl"),
        ("Entropy", "entropy"),
        ("Response length", "response_length"),
    ),
    "sft": (
        ("Train loss", "loss"),
        ("Val loss", "val_loss"),
        ("Learning rate", "lr"),
        ("Grad norm", "grad_norm"),
    ),
}


def metric_names(metrics: list[MetricInfo]) -> list[str]:
    """The names of the run detail's `metrics`, sorted."""
    return sorted(m.metric for m in metrics)


def metrics_by_role(metrics: list[MetricInfo]) -> dict[str, list[str]]:
    """Role -> the run's metrics in that role (each sorted), as the API names each metric's role."""
    roles: dict[str, list[str]] = {}
    for m in sorted(metrics, key=lambda m: m.metric):
        if m.role:
            roles.setdefault(m.role, []).append(m.metric)
    return roles


def role_panels(
    roles: dict[str, list[str]], decorations: dict[str, Decoration] | None = None, kind: str | None = None
) -> list[Panel]:
    """The role panels this run has data for, each with its metrics filled in, in the page's order (the
    panels of its `kind` first, see FIRST_PANELS), and with the normal band and warning line the API sent
    for its role (`decorations`: role -> {normal_band: [low, high], warning_line})."""
    panels = []
    for panel in ROLE_PANELS:
        metrics = tuple(m for role in panel.roles for m in roles.get(role, []))
        if not metrics:
            continue
        panel = replace(panel, metrics=metrics)
        for role in panel.roles:
            sent = (decorations or {}).get(role)
            if sent is None:
                continue
            if sent.normal_band is not None and len(sent.normal_band) == 2:
                panel = replace(panel, normal_band=(sent.normal_band[0], sent.normal_band[1]))
            if sent.warning_line is not None:
                panel = replace(panel, warning_line=sent.warning_line)
        panels.append(panel)
    first = FIRST_PANELS.get(kind or "sft", ())
    return sorted(panels, key=lambda p: first.index(p.title) if p.title in first else len(first))
