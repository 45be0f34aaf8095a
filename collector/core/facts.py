"""What a rule may know about its run beyond its own metric: `RunFacts`, filled by the detection engine.

Stable interface:

- `run_settings(run_info) -> dict`: the few run settings rules and advice use (total steps, warmup, scheduler,
  base lr, vocab size, save and eval frequency, best-model metric), found by key name anywhere in a nested
  run.json / trainer_state info.
- `RunFacts`: the run's settings plus what the engine learned from the points so far (RL or not, fresh
  initialisation, training-loss level, lr, evaluations, checkpoints, open episodes). Rules read it; only the
  engine writes it. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Collection
from statistics import median

from collector.core.roles import eval_metric_direction

# fact -> key names that carry it (verl run.json, HF TrainingArguments / trainer_state, generic)
_FACT_KEYS: dict[str, tuple[str, ...]] = {
    "total_steps": ("total_training_steps", "total_steps", "max_steps"),
    "warmup_steps": ("lr_warmup_steps", "warmup_steps", "num_warmup_steps"),
    "warmup_ratio": ("lr_warmup_steps_ratio", "warmup_ratio"),
    "scheduler": ("lr_scheduler_type", "lr_scheduler", "warmup_style", "scheduler"),
    "base_lr": ("lr", "learning_rate"),
    "min_lr_ratio": ("min_lr_ratio",),
    "vocab_size": ("vocab_size",),
    "save_freq": ("save_freq", "save_steps"),
    "test_freq": ("test_freq", "eval_steps"),
    "logging_steps": ("logging_steps",),
    "metric_for_best_model": ("metric_for_best_model",),
    "greater_is_better": ("greater_is_better",),
    "best_metric": ("best_metric",),
    "best_checkpoint_step": ("best_checkpoint_step", "best_global_step"),
}


_INT_FACTS = (
    "total_steps", "warmup_steps", "vocab_size", "save_freq", "test_freq", "logging_steps", "best_checkpoint_step",
)  # fmt: skip
_FLOAT_FACTS = ("base_lr", "warmup_ratio", "min_lr_ratio")


def run_settings(run_info: dict | None) -> dict:
    """The settings rules use, by fact name; each from the shallowest key that carries a usable value (verl's
    config holds placeholders such as `optim.total_training_steps: -1` beside the real one); absent when unknown.
    """
    found: dict[str, tuple[int, object]] = {}
    wanted = {key: fact for fact, keys in _FACT_KEYS.items() for key in keys}

    def walk(node: object, depth: int) -> None:
        if depth > 6 or not isinstance(node, dict):
            return
        for key, value in node.items():
            fact = wanted.get(str(key).lower())
            if fact is not None:
                usable = _usable(fact, value)
                if usable is not None and (fact not in found or depth < found[fact][0]):
                    found[fact] = (depth, usable)
            if isinstance(value, dict):
                walk(value, depth + 1)

    walk(run_info or {}, 0)
    facts = {fact: value for fact, (_, value) in found.items()}
    if "warmup_steps" not in facts and "warmup_ratio" in facts and "total_steps" in facts:
        facts["warmup_steps"] = int(facts["warmup_ratio"] * facts["total_steps"])
    return facts


def _usable(fact: str, value: object) -> object:
    if fact in _INT_FACTS:
        return _positive_int(value)
    if fact in _FLOAT_FACTS:
        ok = (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and value >= 0
        )
        return float(value) if ok else None
    if value is None or isinstance(value, dict | list):
        return None
    return str(value).lower() if fact == "scheduler" else value


def _positive_int(value: object) -> int | None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        return None
    return int(value)


_RL_ALGORITHM_WORDS = ("ppo", "grpo", "adv_estimator")


class RunFacts:
    """The run as the rules see it; the engine fills it (`set_run_info`, `note_*`), rules only read it."""

    __slots__ = (
        "settings", "is_rl", "fresh_init", "checkpoint_steps", "eval_steps", "_eval_counts", "_rhythm",
        "_train_loss", "_lr_now", "_lr_peak", "_lr_rising", "_val_best", "open_episodes", "_chosen",
    )  # fmt: skip

    def __init__(
        self, train_window: int = 5, open_episodes: Collection[tuple[str, str]] = frozenset()
    ) -> None:
        self.settings: dict = {}  # from `run_settings`: a fact is absent when unknown
        self.is_rl = False  # an RL run (PPO/GRPO): its "loss" is a policy loss
        # True when the first training loss sits at ln(vocab size): a model trained from a fresh
        # initialisation (None: not known)
        self.fresh_init: bool | None = None
        self.checkpoint_steps: set[int] = set()
        self.eval_steps: deque[int] = deque(maxlen=256)
        self._eval_counts: dict[int, int] = {}
        self._rhythm: tuple[int, ...] = ()  # save and eval frequencies in steps (from the run info)
        self._train_loss: deque[float] = deque(maxlen=max(1, train_window))
        self._lr_now: float | None = None
        self._lr_peak = 0.0
        self._lr_rising = False  # the last lr point was above the one before: a warmup is under way
        self._val_best: tuple[int, float] | None = None
        self.open_episodes = open_episodes  # (rule, metric) keys of the episodes open now
        # the run's own checkpoint metric (HF metric_for_best_model): [name, best step, best value, latest step]
        self._chosen: list | None = None

    # ----- written by the engine -----

    def set_run_info(self, run_info: dict) -> None:
        """Take run settings (scheduler, warmup, total steps, vocab size, save/eval frequency) from run info."""
        self.settings = run_settings(run_info)
        self._rhythm = tuple(f for f in (self.settings.get("save_freq"), self.settings.get("test_freq")) if f)
        if any(k in str(run_info.get("algorithm", "")).lower() for k in _RL_ALGORITHM_WORDS):
            self.is_rl = True

    def set_train_window(self, points: int) -> None:
        """How many training-loss points make the loss level (kept points carry over)."""
        self._train_loss = deque(self._train_loss, maxlen=max(1, points))

    def note_checkpoints(self, steps: list[int]) -> None:
        self.checkpoint_steps.update(int(s) for s in steps)

    def note_train_loss(self, value: float, ln_vocab_rel: float) -> None:
        self._train_loss.append(value)
        vocab = self.settings.get("vocab_size", 0)
        if self.fresh_init is None and vocab > 1:
            uniform = math.log(vocab)
            self.fresh_init = abs(value - uniform) <= ln_vocab_rel * uniform

    def note_lr(self, value: float) -> None:
        self._lr_rising = self._lr_now is not None and value > self._lr_now
        self._lr_now = value
        if value > self._lr_peak:
            self._lr_peak = value

    def note_train_losses(self, values, ln_vocab_rel: float) -> None:
        """`note_train_loss` for each of `values` in order (a backlog's points taken in bulk)."""
        if not len(values):
            return
        self.note_train_loss(float(values[0]), ln_vocab_rel)
        self._train_loss.extend(float(v) for v in values[1:][-self._train_loss.maxlen :])

    def note_lrs(self, values) -> None:
        """`note_lr` for each of `values` (a numpy array) in order: a backlog's points taken in bulk."""
        if len(values) > 1:
            self._lr_now = float(values[-2])
            self._lr_peak = max(self._lr_peak, float(values[:-1].max()))
        if len(values):
            self.note_lr(float(values[-1]))

    def note_chosen(self, metric: str, step: int, value: float) -> None:
        """An evaluation point of any metric: followed when it is the run's own checkpoint metric."""
        wanted = self.settings.get("metric_for_best_model")
        if not wanted or metric not in (wanted, f"eval_{wanted}"):
            return
        greater = self.settings.get("greater_is_better")
        higher = greater if isinstance(greater, bool) else eval_metric_direction(metric) == "max"
        chosen = self._chosen
        if chosen is None or (value > chosen[2] if higher else value < chosen[2]):
            self._chosen = chosen = [metric, step, value, step]
        chosen[3] = step

    def chosen_metric_at_best(self) -> tuple[str, int] | None:
        """(name, step) of the run's own checkpoint metric when its latest evaluation is its best so far;
        else, when the run names its best checkpoint (HF `best_model_checkpoint`), ("its best metric", step)."""
        chosen = self._chosen
        if chosen is not None:
            return (chosen[0], chosen[1]) if chosen[1] == chosen[3] else None
        best_step = self.settings.get("best_checkpoint_step")
        return ("its best metric", best_step) if best_step else None

    def note_eval(self, step: int, val_loss: float | None = None) -> None:
        """An evaluation point at `step` (with its value when it is a validation loss)."""
        # the last 256 evaluation points, with a count per step so that membership is a dict lookup
        evals, counts = self.eval_steps, self._eval_counts
        if len(evals) == evals.maxlen:
            old = evals[0]
            if counts[old] == 1:
                del counts[old]
            else:
                counts[old] -= 1
        evals.append(step)
        counts[step] = counts.get(step, 0) + 1
        if val_loss is not None and (self._val_best is None or val_loss < self._val_best[1]):
            self._val_best = (step, val_loss)

    # ----- read by the rules -----

    def is_save_or_eval_step(self, step: int) -> bool:
        """Whether `step` (or the step before it) saved a checkpoint or ran validation."""
        for s in (step, step - 1):
            if s in self.checkpoint_steps or s in self._eval_counts:
                return True
            for freq in self._rhythm:
                if s > 0 and s % freq == 0:
                    return True
        return False

    def settling(self, step: int, warmup_factor: float) -> bool:
        """Whether the run is still in its lr warmup (up to `warmup_factor` times its configured length; the
        lr still rising when the run states none): its metrics are still finding their level."""
        warmup = self.settings.get("warmup_steps")
        if warmup:
            return step <= warmup_factor * warmup
        return self._lr_rising

    def train_loss_level(self) -> float | None:
        """Median of the last few training-loss points (None before any)."""
        return median(self._train_loss) if self._train_loss else None

    def last_train_loss(self) -> float | None:
        """The training loss last logged (None before any)."""
        return self._train_loss[-1] if self._train_loss else None

    def lr_fraction(self) -> float | None:
        """The current lr as a fraction of its peak so far (None when the run logs no lr)."""
        if self._lr_now is None or self._lr_peak <= 0:
            return None
        return self._lr_now / self._lr_peak

    def val_best_step(self) -> int | None:
        """The step of the lowest validation loss so far (None before any)."""
        return self._val_best[0] if self._val_best else None

    def episode_open(self, rule: str, metric: str) -> bool:
        return (rule, metric) in self.open_episodes

    def rule_open(self, rule: str) -> bool:
        """Whether an episode of `rule` is open now on any metric."""
        return any(key[0] == rule for key in self.open_episodes)
