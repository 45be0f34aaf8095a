"""Metric-name roles across trainers, and the TOML config (defaults, overrides, custom rules, clear errors)."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.core.roles import role_of, value_scale
from collector.settings.config import ConfigError, DetectConfig, load_config

EXAMPLE = Path(__file__).resolve().parents[3] / "collector" / "settings" / "example-runwatch.toml"


@pytest.mark.parametrize(
    ("metric", "role"),
    [
        ("train/loss", "loss"),
        ("loss", "loss"),
        ("actor/pg_loss", None),  # a policy loss is not a language-model loss
        ("critic/vf_loss", None),
        ("val/loss", "val_loss"),
        ("eval_loss", "val_loss"),
        ("val-core/openai/gsm8k/reward/mean@1", "val_score"),
        ("train/grad_norm", "grad_norm"),
        ("actor/grad_norm", "grad_norm"),
        ("critic/grad_norm", "grad_norm"),
        ("grad_norm", "grad_norm"),
        ("train/lr", "lr"),
        ("learning_rate", "lr"),
        ("actor/lr", "lr"),
        ("train/lr(1e-3)", "lr"),
        ("train/time(s)", "step_time"),
        ("timing_s/step", "step_time"),
        ("perf/time_per_step", "step_time"),
        ("train_runtime", None),  # the whole run's wall time, logged once
        ("actor/ppo_kl", "kl"),
        ("actor/kl_loss", "kl"),
        ("objective/kl", "kl"),
        ("critic/score/mean", "reward"),
        ("critic/rewards/mean", "reward"),
        ("reward", "reward"),
        ("rewards/gameplay_scores/mean", "reward"),
        ("reward_std", "reward_std"),
        ("critic/score/std", "reward_std"),
        ("entropy", "entropy"),
        ("response_length/mean", "response_length"),
        ("completions/mean_length", "response_length"),
        ("completion_length", "response_length"),  # TRL GRPO before 0.15
        ("epoch", "epoch"),
        ("eval_wer", "eval_metric"),
        ("eval_runtime", None),
        ("eval_accuracy", "accuracy"),
        ("total_flos", None),
        # TRL through HF's W&B / TensorBoard callbacks: every training key gets a "train/" prefix
        ("train/kl", "kl"),
        ("train/reward_std", "reward_std"),
        ("train/rewards/accuracy_reward/mean", "reward"),
        ("train/objective/kl", "kl"),
        ("train/completions/mean_length", "response_length"),
        ("train/global_step", None),
    ],
)
def test_roles(metric, role):
    assert role_of(metric) == role


def test_value_scale():
    assert value_scale("train/lr(1e-3)") == pytest.approx(1e-3)
    assert value_scale("train/lr") == 1.0
    assert value_scale("train/time(s)") == 1.0


def test_defaults_are_the_seed_values():
    rules = load_config(None, None).rules
    assert rules.kl_spike.max_value == 1.0
    assert rules.loss_plateau.patience_points == 50
    assert rules.step_time_spike.abs_max_seconds == 30.0
    assert rules.grad_spike.abs_max == 100.0


def test_run_file_overrides_database_file_key_by_key_and_custom_rules_add_up(tmp_path):
    db = tmp_path / "db.runwatch.toml"
    db.write_text(
        '[rules.grad_spike]\nz = 5.0\nwindow = 20\n\n[[custom]]\nmetric = "a"\nop = ">"\nvalue = 1\n'
    )
    run = tmp_path / "runwatch.toml"
    run.write_text(
        '[rules.grad_spike]\nz = 12\n[rules.loss_plateau]\nenabled = false\n[[custom]]\nid = "b"\nmetric = "b*"\nop = "falling"\nfor_points = 3\nseverity = "error"\n'
    )
    config = load_config(db, run)
    assert (config.rules.grad_spike.z, config.rules.grad_spike.window) == (12.0, 20)
    assert config.rules.loss_plateau.enabled is False
    assert [(c.id, c.op, c.severity) for c in config.custom] == [
        ("a > 1", ">", "warn"),
        ("b", "falling", "error"),
    ]


def test_stop_is_off_by_default_and_the_run_file_wins(tmp_path):
    assert DetectConfig().stop.on == ()
    db, run = tmp_path / "db.toml", tmp_path / "run.toml"
    db.write_text('[stop]\non = ["nonfinite", "grad_spike"]\nafter_points = 3\n')
    run.write_text('[stop]\nseverity = "warn"\n')
    stop = load_config(db, run).stop
    assert (stop.on, stop.severity, stop.after_points) == (("nonfinite", "grad_spike"), "warn", 3)


def test_missing_files_give_the_defaults(tmp_path):
    assert load_config(tmp_path / "nope.toml", None) == DetectConfig()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[rules.grad_spike\n", "not valid TOML"),
        ("[rules.grad_spikes]\nz = 1\n", "unknown rule [rules.grad_spikes]"),
        ("[rules.grad_spike]\nzz = 1\n", "unknown key 'zz'"),
        ('[rules.grad_spike]\nz = "high"\n', "expected a number"),
        ("[rules.grad_spike]\nwindow = 2.5\n", "expected a whole number"),
        ('[[custom]]\nmetric = "x"\nop = "~"\nvalue = 1\n', "op '~' is not one of"),
        ('[[custom]]\nmetric = "x"\nop = ">"\n', "needs a 'value'"),
        ('[[custom]]\nmetric = "x"\nop = ">"\nvalue = 1\nseverity = "fatal"\n', "severity 'fatal'"),
        ("[thresholds]\nx = 1\n", "unknown top-level key"),
        ('[advice]\ndirection = "up"\n', '[advice] direction: expected "min" or "max"'),
        ("[advice]\nmetric = 3\n", "[advice] metric: expected a metric name"),
        ('[advice]\nmetrics = "x"\n', "[advice]: unknown key 'metrics'"),
        ('[advice]\ndirection = "max"\n', "[advice] direction needs a metric"),
        ("[advice]\nrestart_before_steps = -5\n", "[advice] restart_before_steps: expected a whole number"),
        ('[stop]\non = "nonfinite"\n', "[stop] on: expected a list of rule ids"),
        ('[stop]\non = ["nonfinite"]\nseverity = "fatal"\n', "[stop] severity: expected"),
        ("[stop]\nafter_points = 0\n", "[stop] after_points: expected a whole number >= 1"),
        ("[stop]\nwhen = 1\n", "[stop]: unknown key 'when'"),
    ],
)
def test_bad_config_names_the_file_and_the_problem(tmp_path, text, message):
    path = tmp_path / "runwatch.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(None, path)
    assert str(path) in str(err.value) and message in str(err.value)


def test_example_file_ships_the_rl_early_stop_rules():
    config = load_config(EXAMPLE, None)
    rules = {c.id: c for c in config.custom}
    assert (rules["reward_falling_10_epochs"].op, rules["reward_falling_10_epochs"].for_points) == (
        "falling",
        10,
    )
    assert (
        rules["accuracy_zero_20"].op,
        rules["accuracy_zero_20"].value,
        rules["accuracy_zero_20"].for_points,
    ) == ("==", 0.0, 20)
    budget = rules["budget_violation_rate_over_half_20"]
    assert (budget.op, budget.value, budget.for_points) == (">", 0.5, 20)


def test_run_facts_skip_verl_placeholders_and_prefer_shallow_keys():
    from collector.core.facts import run_settings as run_facts

    info = {
        "optim": {
            "lr": 1e-5,
            "total_training_steps": -1,
            "lr_warmup_steps": -1,
            "lr_warmup_steps_ratio": 0.1,
            "lr_scheduler_type": "Cosine",
            "warmup_style": None,
            "min_lr_ratio": 0.0,
        },
        "trainer": {"total_training_steps": 500, "save_freq": -1, "test_freq": 50},
        "model": {"override_config": {"vocab_size": 504}},
    }
    facts = run_facts(info)
    assert facts == {
        "base_lr": 1e-5,
        "warmup_ratio": 0.1,
        "scheduler": "cosine",
        "min_lr_ratio": 0.0,
        "total_steps": 500,
        "test_freq": 50,
        "vocab_size": 504,
        "warmup_steps": 50,
    }
    hf = run_facts(
        {"max_steps": 669, "save_steps": 50, "eval_steps": 50, "logging_steps": 10, "global_step": 669}
    )
    assert (hf["total_steps"], hf["save_freq"], hf["test_freq"], hf["logging_steps"]) == (669, 50, 50, 10)


def test_advice_section_sets_the_metric_and_direction(tmp_path):
    db = tmp_path / "db.runwatch.toml"
    db.write_text('[advice]\nmetric = "exec_success_rate"\ndirection = "max"\n')
    run = tmp_path / "runwatch.toml"
    run.write_text('[advice]\ndirection = "min"\n')
    assert DetectConfig().advice.metric is None and DetectConfig().advice.direction is None
    config = load_config(db, None)
    assert (config.advice.metric, config.advice.direction) == ("exec_success_rate", "max")
    both = load_config(db, run)  # key by key, like the rules
    assert (both.advice.metric, both.advice.direction) == ("exec_success_rate", "min")


def test_example_file_documents_the_advice_section(tmp_path):
    text = EXAMPLE.read_text()
    assert "# [advice]" in text  # shipped commented out: a copied example must not change every run's advice
    enabled = tmp_path / "runwatch.toml"
    enabled.write_text(
        "\n".join(
            line.removeprefix("# ")
            if line.startswith("# [advice]")
            or line.startswith("# metric =")
            or line.startswith("# direction =")
            else line
            for line in text.splitlines()
        )  # fmt: skip
    )
    config = load_config(enabled, None)
    assert (config.advice.metric, config.advice.direction) == ("exec_success_rate", "max")
