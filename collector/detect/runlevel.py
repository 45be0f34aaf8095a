"""Rules that need no window: a non-finite value (`nonfinite`), a run gone silent (`stalled`) and a run
whose files say it failed (`run_failed`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from collector.core.severity import Severity
from collector.detect.base import Finding, Rule, fmt


@dataclass(frozen=True)
class NonfiniteRule:
    enabled: bool = True
    clear_after: int = 5  # finite points before the episode closes (fp16 overflow NaNs come in bursts)
    # a non-finite gradient norm alone is a step the dynamic loss scaler skipped (a notice); this many in one
    # episode mean the scale collapsed (a warning), this many an error
    grad_warn_after: int = 5
    grad_error_after: int = 20


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


class Nonfinite(Rule):
    """NaN or Inf in any metric (judged by the engine on every point: see `nonfinite_finding`)."""

    rule_id = "nonfinite"
    settings = NonfiniteRule
    severities = (Severity.INFO, Severity.WARN, Severity.ERROR)
    unsafe_checkpoint = True
    recurs = True  # incidents: NaN that comes back on a metric is one trouble
    meaning = "values there were NaN or infinite"


class Stalled(Rule):
    """No point for far longer than the run's usual step (judged by the engine's clock: `stall_finding`)."""

    rule_id = "stalled"
    settings = StalledRule
    severities = (Severity.WARN, Severity.ERROR)
    about_weights = False  # a run gone silent says nothing of the weights it saved before


class RunFailed(Rule):
    """The run's files say it failed (judged by the engine from the run's status: `run_failed_finding`)."""

    rule_id = "run_failed"
    settings = RunFailedRule
    severities = (Severity.ERROR,)
    about_weights = False  # a crash says nothing of the weights saved before it


NONFINITE = Nonfinite.rule_id
# a correlation logged as a diagnostic (verl's training/rollout_actor_probs_pearson_corr): NaN when one side
# holds a single value, which is no fault of training (make demo-rl logged two among finite losses and rewards)
_CORRELATION = re.compile(r"(?:^|[/_.\-])(?:pearson|spearman|corr|correlation|corrcoef)(?:$|[/_.\-@])", re.I)
# ...unless it is what is trained: a correlation loss (Deep CCA's `corr_loss`) or reward going NaN is training's
_TRAINED = re.compile(r"loss|reward|objective", re.I)
STALLED = Stalled.rule_id
RUN_FAILED = RunFailed.rule_id


def nonfinite_finding(
    metric: str,
    step: int,
    value: float,
    cfg: NonfiniteRule,
    role: str | None,
    rl: bool = False,
    settings: dict | None = None,
    episode: tuple[int, int, bool] | None = None,
    loss_zero: bool = False,
) -> Finding:
    """NaN or Inf in a metric: an error, except a gradient norm's, which alone is a step the loss scaler
    skipped (a notice that becomes a warning, then an error, as they add up in one episode). The message says
    where in the run it happened (`settings`: the run's `total_steps`, `warmup_steps` when known) and, once a
    gradient norm's episode has escalated, what that means (`episode`: the open episode's first step, its
    points with this one, whether they came in a row); `loss_zero`: the training loss last logged is exactly
    0 (a trainer's NaN filter, said beside NaN gradients)."""
    if role == "grad_norm":
        since, points, in_a_row = episode if episode is not None else (step, 1, True)
        zero = (
            " The training loss logged as exactly 0 beside them is no perfect fit: a trainer that drops NaN "
            "losses from its logged average logs 0 when every one was NaN (Hugging Face Trainer's "
            "logging_nan_inf_filter, on by default)."
            if loss_zero
            else ""
        )
        evidence = {"value": str(value), "kind": "skipped_step", "since_step": since}
        if points < cfg.grad_warn_after:
            message = (
                f"{metric} is {fmt(value)} at step {step}: with fp16 and a dynamic loss scaler the optimizer "
                f"skips this step and lowers the scale ({_where_skipped(step, settings or {})}). Many in a row "
                f"mean the scale collapsed: switch to bf16 or lower the lr.{zero}"
            )
        else:
            which = "in a row" if in_a_row else "in one episode"
            meaning = (
                "the fp16 loss scale collapsed or the weights themselves are NaN"
                if points >= cfg.grad_error_after
                else "far more than a loss scaler's routine skips: the fp16 loss scale is collapsing or the "
                "weights went NaN"
            )
            message = (
                f"{metric} is {fmt(value)} at step {step}, at {points} logged steps {which} since step {since}: "
                f"{meaning}, so nothing has been learned since step {since}.{zero} Restart from a checkpoint "
                f"saved before step {since} (or from the start) with bf16 or a lower lr and gradient clipping."
            )
        return Finding(
            Severity.INFO,
            value,
            message,
            evidence,
            warn_after_points=cfg.grad_warn_after,
            error_after_points=cfg.grad_error_after,
        )
    # NaN (an infinity is no undefined correlation)
    if _CORRELATION.search(metric) and not _TRAINED.search(metric) and value != value:
        return Finding(
            Severity.INFO,
            value,
            f"{metric} is {fmt(value)} at step {step}: a correlation is undefined when one of its two sides holds "
            f"a single value over the batch (every probability the same, say), which by itself says nothing is "
            f"wrong with training. Look further only if the loss, rewards or grad norm go non-finite too.",
            {"value": str(value), "kind": "undefined_correlation"},
        )
    if rl:
        return Finding(
            Severity.ERROR,
            value,
            f"{metric} is {fmt(value)} at step {step} (an RL run). Likely causes: a group whose rewards are all "
            f"equal (advantages normalised by a zero std), a token whose log-probability is -inf under the new "
            f"policy (the importance ratio overflows), a reward function returning NaN, lr too high. Check the "
            f"rewards and response lengths of this step's batch and the actor's grad norm; resume from the last "
            f"good checkpoint and skip this batch if it repeats.",
            {"value": str(value)},
        )
    return Finding(
        Severity.ERROR,
        value,
        f"{metric} is {fmt(value)} at step {step}. Likely causes: fp16 overflow (with a dynamic loss scaler a "
        f"few at the start are skipped steps; more mean the scale collapsed), lr too high, a bad batch "
        f"(empty sequence, all labels masked), division by zero in a custom loss. Check the loss and the loss "
        f"scale around this step; switch to bf16 or lower the lr if it repeats.",
        {"value": str(value)},
    )


def _where_skipped(step: int, settings: dict) -> str:
    """A skipped step worded by where it happened: routine while the scaler finds its level at the start,
    an overflow of this step's gradients later on."""
    total, warmup = settings.get("total_steps"), settings.get("warmup_steps") or 0
    start = max(2 * warmup, total // 20) if isinstance(total, int) and total > 0 else max(2 * warmup, 100)
    if step <= start:
        return "normal a few times at the start, while the scaler finds its level"
    where = f"{step / total:.0%} into the run" if isinstance(total, int) and total > 0 else "past the start"
    return (
        f"here {where}, long after the scaler found its level, this step's gradients overflowed: harmless "
        f"once; look at this batch if it repeats"
    )


def stall_finding(
    cfg: StalledRule, silence: float, usual: float | None, pause_expected: bool, last_step: int | None
) -> Finding | None:
    """A finding when a running run has been silent for `silence` seconds, far longer than `usual` seconds
    between points (`pause_expected`: the last step saves or validates, so a long pause is normal)."""
    limit = max(cfg.min_seconds, cfg.factor * usual) if usual else cfg.default_seconds
    if usual and pause_expected:
        limit *= cfg.save_factor
    if silence <= limit:
        return None
    evidence = {"silence_s": silence, "limit_s": limit, "usual_interval_s": usual, "last_step": last_step}
    if silence > cfg.ended_after_seconds:
        # silent for a day or more: the run is over, it just never said so; a warning, not an error storm
        # over an archive of old runs
        return Finding(
            Severity.WARN,
            silence,
            f"The status says running, but the run's files were last written {silence / 3600:.1f} h ago "
            f"(last step {last_step}): it most likely ended without saying so (killed by the OOM killer or a "
            f"scheduler's time limit, the node lost, the terminal closed). Check whether its process still "
            f"exists; resume from its last checkpoint if it should have finished.",
            evidence | {"ended": True},
        )
    severity = Severity.ERROR if silence > cfg.error_factor * limit else Severity.WARN
    usual_text = f"the usual {fmt(usual)} s between points" if usual else "no known step interval"
    return Finding(
        severity,
        silence,
        f"The status says running, but no new point for {silence / 60:.1f} min (limit {limit / 60:.1f} min, "
        f"{usual_text}); last step {last_step}. Likely causes: a hung collective (NCCL/gloo), a dead data "
        f"loader, a full disk, a killed process that left its status file. Check the process (py-spy dump), "
        f"its log tail and free disk space.",
        evidence,
    )


# What an error line says about its cause, and what to do: (patterns in the error, advice), first match wins.
# Signals are matched by name or number as whole words (`got signal: 15` is SIGTERM, never SIGHUP's `signal: 1`).
def _signal(name: str, number: int) -> tuple[str, ...]:
    return (rf"\b{name}\b", rf"\bsignal:?\s*{number}\b", rf"\bSignal {number}\b")


_FAILURE_CAUSES = (
    (
        (
            r"No space left on device",
            r"file write failed",
            r"Disk quota exceeded",
            r"Errno 28\b",
            r"Errno 122\b",
        ),
        "Likely cause: the disk filled up (checkpoints?). Free space or keep fewer checkpoints (verl "
        "`trainer.max_actor_ckpt_to_keep`, HF `save_total_limit`), then resume from the last complete checkpoint "
        "(a save the failure interrupted is not one).",
    ),
    (
        (r"out of memory", r"OutOfMemoryError"),
        "Out of GPU memory: lower the micro batch size or the maximum "
        "sequence/response length, or turn on gradient checkpointing or offloading, then resume.",
    ),
    (
        _signal("SIGHUP", 1),
        "Killed by SIGHUP (signal 1): the terminal or SSH session that started it "
        "closed. Start runs under nohup, tmux or the scheduler, then resume.",
    ),
    (
        (*_signal("SIGINT", 2), r"\bKeyboardInterrupt\b"),
        "Stopped by SIGINT (signal 2): Ctrl-C, or a launcher passing a person's Ctrl-C to every rank; resume "
        "from the last checkpoint to go on.",
    ),
    (
        _signal("SIGTERM", 15),
        "Terminated by SIGTERM (signal 15): a scheduler's time limit or preemption, a `kill`, or the launcher "
        "stopping every rank after one failed (read the first rank's error above it). Resume from the last "
        "checkpoint.",
    ),
    (
        (*_signal("SIGKILL", 9), r"\bKilled\b"),
        "Killed by SIGKILL (signal 9): the host's OOM killer "
        "(check dmesg and host memory), a scheduler's memory limit, or a person. Resume from the last "
        "checkpoint.",
    ),
    (
        (r"ConnectionError", r"Connection aborted", r"Connection broken", r"Timeout"),
        "A service the run depends on "
        "(an environment, reward or rollout server, the network file system) stopped answering: check it, then "
        "resume.",
    ),
)
_CAUSES = tuple((re.compile("|".join(words), re.IGNORECASE), advice) for words, advice in _FAILURE_CAUSES)
# A person's stop: Ctrl-C in the terminal (Python's KeyboardInterrupt) or SIGINT passed on by a launcher.
_STOPPED_BY_PERSON = re.compile("|".join(_FAILURE_CAUSES[3][0]), re.IGNORECASE)


def stopped_by_person(error_text: str) -> bool:
    """Whether a run's last error line is a person stopping it (Ctrl-C: `KeyboardInterrupt`, SIGINT, signal 2)
    rather than a failure: the run is `stopped`, not `failed`."""
    return bool(_STOPPED_BY_PERSON.search(error_text))


def run_failed_finding(status: str | None, status_info: dict | None, last_step: int | None) -> Finding | None:
    """An error when the run's files say it failed: a console log ending in an error (`status_info.error`:
    `{"line", "text", "file"}`), or a status file whose state is `failed` (its `error` text, if any); None
    otherwise (a log that went on after the error, a status that is not `failed`)."""
    info = status_info or {}
    error = info.get("error")
    state = str(info.get("state", info.get("status", status or ""))).lower()
    if not error and state != "failed":
        return None
    raised = error.get("raised_in") if isinstance(error, dict) else None
    if isinstance(error, dict):
        text = str(error.get("text", ""))
        where = f"{error.get('file') or 'the log'}, line {error.get('line')}"
    else:
        text = str(error or info.get("anomaly_reason") or "")
        where = "its status file"
    # the error line as text, quoted, on one line (never a repr with its escapes)
    shown = " ".join(text.split())
    said = f': "{shown}" ({where})' if shown else f" ({where} says failed, with no error text)"
    if isinstance(raised, dict) and shown:
        # an exception named alone says what only with where: the traceback's frame that raised it
        said += f", raised in {raised.get('function')} ({raised.get('file')}, line {raised.get('line')})"
    after = f" after step {last_step}" if last_step is not None else " before its first logged step"
    resumed = info.get("resumed_from")
    go_on = "resume from the last checkpoint"
    if last_step is None and not isinstance(resumed, int):
        go_on = "start the run again (it saved no checkpoint to resume from)"  # it failed before step 1
    cause = next(
        (advice for pattern, advice in _CAUSES if pattern.search(text)),
        f"Read the traceback around that line; fix the cause, then {go_on}.",
    )
    evidence = {"error": text, "where": where, "last_step": last_step}
    if isinstance(raised, dict):
        evidence["raised_in"] = raised
    if isinstance(resumed, int):
        # the run itself resumed from a checkpoint: the action goes on from its latest, not from the beginning
        evidence["resumed_from"] = resumed
    if stopped_by_person(text):
        # a person's stop is not a failure: a warning that says where it stopped and how to go on
        return Finding(
            Severity.WARN, None, f"The run was stopped{after}{said}. {cause}", evidence | {"stopped": True}
        )
    return Finding(Severity.ERROR, None, f"The run failed{after}{said}. {cause}", evidence)
