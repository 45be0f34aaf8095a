"""What detection reads of runwatch.toml: each registered rule's settings and the user's custom rules.

Stable interface:

- `Rules`: one field per rule id (`[rules.NAME]`), the settings dataclass its class declares with its
  defaults (`settings.rules.grad_spike.z`); built from `collector.detect.registry`, so a registered rule
  adds its section here.
- `RuleSettings(rules, custom)`: what `RunDetector` and the rules judge with; `RuleSettings()` is the seed
  defaults and no custom rules. The whole file (`[advice]`, `[stop]` too) and its loader are
  `collector.settings.config.DetectConfig`, a `RuleSettings` with more fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass

from collector.detect import registry
from collector.detect.custom import CustomRule

# `[rules.NAME]`: one field per rule id, its settings with their defaults, as the rule classes declare them
# (`config.rules.grad_spike.z`); a rule registered in `collector.detect.registry` adds its section here
Rules = make_dataclass(
    "Rules",
    [
        (rule_id, cls.settings, field(default_factory=cls.settings))
        for rule_id, cls in registry.by_id().items()
    ],
    frozen=True,
)
Rules.__module__ = __name__  # (Python 3.11 names it `types.Rules`: its repr and pickle find it here)


@dataclass(frozen=True)
class RuleSettings:
    """The rules' thresholds and the user's custom rules (defaults: the seed's, none)."""

    rules: Rules = field(default_factory=Rules)
    custom: tuple[CustomRule, ...] = ()
