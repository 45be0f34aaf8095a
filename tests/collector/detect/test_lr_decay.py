"""`lr_not_decaying`: an lr flat at its peak long past warm-up while the config asks for a decaying schedule (and
the run's length is unknown, so `lr_anomaly` cannot hold it to the curve). Its backlog screen against the rule
fed point by point (`screen_check.screened_as_fed`)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from collector import formats
from collector.detect import registry
from collector.detect.engine import RunDetector, detect_series
from collector.detect.lr_decay import LrNotDecaying
from tests.collector.detect.screen_check import drawn, screen_property, screened_as_fed

REAL = Path(__file__).resolve().parents[3].parent / "shared" / "real-runs"
CONSTANT_LR_RUN = (
    REAL / "CoralReefFish__whisper-tiny-nbaiLab__root.json"
)  # whisper-tiny, lr 3e-6 for 99k steps


def _lr(n: int, warmup: int, after) -> dict:
    steps = list(range(1, n + 1))
    values = [1e-4 * s / warmup if s <= warmup else after(s) for s in steps]
    return {"train/lr": (steps, values)}


def _found(events) -> list[tuple[str, str, int]]:
    return [(e.rule, str(e.severity), e.first_step) for e in events if e.rule == "lr_not_decaying"]


def test_a_flat_lr_long_past_warm_up_under_a_cosine_config_is_a_notice() -> None:
    events = detect_series(_lr(3000, 100, lambda s: 1e-4), run_info={"optim": {"lr_scheduler_type": "cosine"},
                                                                     "warmup_steps": 100})  # fmt: skip
    assert _found(events) == [("lr_not_decaying", "info", 100)]
    event = next(e for e in events if e.rule == "lr_not_decaying")
    assert event.active and event.last_step == 3000
    assert "cosine schedule" in event.message and "warm-up ended at step 100" in event.message
    # it speaks once the stretch past warm-up is 10x the warm-up (1000 steps) and no sooner
    early = detect_series(
        _lr(1099, 100, lambda s: 1e-4), run_info={"lr_scheduler_type": "cosine", "warmup_steps": 100}
    )
    assert _found(early) == []


@pytest.mark.parametrize(
    ("run_info", "after"),
    [
        (
            {"lr_scheduler_type": "cosine"},
            lambda s: 1e-4 * 0.5 * (1 + math.cos(math.pi * s / 20000)),
        ),  # decays
        ({"lr_scheduler_type": "linear"}, lambda s: 1e-4 * (1 - s / 5000)),
        ({"lr_scheduler_type": "constant_with_warmup"}, lambda s: 1e-4),  # flat by design
        ({"lr_scheduler_type": "warmup_stable_decay"}, lambda s: 1e-4),  # ...and so is its stable phase
        ({}, lambda s: 1e-4),  # no schedule known: nothing to hold it to
        ({"lr_scheduler_type": "cosine", "max_steps": 3000}, lambda s: 1e-4),  # a known length: lr_anomaly's
    ],
)
def test_what_is_not_a_flat_lr_under_a_decaying_schedule(run_info: dict, after) -> None:
    assert _found(detect_series(_lr(3000, 100, after), run_info=run_info)) == []


def test_the_rule_declares_itself_in_the_registry() -> None:
    cls = registry.get("lr_not_decaying")
    assert cls is not None and cls.roles == ("lr",) and cls.screen is not None
    assert registry.meaning("lr_not_decaying")


def _points(path: Path):
    fmt = formats.get("hf_trainer_state")
    return fmt.parse(path.read_bytes(), 1, path=str(path)).points


@pytest.mark.skipif(not CONSTANT_LR_RUN.is_file(), reason="../shared/real-runs is not beside the repository")
def test_a_real_constant_lr_run_is_quiet_unless_its_config_said_cosine() -> None:
    """Whisper-tiny, lr 3e-6 from step 1000 to 100000: what its trainer_state.json says (100000 steps, no
    scheduler) raises nothing; the same lr under a cosine config of unknown length is the notice, from the
    step the lr reached its peak."""
    points = _points(CONSTANT_LR_RUN)
    as_logged = RunDetector("whisper", run_info={"max_steps": 100000})
    assert _found(as_logged.update(points)) == []
    told_cosine = RunDetector("whisper", run_info={"lr_scheduler_type": "cosine"})
    found = _found(told_cosine.update(points))
    assert found == [("lr_not_decaying", "info", 1000)]


@screen_property
def test_lr_not_decaying_screen_takes_only_what_feeding_gives(seed: int, n: int, horizon: int) -> None:
    steps, values, facts, excused = drawn(seed, "train/lr", n)
    facts.settings.pop("total_steps", None)  # the rule speaks only while the run's length is unknown
    screened_as_fed(
        LrNotDecaying("train/lr", LrNotDecaying.settings()), steps, values, facts, excused, horizon
    )
