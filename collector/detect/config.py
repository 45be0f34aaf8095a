"""Detection thresholds, with their seed defaults, and the TOML files that change them.

Stable interface:

- `DetectConfig`: one dataclass per rule under `rules` (e.g. `config.rules.grad_spike.z`), plus `custom`
  (user threshold rules) and `advice` (the metric and direction that pick the checkpoint to keep; None:
  the run's own choice, see `collector.advice.recommend.advice_for_run`).
- `load_config(db_toml, run_toml) -> DetectConfig`: the defaults, then the database's `DB.runwatch.toml`, then
  the run's `RUN_DIR/runwatch.toml` (later files win key by key; custom rules add up). A missing file is
  fine (None or a path that does not exist); a malformed one raises `ConfigError` naming the file and what
  is wrong, so the caller can log it and keep the previous config.

File format (see `example-runwatch.toml` beside this module):

    [rules.grad_spike]
    window = 50
    z = 8.0

    [rules.loss_plateau]
    enabled = false

    [advice]
    metric = "exec_success_rate"  # the evaluation that picks the checkpoint to keep
    direction = "max"             # "max" (higher is better) or "min"; default: from the metric's name

    [[custom]]
    id = "accuracy_zero"          # the alert's rule id becomes "custom:accuracy_zero"
    metric = "val/accuracy*"      # exact name or a glob pattern
    op = "=="                      # > >= < <= == != falling rising
    value = 0.0
    for_points = 20
    severity = "error"
    message = "..."                # optional: what a person should do
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path, PurePath

from collector.core.severity import SEVERITIES
from collector.detect.config_advice import AdviceConfigError, AdviceSettings, parse_advice
from collector.detect.config_rl import (
    EntropyCollapseRule,
    KlRiseRule,
    KlSpikeRule,
    ResponseTruncationRule,
    RewardCollapseRule,
    ValScoreDeclineRule,
)
from collector.detect.stop import StopConfigError, StopSettings, parse_stop

CUSTOM_OPS = (">", ">=", "<", "<=", "==", "!=", "falling", "rising")


class ConfigError(ValueError):
    """A runwatch.toml that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class NonfiniteRule:
    enabled: bool = True
    clear_after: int = 5  # finite points before the episode closes (fp16 overflow NaNs come in bursts)
    # a non-finite gradient norm alone is a step the dynamic loss scaler skipped (a notice); this many in one
    # episode mean the scale collapsed (a warning), this many an error
    grad_warn_after: int = 5
    grad_error_after: int = 20


@dataclass(frozen=True)
class GradSpikeRule:
    enabled: bool = True
    window: int = 50  # points in the robust baseline (median/MAD)
    min_history: int = 2  # points needed before judging: early spikes matter most
    # ...except for a model trained from a fresh initialisation (its first loss at ln(vocab size)), whose
    # first gradient norms are large and jumpy by nature: it is judged after its warmup steps when the run
    # says how many, else after this many points (an explosion above `abs_max` is never held back)
    fresh_min_points: int = 20
    z: float = 8.0  # robust z-score (MAD scaled to sigma) above the median
    ratio: float = 3.5  # and at least this many times the median
    abs_max: float = (
        100.0  # above this for `abs_for` points is a spike whatever the baseline (the chart's warning line)
    )
    normal_min: float = (
        0.1  # healthy fine-tuning grad norms lie between these (the chart's normal band, health)
    )
    normal_max: float = 10.0
    abs_for: int = 3
    sustained_points: int = 5  # spike points in a row that make it an error
    # the noise model: a point is a spike only when it also exceeds this many times the window's
    # `tail_quantile` (a per-step log of small batches reaches 2-5x its median routinely)
    tail_ratio: float = 1.5
    tail_quantile: float = 0.95
    tail_points: int = 200  # ...of this many recent points, spikes included (a series that often jumps)
    settle_points: int = 10  # the first logged points only fill the baseline (start-up is jumpy)...
    settle_warmup_factor: float = 2.0  # ...and so do the steps up to this many times the lr warmup
    # one spike point is a notice (info); this many times the median (and above `normal_max`), a warning...
    warn_ratio: float = 10.0
    warn_after_points: int = 2  # ...and so are this many spike points in a row, unless the run's recent
    routine_points: int = 3  # points (spikes included) hold this many of at least `routine_fraction` of it:
    routine_fraction: float = 0.5  # a size the run often reaches is its noise (a notice, until it lasts)
    loss_jump_window: int = 10  # a loss spike within this many points after makes it an error
    vanish_ratio: float = 1000.0  # below median / this for `vanish_for` points: vanishing gradients
    vanish_for: int = 5
    clear_after: int = 5


@dataclass(frozen=True)
class LossSpikeRule:
    enabled: bool = True
    window: int = 50
    min_history: int = 5
    level_points: int = 10  # the baseline level: median of the last 10 points (the loss trends)
    z: float = 6.0  # noise sigmas above that level (noise from point-to-point differences over `window`)
    rel_jump: float = 0.5  # and at least 50 % above the level...
    abs_jump: float = 0.1  # ...and 0.1 nats above it
    diverge_window: int = 10  # rolling median length for the divergence check
    diverge_rel: float = 0.3  # rolling median this much above its best so far = diverging
    diverge_for: int = 10  # for this many points
    diverge_error_points: int = (
        4  # a divergence found at this many trend checks (every half block) is an error
    )
    tail_ratio: float = 1.5  # and a jump above this many times the `tail_quantile` of the window's own jumps
    tail_quantile: float = 0.95
    settle_points: int = 10  # the first logged points only fill the baseline
    warn_after_points: int = 2  # one high point is a notice (info); this many in one episode a warning
    # (0: never by count) a spike episode this long is an error; by default the damage is told on the gradient
    # spike before it (grad_spike turns error), and a loss that keeps rising is the divergence check's
    error_after_points: int = 0
    clear_after: int = 5


@dataclass(frozen=True)
class ValLossRiseRule:
    enabled: bool = True
    patience: int = 3  # evaluations in a row above the best
    big_rise: float = 0.5  # ...or this much above it (relative)...
    big_patience: int = 2  # ...for this many evaluations (a loss that nearly doubles after the first one)
    noise_sigmas: float = 2.0  # and above the best by this many sigmas of the evaluations' own wobble
    noise_evals: int = 10  # (from the differences between the last this-many evaluations)
    min_delta: float = 0.01  # relative: an evaluation within 1 % of the best is not "above" it
    train_window: int = 5  # train-loss points averaged at each evaluation to tell whether it still falls
    # an error once it lasts (2x patience evaluations), is large (relative) and far beyond the evals' wobble
    error_patience: int = 6
    error_rise: float = 0.2
    error_noise_sigmas: float = 4.0


@dataclass(frozen=True)
class LossPlateauRule:
    enabled: bool = True
    # seed default: 50 logged steps; counted in logged points, so a run logging every 10 steps waits 500
    # steps; the window grows to a tenth of the run so far (up to max_window) so slow steady progress counts
    patience_points: int = 50
    max_window: int = 1000
    # progress = the last window's median below the best earlier window's by more than this (relative)
    min_rel_improvement: float = 0.0
    noise_sigmas: float = (
        2.0  # worse than the window before by this many noise sigmas is a rise, not a plateau
    )
    hold_checks: int = 5  # checks (every tenth of a window) that must fail in a row before alerting
    end_lr_fraction: float = 0.1  # no plateau alert once lr has decayed below 10 % of its peak
    clear_after: int = 10  # checks showing progress before the episode closes


@dataclass(frozen=True)
class NoLearningRule:
    enabled: bool = True
    zero_grad: float = 1e-8  # grad_norm at or below this is zero
    for_points: int = 10
    flat_rel: float = 1e-6  # loss moving less than this (relative) over `for_points` points is stuck
    ln_vocab_rel: float = 0.02  # loss within 2 % of ln(vocab size) = uniform prediction
    ln_vocab_after: int = 20  # ...still after this many points
    # a loss that has fallen by this fraction from its highest has learned: flat later is a plateau or
    # convergence (a console printing 2 decimals shows a slow fall as flat), not "nothing learned"
    learned_drop: float = 0.1
    clear_after: int = 3


@dataclass(frozen=True)
class StalledRule:
    enabled: bool = True
    factor: float = 10.0  # silence longer than this many usual step intervals
    min_seconds: float = 60.0  # never sooner than this
    save_factor: float = 20.0  # after a save or validation step the limit is this many times longer
    default_seconds: float = 1800.0  # when the step interval is unknown
    error_factor: float = 3.0  # silence this many times the threshold is an error
    ended_after_seconds: float = 86400.0  # silent this long when first seen: the run most likely ended (warn)


@dataclass(frozen=True)
class RunFailedRule:
    enabled: bool = True  # a run whose files say it failed (a log ending in an error, status.json failed)


@dataclass(frozen=True)
class StepTimeSpikeRule:
    enabled: bool = True
    window: int = 50
    min_history: int = 5
    ratio: float = 3.0
    z: float = 6.0
    abs_max_seconds: float = 30.0  # over 30 s is a spike when the usual step is much shorter
    abs_ratio: float = 1.5
    warn_ratio: float = 10.0  # a single slow step is a notice (info); this many times the median, a warning
    warn_after_points: int = 3  # slow steps in one episode that make a notice a warning...
    error_after_points: int = 20  # ...and an error
    clear_after: int = 3


@dataclass(frozen=True)
class LrAnomalyRule:
    enabled: bool = True
    end_fraction: float = 0.02  # lr reaching zero in the last 2 % of the run is a schedule ending
    zero_for: int = 3  # points of lr <= 0 before alerting when the run length is unknown
    cosine_tolerance: float = (
        0.25  # off the configured curve (cosine, linear, constant) by over 25 % of the base lr
    )
    cosine_for: int = 3
    rise_tolerance: float = 0.02  # lr rising more than 2 % above its peak after warmup
    clear_after: int = 3


@dataclass(frozen=True)
class Rules:
    nonfinite: NonfiniteRule = field(default_factory=NonfiniteRule)
    grad_spike: GradSpikeRule = field(default_factory=GradSpikeRule)
    loss_spike: LossSpikeRule = field(default_factory=LossSpikeRule)
    val_loss_rise: ValLossRiseRule = field(default_factory=ValLossRiseRule)
    val_score_decline: ValScoreDeclineRule = field(default_factory=ValScoreDeclineRule)
    loss_plateau: LossPlateauRule = field(default_factory=LossPlateauRule)
    no_learning: NoLearningRule = field(default_factory=NoLearningRule)
    stalled: StalledRule = field(default_factory=StalledRule)
    run_failed: RunFailedRule = field(default_factory=RunFailedRule)
    kl_spike: KlSpikeRule = field(default_factory=KlSpikeRule)
    reward_collapse: RewardCollapseRule = field(default_factory=RewardCollapseRule)
    step_time_spike: StepTimeSpikeRule = field(default_factory=StepTimeSpikeRule)
    entropy_collapse: EntropyCollapseRule = field(default_factory=EntropyCollapseRule)
    response_truncation: ResponseTruncationRule = field(default_factory=ResponseTruncationRule)
    kl_rise: KlRiseRule = field(default_factory=KlRiseRule)
    lr_anomaly: LrAnomalyRule = field(default_factory=LrAnomalyRule)


@dataclass(frozen=True)
class CustomRule:
    """A user's threshold rule: `metric op value` for `for_points` points in a row."""

    id: str
    metric: str  # exact name or glob pattern
    op: str
    value: float = 0.0
    for_points: int = 1
    severity: str = "warn"
    message: str = ""


@dataclass(frozen=True)
class DetectConfig:
    rules: Rules = field(default_factory=Rules)
    custom: tuple[CustomRule, ...] = ()
    advice: AdviceSettings = field(default_factory=AdviceSettings)
    stop: StopSettings = field(default_factory=StopSettings)  # which alerts stop a run (detect/stop.py)


def load_config(db_toml: Path | None = None, run_toml: Path | None = None) -> DetectConfig:
    """The seed defaults overridden by the database's file, then by the run's file (missing files are skipped).

    Raises `ConfigError` (file, key, what is wrong) for unreadable TOML, unknown rules or keys, or values of
    the wrong type; never returns a half-applied config.
    """
    config = DetectConfig()
    for path in (db_toml, run_toml):
        path = path if isinstance(path, PurePath) or path is None else Path(path)  # (a remote path stays one)
        if path is None or not path.is_file():
            continue
        try:
            doc = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"{path}: not valid TOML ({exc}); detection keeps its previous thresholds"
            ) from exc
        config = apply_document(config, doc, source=str(path))
    return config


def apply_document(config: DetectConfig, doc: dict, source: str = "<config>") -> DetectConfig:
    """`config` with one parsed TOML document applied on top (see the module docstring for the format)."""
    unknown = set(doc) - {"rules", "custom", "advice", "stop"}
    if unknown:
        raise ConfigError(
            f"{source}: unknown top-level key(s) {sorted(unknown)}; expected [rules.NAME], [advice], [stop] "
            f"or [[custom]]"
        )
    rules = config.rules
    for rule_name, values in (doc.get("rules") or {}).items():
        if not hasattr(rules, rule_name):
            known = ", ".join(f.name for f in fields(Rules))
            raise ConfigError(f"{source}: unknown rule [rules.{rule_name}]; known rules: {known}")
        if not isinstance(values, dict):
            raise ConfigError(f"{source}: [rules.{rule_name}] must be a table of key = value")
        current = getattr(rules, rule_name)
        rules = replace(rules, **{rule_name: _override(current, values, f"{source}: [rules.{rule_name}]")})
    custom = list(config.custom)
    for index, item in enumerate(doc.get("custom") or [], start=1):
        custom.append(_custom_rule(item, f"{source}: [[custom]] #{index}"))
    try:
        advice = parse_advice(config.advice, doc.get("advice"), f"{source}: [advice]")
        stop = parse_stop(config.stop, doc.get("stop"), f"{source}: [stop]")
    except (AdviceConfigError, StopConfigError) as e:
        raise ConfigError(str(e)) from None
    return DetectConfig(rules=rules, custom=tuple(custom), advice=advice, stop=stop)


def _override(current: object, values: dict, where: str) -> object:
    known = {f.name: f for f in fields(current)}  # type: ignore[arg-type]
    changes = {}
    for key, value in values.items():
        if key not in known:
            raise ConfigError(f"{where}: unknown key {key!r}; known keys: {', '.join(known)}")
        default = getattr(current, key)
        changes[key] = _coerce(value, default, f"{where} {key}")
    return replace(current, **changes)  # type: ignore[type-var]


def _coerce(value: object, default: object, where: str) -> object:
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"{where}: expected a whole number >= 0, got {value!r}")
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    return value


def _custom_rule(item: object, where: str) -> CustomRule:
    if not isinstance(item, dict):
        raise ConfigError(f"{where}: must be a table")
    allowed = {f.name for f in fields(CustomRule)}
    unknown = set(item) - allowed
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
    for key in ("metric", "op"):
        if not isinstance(item.get(key), str) or not item[key]:
            raise ConfigError(f"{where}: {key!r} is required (a non-empty string)")
    op = item["op"]
    if op not in CUSTOM_OPS:
        raise ConfigError(f"{where}: op {op!r} is not one of {' '.join(CUSTOM_OPS)}")
    if op not in ("falling", "rising") and "value" not in item:
        raise ConfigError(f"{where}: op {op!r} needs a 'value'")
    value = item.get("value", 0.0)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}: 'value' must be a number, got {value!r}")
    for_points = item.get("for_points", 1)
    if isinstance(for_points, bool) or not isinstance(for_points, int) or for_points < 1:
        raise ConfigError(f"{where}: 'for_points' must be a whole number >= 1, got {for_points!r}")
    severity = item.get("severity", "warn")
    if severity not in SEVERITIES:
        raise ConfigError(f"{where}: severity {severity!r} is not one of {', '.join(SEVERITIES)}")
    rule_id = item.get("id") or f"{item['metric']} {op} {value:g}"
    return CustomRule(
        id=str(rule_id),
        metric=item["metric"],
        op=op,
        value=float(value),
        for_points=for_points,
        severity=severity,
        message=str(item.get("message", "")),
    )
