"""Which metrics a run page draws in which panel, from the metric roles the collector names.

Roles (loss, val_loss, grad_norm, lr, ...) come from the API's run detail when it sends them, else from
`collector.core.roles.role_of`, the collector's own naming function; nothing here judges the values. A
panel's normal band and warning line come from the run detail's `decorations` (the run's own thresholds).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace


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


def metric_names(detail_metrics: object) -> list[str]:
    """Metric names from the run detail's `metrics` field: a list of names, of {name|metric, ...}, or a dict."""
    if isinstance(detail_metrics, dict):
        return sorted(detail_metrics)
    names = []
    for item in detail_metrics or []:
        if isinstance(item, str):
            names.append(item)
        elif isinstance(item, dict):
            name = item.get("name") or item.get("metric")
            if name:
                names.append(name)
    return sorted(names)


def api_roles(detail_metrics: object) -> dict[str, list[str]] | None:
    """Role -> metrics from the run detail's `metrics` entries that carry a `role`, or None when none do."""
    if not isinstance(detail_metrics, list) or not any(
        isinstance(m, dict) and "role" in m for m in detail_metrics
    ):
        return None
    roles: dict[str, list[str]] = {}
    for item in detail_metrics:
        name = item.get("name") or item.get("metric")
        if item.get("role") and name:
            roles.setdefault(item["role"], []).append(name)
    for names in roles.values():
        names.sort()
    return roles


def metrics_by_role(
    names: list[str], api_roles: dict | None, role_of: Callable[[str], str | None] | None
) -> dict[str, list[str]]:
    """Role -> the run's metrics in that role, from the API's roles when given, else `role_of` per name."""
    roles: dict[str, list[str]] = {}
    if api_roles:
        for role, metrics in api_roles.items():
            listed = [metrics] if isinstance(metrics, str) else list(metrics or [])
            roles[role] = [m for m in listed if m in names] or listed
        return roles
    if role_of is None:
        return roles
    for name in names:
        role = role_of(name)
        if role:
            roles.setdefault(role, []).append(name)
    return roles


def role_panels(
    roles: dict[str, list[str]], decorations: dict | None = None, kind: str | None = None
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
            sent = (decorations or {}).get(role) or {}
            band = sent.get("normal_band")
            if isinstance(band, list | tuple) and len(band) == 2:
                panel = replace(panel, normal_band=(float(band[0]), float(band[1])))
            if isinstance(sent.get("warning_line"), int | float):
                panel = replace(panel, warning_line=float(sent["warning_line"]))
        panels.append(panel)
    first = FIRST_PANELS.get(kind or "sft", ())
    return sorted(panels, key=lambda p: first.index(p.title) if p.title in first else len(first))
