"""Which metrics a run page draws in which panel, from the panels and metric roles the collector sends.

The panels (title, roles, how each draws) come from the API's run detail (`panels`, typed as
`collector.api.models.PanelInfo`, declared once in `collector/core/panels.py`), the roles of the metrics from
its `metrics` (`MetricInfo.role`); nothing here names or judges them. A panel's normal band and warning line
come from the run detail's `decorations` (the run's own thresholds).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from collector.api.models import Decoration, MetricInfo, PanelInfo


@dataclass(frozen=True)
class Panel:
    """A chart of the run page as drawn: what the API sent for it, its metrics and its decorations."""

    title: str
    roles: tuple[str, ...]
    y_title: str = ""
    normal_band: tuple[float, float] | None = None
    warning_line: float | None = None
    checkpoints: bool = False
    always_log: bool = False  # grad norms span decades: the normal band only reads on a log axis
    smooth: bool = True  # a schedule (learning rate) is drawn as logged: smoothing would bend its shape
    metrics: tuple[str, ...] = field(default=())


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
    roles: dict[str, list[str]],
    sent: list[PanelInfo],
    decorations: dict[str, Decoration] | None = None,
    kind: str | None = None,
) -> list[Panel]:
    """The panels the API `sent` that this run has data for (`roles`: role -> its metrics to draw), each with
    its metrics filled in, in the page's order (the panels of its `kind` first, see FIRST_PANELS), and with the
    normal band and warning line the API sent for its role (`decorations`: role -> {normal_band: [low, high],
    warning_line})."""
    panels = []
    for info in sent:
        metrics = tuple(m for role in info.roles for m in roles.get(role, []))
        if not metrics:
            continue
        panel = Panel(
            info.title,
            tuple(info.roles),
            y_title=info.y_title,
            checkpoints=info.checkpoints,
            always_log=info.always_log,
            smooth=info.smooth,
            metrics=metrics,
        )
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
