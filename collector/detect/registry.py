"""The rule registry: every rule class, listed once; code outside detection asks it about rules.

A rule declares what it is on its class (`collector.detect.base.Rule`: `rule_id`, `roles`, `settings`,
`severities`, `unsafe_checkpoint`, `about_weights`, `action`, `meaning`, `decorations`); adding a rule is its
module, its test and one line in `RULES`.

Stable interface:

- `RULES`: the rule classes in registration order (a metric's rules judge it in this order). Two classes may
  share a `rule_id` (and its settings): `no_learning` on a gradient norm and on a loss.
- `for_role(role) -> tuple[type[Rule], ...]`: the classes that read a metric of that role.
- `by_id() -> dict[str, type[Rule]]`: every rule id with its (first) class, in registration order (the
  sections of `collector.detect.rule_settings.Rules`).
- `get(rule_id) -> type[Rule] | None`: the (first) class of a rule id; None for a custom rule or an unknown id.
- `ids_with(**declared) -> frozenset[str]`: the ids of the rules whose class declares these values, e.g.
  `ids_with(action=Action.SKIP_BATCHES)`, `ids_with(unsafe_checkpoint=True)`.
- `meaning(rule_id) -> str | None`: what an error episode of the rule says about the weights saved during it.
- `decorations(config) -> dict[str, dict]`: role -> what a chart of that role draws, from a `RuleSettings`'
  resolved settings (each rule's `decorations`).
"""

from __future__ import annotations

from typing import Any

from collector.detect.above_uniform import LossAboveUniform
from collector.detect.base import Rule
from collector.detect.kl import KlRise, KlSpike
from collector.detect.loss_plateau import LossPlateau
from collector.detect.loss_spike import LossSpike
from collector.detect.lr_decay import LrNotDecaying
from collector.detect.rl import EntropyCollapse, ResponseTruncation, RewardCollapse, RewardStdCollapse
from collector.detect.runlevel import Nonfinite, RunFailed, Stalled
from collector.detect.schedule import LrAnomaly
from collector.detect.spikes import GradSpike, StepTimeSpike
from collector.detect.trends import NoLearningGrad, NoLearningLoss, ValLossRise
from collector.detect.val_scores import ValScoreDecline

RULES: tuple[type[Rule], ...] = (
    Nonfinite,
    Stalled,
    RunFailed,
    GradSpike,
    NoLearningGrad,
    LossSpike,
    NoLearningLoss,
    LossAboveUniform,
    LossPlateau,
    ValLossRise,
    LrAnomaly,
    LrNotDecaying,
    StepTimeSpike,
    KlSpike,
    KlRise,
    EntropyCollapse,
    ResponseTruncation,
    RewardCollapse,
    RewardStdCollapse,
    ValScoreDecline,
)

_BY_ROLE: dict[str, tuple[type[Rule], ...]] = {}
for _cls in RULES:
    for _role in _cls.roles:
        _BY_ROLE[_role] = (*_BY_ROLE.get(_role, ()), _cls)
_BY_ID: dict[str, type[Rule]] = {}
for _cls in RULES:
    _BY_ID.setdefault(_cls.rule_id, _cls)


def for_role(role: str | None) -> tuple[type[Rule], ...]:
    """The rule classes that read a metric of `role`, in registration order."""
    return _BY_ROLE.get(role or "", ())


def by_id() -> dict[str, type[Rule]]:
    """Every rule id with its (first) class, in registration order."""
    return dict(_BY_ID)


def get(rule_id: str) -> type[Rule] | None:
    """The (first) registered class of `rule_id`, else None."""
    return _BY_ID.get(rule_id)


def ids_with(**declared: Any) -> frozenset[str]:
    """The ids of the rules whose class declares every given value (see the module docstring)."""
    return frozenset(
        cls.rule_id for cls in RULES if all(getattr(cls, name) == value for name, value in declared.items())
    )


def meaning(rule_id: str) -> str | None:
    """What an error episode of `rule_id` says about the weights saved during it; None when the rule does not
    say (a custom rule)."""
    cls = _BY_ID.get(rule_id)
    return cls.meaning if cls is not None and cls.meaning else None


def decorations(config: Any) -> dict[str, dict]:
    """Role -> what a chart of that role draws beside the data, from `config.rules`' resolved settings."""
    found: dict[str, dict] = {}
    for cls in _BY_ID.values():
        for role, drawn in cls.decorations(getattr(config.rules, cls.rule_id)).items():
            found[role] = found.get(role, {}) | drawn
    return found
