"""runwatch.toml: the whole file's settings, with their seed defaults, and the TOML files that change them.

Stable interface:

- `DetectConfig`: what detection reads (a `collector.detect.rule_settings.RuleSettings`: under `rules`, each
  registered rule's settings, the dataclass its class declares as `settings`, e.g.
  `config.rules.grad_spike.z`; plus `custom`, user threshold rules), and `advice` (the metric and direction
  that pick the checkpoint to keep; None: the run's own choice, see
  `collector.advice.recommend.advice_for_run`) and `stop` (which alerts stop a run, `collector.settings.stop`).
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
from collector.detect.custom import CustomRule
from collector.detect.rule_settings import Rules, RuleSettings
from collector.settings.advice import AdviceConfigError, AdviceSettings, parse_advice
from collector.settings.stop import StopConfigError, StopSettings, parse_stop

CUSTOM_OPS = (">", ">=", "<", "<=", "==", "!=", "falling", "rising")


class ConfigError(ValueError):
    """A runwatch.toml that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class DetectConfig(RuleSettings):
    """All of runwatch.toml: the rules' part detection reads (`rules`, `custom`), and what the advice and the
    stop file read."""

    advice: AdviceSettings = field(default_factory=AdviceSettings)
    stop: StopSettings = field(default_factory=StopSettings)  # which alerts stop a run (settings/stop.py)


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
