"""`val_score_decline`: a validation score (reward, accuracy, exact match) falling from its best and staying
down, judged per evaluation against the evaluations' own wobble (issue 12 item 3). On by default for RL runs,
where the validation score is the one honest measure of the policy; `all_runs = true` judges SFT runs too.
See `collector.detect.base` for the verdict protocol."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from collector.core.facts import RunFacts
from collector.core.roles import role_of
from collector.core.severity import Severity
from collector.detect.base import HOLD, Action, Finding, Rule, Verdict, eval_noise, fmt, noise_text
from collector.detect.screening import Screen


@dataclass(frozen=True)
class ValScoreDeclineRule:
    """A validation score (reward, accuracy, exact match: verl `val-core/...`, `val/test_score/...`, HF
    `eval_<score>`) falling from its best and staying down: on by default for RL runs only."""

    enabled: bool = True
    all_runs: bool = False  # judge the validation scores of SFT runs too (an SFT's val loss is judged anyway)
    patience: int = 3  # evaluations in a row below the best by more than both margins below
    min_rel_drop: float = 0.03  # below the best by 3 % of |best| (or of the score's observed range if larger)
    noise_sigmas: float = 2.0  # and by this many sigmas of the evaluations' own wobble
    noise_evals: int = (
        1000  # (`base.eval_noise` of the last this-many evaluations: all of a run's, as the advice)
    )
    min_evals: int = 5  # evaluations seen before any verdict (fewer give no wobble to judge against)
    error_after: int = 10  # evaluations of one decline that make it an error (example-runwatch.toml's 10)
    clear_after: int = 1  # one evaluation back near the best ends the episode


_SCORE_WORDS = ("reward", "acc", "score", "exact_match", "f1", "bleu", "rouge", "pass@", "success", "correct")
_NOT_A_SCORE = (
    "std",
    "loss",
    "length",
    "runtime",
    "per_second",
    "chosen",
    "rejected",
    "kl",
    "entropy",
    "time",
)


def is_validation_score(metric: str) -> bool:
    """Whether `metric` is a held-out score where higher is better: verl's `val-core/...` and
    `val/test_score/...`, and `eval_`/`val`/`test` names of a reward, accuracy, exact match, F1... (not their
    spreads, lengths or losses)."""
    key = metric.lower()
    if any(word in key for word in _NOT_A_SCORE):
        return False
    role = role_of(metric)
    if role == "val_score":
        return True
    validation = key.startswith(("eval", "val", "test"))
    return validation and role in ("accuracy", "eval_metric") and any(w in key for w in _SCORE_WORDS)


class ValScoreDeclineScreen(Screen):
    """A score the rule does not judge (a training accuracy logged every step: TRL's `mean_token_accuracy`)
    always holds and keeps no state: taken in bulk. A validation score is fed in full (its evaluations are few)."""

    def quiet(self, rule, steps, values, ctx) -> int:
        return 0 if rule.judged else len(values)

    def advance(self, rule, steps, values, ctx) -> None:
        pass


class ValScoreDecline(Rule):
    """The latest `patience` evaluations (or more) in a row below the best by more than `min_rel_drop` of its
    scale and `noise_sigmas` of the evaluations' wobble."""

    rule_id = "val_score_decline"
    roles = ("val_score", "accuracy", "eval_metric")
    settings = ValScoreDeclineRule
    severities = (Severity.WARN, Severity.ERROR)
    screen = ValScoreDeclineScreen()
    action = Action.KEEP_CHECKPOINT
    meaning = "the validation score had fallen below its best there"

    def __init__(self, metric: str, cfg: ValScoreDeclineRule) -> None:
        self.metric, self.cfg = metric, cfg
        self.clear_after = cfg.clear_after
        self.judged = is_validation_score(metric)
        self.seen = 0
        self.best: float | None = None
        self.best_step = 0
        self.lowest: float | None = None
        self.below: list[tuple[int, float]] = []  # evaluations in a row below the best by the margins
        self.history: deque[float] = deque(maxlen=max(3, cfg.noise_evals))

    def rewind(self, step: int) -> None:
        while self.below and self.below[-1][0] >= step:
            self.below.pop()

    def feed(self, step: int, value: float, facts: RunFacts) -> Verdict:
        if not self.judged:
            return HOLD
        cfg = self.cfg
        self.seen += 1
        self.history.append(value)
        self.lowest = value if self.lowest is None else min(self.lowest, value)
        if self.best is None or value > self.best:
            self.best, self.best_step = value, step
            self.below.clear()
            return None
        scale = max(abs(self.best), self.best - self.lowest)
        wobble = eval_noise(list(self.history), fewest=5)  # fewer: a jump is no noise
        margin = max(cfg.min_rel_drop * scale, cfg.noise_sigmas * wobble)
        if self.best - value <= margin:
            self.below.clear()
            return None
        self.below.append((step, value))
        if self.seen < cfg.min_evals or len(self.below) < cfg.patience:
            return HOLD
        if not (facts.is_rl or cfg.all_runs):
            return HOLD  # off by default for SFT runs: their validation loss is judged (val_loss_rise)
        first = self.below[0][0]
        drop = (self.best - value) / abs(self.best) if self.best else float("inf")
        return Finding(
            Severity.WARN,
            value,
            f"{self.metric} has stayed below its best {fmt(self.best)} (step {self.best_step}) for "
            f"{len(self.below)} evaluations, now {fmt(value)} at step {step} ({drop:.1%} lower; the evaluations "
            f"wobble by about {noise_text(wobble)}): the model is getting worse on held-out data. Likely causes in an RL "
            f"run: the policy exploits the training reward (reward hacking), too high an lr or too weak a KL "
            f"penalty, entropy collapse. The evaluation at step {self.best_step} scored best: keep the best-evaluated "
            f"checkpoint (the checkpoint advice names it, and says when none was saved at that step); consider "
            f"stopping, a lower lr or a stronger KL penalty.",
            {
                "best_step": self.best_step,
                "best_value": self.best,
                "evaluations_below": len(self.below),
                "margin": margin,
                "wobble": wobble,
                "values": [[s, v] for s, v in self.below[-8:]],
            },
            first_step=first,
            error_after_points=cfg.error_after,
        )
