"""Which rules judge a metric, from the registry (`collector.detect.registry`).

Stable interface:

- `RULES_BY_ROLE`: role -> the rule classes that judge its metrics, each with its `[rules.NAME]` section of
  `RuleSettings.rules` (its `rule_id`); derived from the registry.
- `rules_for(metric, role, config) -> list[Rule]`: fresh rule objects for one metric (enabled rules of its
  role, then the user's custom rules that match its name).
- `UNSAFE_CHECKPOINT_RULES`: the rule ids whose episodes make a checkpoint saved inside them one not to keep
  (advice and the report read this instead of naming rules).
- `NOT_ABOUT_WEIGHTS_RULES`: the rule ids whose error episodes say nothing about the weights saved during them
  (a run that failed or went silent, a slow step); an error of any other rule makes the checkpoint advice
  prefer a checkpoint outside it (`collector.advice.errors`).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from collector.detect import registry
from collector.detect.base import Rule
from collector.detect.custom import CustomThreshold, custom_matches
from collector.detect.rule_settings import RuleSettings

RULES_BY_ROLE: Mapping[str, tuple[tuple[type[Rule], str], ...]] = MappingProxyType(
    {
        role: tuple((cls, cls.rule_id) for cls in registry.for_role(role))
        for role in dict.fromkeys(role for cls in registry.RULES for role in cls.roles)
    }
)

UNSAFE_CHECKPOINT_RULES: frozenset[str] = registry.ids_with(unsafe_checkpoint=True)

NOT_ABOUT_WEIGHTS_RULES: frozenset[str] = registry.ids_with(about_weights=False)


def rules_for(metric: str, role: str | None, config: RuleSettings) -> list[Rule]:
    """Fresh rule objects for `metric`: its role's enabled rules, then the custom rules matching its name."""
    found: list[Rule] = []
    for cls in registry.for_role(role):
        cfg = getattr(config.rules, cls.rule_id)
        if cfg.enabled:
            found.append(cls(metric, cfg))
    found.extend(CustomThreshold(metric, c) for c in config.custom if custom_matches(c, metric))
    return found
