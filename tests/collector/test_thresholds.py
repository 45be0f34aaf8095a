"""Thresholds are resolved in one place per run: detection and advice read the same numbers, an edited
runwatch.toml reaches both, and the chart decorations come from them."""

from __future__ import annotations

import json
import logging
import os
import pickle
from pathlib import Path

from app.panels import role_panels
from collector.advice.health import health_checklist
from collector.api import runs as api_runs
from collector.api.models import Decoration, PanelInfo
from collector.core.runtime import Settings
from collector.core.severity import SEVERITIES, Severity
from collector.daemon.service import Collector
from collector.detect import registry
from collector.detect.base import Action
from collector.detect.engine import detect_series
from collector.detect.rules import RULES_BY_ROLE, UNSAFE_CHECKPOINT_RULES
from collector.settings.config import DetectConfig, load_config
from collector.settings.thresholds import Thresholds
from collector.store import alerts as store_alerts


def _write_points(path: Path, steps: range, grad: float) -> None:
    with path.open("a") as f:
        for step in steps:
            wobble = 0.1 * ((step * 7) % 5 - 2)
            f.write(
                json.dumps({"step": step, "data": {"train/loss": 2.0, "train/grad_norm": grad + wobble}})
                + "\n"
            )


def _touch_later(path: Path, text: str) -> None:
    """Write `path` and move its mtime a second on, so a check by time sees the change on any filesystem."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(text)
    later = max(path.stat().st_mtime_ns, before + 1_000_000_000)
    os.utime(path, ns=(later, later))


def test_an_edited_run_toml_reaches_detection_and_advice_together(tmp_path):
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    metrics = run / "metrics.jsonl"
    _write_points(metrics, range(1, 41), grad=4.0)
    collector = Collector(Settings(db=tmp_path / "rw.duckdb", roots=[tmp_path / "runs"]), sinks=[])
    try:
        collector.ingest_once()
        detector = collector.detection.detector("r1")
        assert detector.config.rules.grad_spike.abs_max == 100.0
        assert api_runs.run(collector.detection.runs, "r1")["decorations"]["grad_norm"] == {
            "normal_band": [0.1, 10.0],
            "warning_line": 100.0,
        }
        _touch_later(run / "runwatch.toml", "[rules.grad_spike]\nabs_max = 5.0\nnormal_max = 8.0\n")
        # 6.0 is 1.5x the usual 4.0 (no relative spike), but above the new ceiling for 3 points in a row
        _write_points(metrics, range(41, 46), grad=6.0)
        collector.ingest_once()
        assert detector.config.rules.grad_spike.abs_max == 5.0
        assert detector.config is collector.detection.runs.thresholds_of(str(run))
        found = store_alerts.list_alerts(collector.store, run="r1", rule="grad_spike")
        assert [(a["severity"], a["first_step"]) for a in found] == [("error", 43)]
        assert api_runs.run(collector.detection.runs, "r1")["decorations"]["grad_norm"] == {
            "normal_band": [0.1, 8.0],
            "warning_line": 5.0,
        }
        titles = {i["id"]: i["title"] for i in collector.detection.runs.health("r1")}
        assert titles["start_grad_norm_range"] == "grad_norm mostly within 0.1-8 in the first 100 steps"
    finally:
        collector.close()


def test_a_malformed_edit_keeps_the_previous_thresholds_and_is_logged(tmp_path, caplog):
    run = tmp_path / "run"
    run.mkdir()
    toml = run / "runwatch.toml"
    resolver = Thresholds(tmp_path / "rw.duckdb")
    assert resolver.for_run(run) == DetectConfig()
    _touch_later(toml, "[rules.kl_spike]\nmax_value = 0.5\n")
    first = resolver.for_run(run)
    assert first.rules.kl_spike.max_value == 0.5
    assert resolver.for_run(run) is first  # unchanged files: not read again
    with caplog.at_level(logging.WARNING, logger="collector.detect"):
        _touch_later(toml, "[rules.kl_spike\nmax_value = ")
        assert resolver.for_run(run) is first
    assert "not valid TOML" in caplog.text and "keeps its previous thresholds" in caplog.text
    _touch_later(toml, "[rules.kl_spike]\nmax_value = 0.25\n")
    assert resolver.for_run(run).rules.kl_spike.max_value == 0.25
    # the database's file applies under the run's
    _touch_later(tmp_path / "rw.duckdb.runwatch.toml", "[rules.kl_spike]\nmin_history = 9\n")
    both = resolver.for_run(run)
    assert (both.rules.kl_spike.min_history, both.rules.kl_spike.max_value) == (9, 0.25)


def test_rule_literals_are_settings_with_the_same_defaults(tmp_path):
    kl = ([*range(1, 31)], [0.01] * 25 + [2.0] * 5)
    default = detect_series({"actor/ppo_kl": kl})
    assert [(e.rule, e.severity) for e in default] == [("kl_spike", "error")]  # 5 points above: an error
    toml = tmp_path / "runwatch.toml"
    toml.write_text("[rules.kl_spike]\nerror_after_points = 6\n")
    later = detect_series({"actor/ppo_kl": kl}, config=load_config(None, toml))
    assert [(e.rule, e.severity) for e in later] == [("kl_spike", "warn")]
    step_time = DetectConfig().rules.step_time_spike
    assert (step_time.warn_after_points, step_time.error_after_points) == (3, 20)


def test_every_rule_in_the_table_states_its_contract():
    for role, entries in RULES_BY_ROLE.items():
        for cls, section in entries:
            rule = cls("m", getattr(DetectConfig().rules, section))
            assert isinstance(rule.rule_id, str) and isinstance(rule.clear_after, int), (role, cls)
            assert isinstance(cls.unsafe_checkpoint, bool), (role, cls)
    assert {"nonfinite", "grad_spike", "loss_above_uniform"} == UNSAFE_CHECKPOINT_RULES


def test_every_registered_rule_declares_what_it_is():
    """Each class in the registry states its settings (with defaults), severities, action and meaning; the
    per-role table and the advice's sets are read from those declarations."""
    defaults = DetectConfig().rules
    for cls in registry.RULES:
        settings = getattr(defaults, cls.rule_id)
        assert isinstance(settings, cls.settings) and settings.enabled, cls
        assert cls.severities and list(cls.severities) == sorted(cls.severities, key=SEVERITIES.index), cls
        assert isinstance(cls.action, Action) and isinstance(cls.about_weights, bool), cls
        assert cls.meaning or not cls.about_weights, (
            f"{cls.rule_id}: an error that judges the weights says how"
        )
        assert all(cls in registry.for_role(role) for role in cls.roles), cls
    assert registry.ids_with(about_weights=False) == {"stalled", "run_failed", "step_time_spike"}
    assert registry.ids_with(action=Action.SKIP_BATCHES) == {"loss_spike", "grad_spike"}
    assert registry.meaning("kl_spike") == "the policy had jumped away from its reference there"
    assert registry.meaning("custom:mine") is None
    assert pickle.loads(pickle.dumps(DetectConfig())) == DetectConfig()  # Rules is found where it is made
    grad = defaults.grad_spike
    assert registry.decorations(DetectConfig()) == {
        "grad_norm": {"normal_band": [grad.normal_min, grad.normal_max], "warning_line": grad.abs_max}
    }
    assert json.dumps({"severity": Severity.ERROR}) == '{"severity": "error"}'


def test_health_and_panels_take_their_band_from_the_config():
    config = load_config()
    config = type(config)(
        rules=type(config.rules)(
            **{
                **config.rules.__dict__,
                "grad_spike": type(config.rules.grad_spike)(normal_min=1.0, normal_max=2.0),
            }
        )
    )
    series = {"grad_norm": ([1, 2, 3], [1.5, 1.5, 3.0])}
    item = next(
        i
        for i in health_checklist(series, [], None, None, config=config)
        if i["id"] == "start_grad_norm_range"
    )
    assert item["title"] == "grad_norm mostly within 1-2 in the first 100 steps"
    assert item["evidence"].startswith("2 of 3 points in range")
    sent = [PanelInfo.model_validate(p) for p in api_runs.panels_of({"grad_norm"})]
    decorated = role_panels(
        {"grad_norm": ["train/grad_norm"]},
        sent,
        {"grad_norm": Decoration.model_validate({"normal_band": [1.0, 2.0], "warning_line": 7.0})},
    )
    assert (decorated[0].normal_band, decorated[0].warning_line) == ((1.0, 2.0), 7.0)
    bare = role_panels({"grad_norm": ["train/grad_norm"]}, sent)
    assert (bare[0].normal_band, bare[0].warning_line) == (None, None)
