"""The rule table: which rules judge a metric of each role, listed once.

Stable interface:

- `RULES_BY_ROLE`: role -> the rule classes that judge its metrics, each with the `[rules.NAME]` section of
  `DetectConfig` that sets its thresholds. A new rule is one class (see `collector.detect.base.Rule`) and one
  entry here.
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

from collector.detect.base import Rule
from collector.detect.config import DetectConfig
from collector.detect.custom import CustomThreshold, custom_matches
from collector.detect.rl import (
    EntropyCollapse,
    KlRise,
    KlSpike,
    ResponseTruncation,
    RewardCollapse,
    RewardStdCollapse,
)
from collector.detect.runlevel import RUN_FAILED, STALLED, UNSAFE_RUN_LEVEL_RULES
from collector.detect.schedule import LrAnomaly
from collector.detect.spikes import GradSpike, LossSpike, StepTimeSpike
from collector.detect.trends import LossPlateau, NoLearningGrad, NoLearningLoss, ValLossRise
from collector.detect.val_scores import ValScoreDecline

RULES_BY_ROLE: Mapping[str, tuple[tuple[type[Rule], str], ...]] = MappingProxyType(
    {
        "grad_norm": ((GradSpike, "grad_spike"), (NoLearningGrad, "no_learning")),
        "loss": ((LossSpike, "loss_spike"), (NoLearningLoss, "no_learning"), (LossPlateau, "loss_plateau")),
        "val_loss": ((ValLossRise, "val_loss_rise"),),
        "lr": ((LrAnomaly, "lr_anomaly"),),
        "step_time": ((StepTimeSpike, "step_time_spike"),),
        "kl": ((KlSpike, "kl_spike"), (KlRise, "kl_rise")),
        "entropy": ((EntropyCollapse, "entropy_collapse"),),
        "clip_ratio": ((ResponseTruncation, "response_truncation"),),
        "reward": ((RewardCollapse, "reward_collapse"),),
        "reward_std": ((RewardStdCollapse, "reward_collapse"),),
        # validation scores: verl's val-core/... (val_score), eval_accuracy, eval_reward... (the rule keeps
        # only the held-out scores among them, see val_scores.is_validation_score)
        "val_score": ((ValScoreDecline, "val_score_decline"),),
        "accuracy": ((ValScoreDecline, "val_score_decline"),),
        "eval_metric": ((ValScoreDecline, "val_score_decline"),),
    }
)

UNSAFE_CHECKPOINT_RULES: frozenset[str] = UNSAFE_RUN_LEVEL_RULES | frozenset(
    cls.rule_id for entries in RULES_BY_ROLE.values() for cls, _ in entries if cls.unsafe_checkpoint
)

# a run that failed or went silent, a slow step: errors that judge the run, not the weights saved meanwhile
NOT_ABOUT_WEIGHTS_RULES: frozenset[str] = frozenset({RUN_FAILED, STALLED, StepTimeSpike.rule_id})


def rules_for(metric: str, role: str | None, config: DetectConfig) -> list[Rule]:
    """Fresh rule objects for `metric`: its role's enabled rules, then the custom rules matching its name."""
    found: list[Rule] = []
    for cls, section in RULES_BY_ROLE.get(role or "", ()):
        cfg = getattr(config.rules, section)
        if cfg.enabled:
            found.append(cls(metric, cfg))
    found.extend(CustomThreshold(metric, c) for c in config.custom if custom_matches(c, metric))
    return found
