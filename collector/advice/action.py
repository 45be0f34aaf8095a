"""What to do about an alert: the last good checkpoint before its episode and the exact command that resumes
from it, worded for the run's trainer. Pure: no I/O.

Stable interface:

- `trainer_of(run_format, source_formats, run_config, checkpoint_paths, metric_names) -> Trainer`: which
  trainer wrote the run, from what its files say (our launcher's run.json, checkpoint folder names, the
  formats read, metric names), with the fact it rests on; kind "unknown" when the data says nothing.
- `needs_action(alert) -> bool`: error alerts, and the alerts that name a checkpoint or a step to go back to.
- `action_for_alert(alert, advice, trainer, run_path, bad_episodes, restart_before=100) -> dict`: the action
  (`checkpoint`, `trainer`, `trainer_evidence`, `command`, `restart_step`, `skip_steps`, `advice_step`,
  `text`, and the same in three short lines a person reads first: `keep` (the checkpoint, or that there is
  none), `run` (how to use `command`, without repeating it; what to skip), `why`); `advice` is
  `recommend.advice_for_run`'s answer for the run, so an alert never names another checkpoint than the advice
  without saying why.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from collector.detect import registry
from collector.detect.base import Action, eval_noise, fmt, noise_text
from collector.detect.runlevel import RUN_FAILED

# what each rule's episode calls for, as its class declares it (`collector.detect.base.Action`):
# a loss or gradient spike (bad batches, as large-run logbooks found): replay from well before it, skip its batches
SKIP_BATCH_RULES = registry.ids_with(action=Action.SKIP_BATCHES)
# a burst of bad updates (those and a KL spike): replay from well before it
SPIKE_RULES = SKIP_BATCH_RULES | registry.ids_with(action=Action.REPLAY_FROM_BEFORE)
# rules that name a checkpoint to keep in their message (the advice's choice must agree, or say why not)
CHECKPOINT_RULES = registry.ids_with(action=Action.KEEP_CHECKPOINT)
# rules whose message points near a step (the reward's best, the entropy's peak): the action names the
# checkpoint to go back to before the episode and says how it relates to that step
STEP_NAMING_RULES = registry.ids_with(action=Action.NAME_STEP)
_VERL_METRIC = re.compile(r"^(actor|critic|val-core|val-aux|timing_s|response_length)/")
_REMOTE = re.compile(r"^([^/:]+):(/.*)$")
_LAUNCHER_TRAINERS = ("verl_sft", "verl_ppo")
# how many times the evaluations' own noise a save's evaluation must be worse than the one before it to show a
# spike's damage already (the demo: 4.391 after 2.813, noise 0.22, is 7x; an overfitting wobble is 1-2x)
DAMAGE_NOISES = 3.0


@dataclass(frozen=True)
class Trainer:
    """The trainer that wrote a run: `kind` one of runwatch, verl, hf, llamafactory, unknown;
    `evidence` the fact in the run's files it was told by; `preset` for our launcher's runs."""

    kind: str
    evidence: str
    preset: str | None = None


def trainer_of(
    run_format: str | None,
    source_formats: list[str],
    run_config: dict | None,
    checkpoint_paths: list[str],
    metric_names: list[str],
) -> Trainer:
    """The run's trainer from what its files say, strongest fact first (see `Trainer`)."""
    config = run_config if isinstance(run_config, dict) else {}
    preset = config.get("preset")
    if config.get("trainer") in _LAUNCHER_TRAINERS and isinstance(preset, str) and preset != "custom":
        return Trainer(
            "runwatch", f"its run.json was written by trainer.launch (trainer {config['trainer']}, preset {preset})",
            preset,
        )  # fmt: skip
    names = [p.rstrip("/").rsplit("/", 1)[-1] for p in checkpoint_paths if isinstance(p, str)]
    if any(n.startswith("global_step_") for n in names):
        return Trainer("verl", "its checkpoints are verl's global_step_N folders")
    formats = {run_format, *source_formats} - {None}
    if "llamafactory_log" in formats:
        return Trainer("llamafactory", "it logs LLaMA-Factory's trainer_log.jsonl")
    if any(n.startswith("checkpoint-") for n in names):
        return Trainer("hf", "its checkpoints are Hugging Face Trainer checkpoint-N folders")
    hf = formats & {"hf_trainer_state", "hf_console", "hf_tensorboard"}
    if hf:
        what = {
            "hf_trainer_state": "a Hugging Face Trainer trainer_state.json",
            "hf_console": "a Hugging Face Trainer console log",
            "hf_tensorboard": "Hugging Face Trainer TensorBoard events",
        }[sorted(hf)[0]]
        return Trainer("hf", f"it is read from {what}")
    if "console" in formats:
        return Trainer("verl", "it is read from a verl console log (step:N - key:value lines)")
    if (
        "trainer" in config
        and isinstance(config.get("trainer"), dict)
        and "default_local_dir" in config["trainer"]
    ):
        return Trainer("verl", "its config has verl's trainer.default_local_dir")
    verl_names = sorted(m for m in metric_names if _VERL_METRIC.match(m))
    if len(verl_names) >= 2:
        return Trainer("verl", f"it logs verl's metric names ({', '.join(verl_names[:2])}, ...)")
    return Trainer("unknown", "its files do not say which trainer wrote it")


def needs_action(alert: dict) -> bool:
    """Whether an alert carries an action: every error alert, and the alerts that name a checkpoint to keep."""
    rule = alert.get("rule")
    # a run a person stopped (a run_failed warning) is told how to go on from where it stopped
    stopped = rule == RUN_FAILED and (alert.get("evidence") or {}).get("stopped")
    return (
        alert.get("severity") == "error"
        or rule in CHECKPOINT_RULES
        or rule in STEP_NAMING_RULES
        or bool(stopped)
    )


def action_for_alert(
    alert: dict,
    advice: dict,
    trainer: Trainer,
    run_path: str | None,
    bad_episodes: list[tuple[int, int]],
    restart_before: int = 100,
) -> dict:
    """The action for one alert (see the module docstring): which checkpoint to go back to, the command, the
    batches to skip when replaying a spike, and one paragraph saying it all with the facts it rests on."""
    rule, first, last = alert["rule"], int(alert["first_step"]), int(alert["last_step"])
    recommended = advice.get("recommended")
    advice_step = recommended["step"] if recommended else None
    if advice.get("never_learned"):  # one voice: no checkpoint is better than the base model
        chosen, why = None, advice.get("no_recommendation") or "The run never learned."
        reason = why
    elif rule in CHECKPOINT_RULES:
        chosen, why = _kept_by_advice(alert, advice)
        reason = _kept_line(alert, advice) if chosen is not None else _first_sentence(why)
    else:
        chosen, why, reason = _last_good_before(
            alert,
            advice["checkpoints"],
            bad_episodes,
            restart_before,
            advice_step,
            advice.get("direction", "min"),
        )
    evidence = alert.get("evidence") or {}
    named = evidence.get("best_step", evidence.get("peak_step"))
    if (
        rule in STEP_NAMING_RULES
        and chosen is not None
        and isinstance(named, int)
        and named != chosen["step"]
    ):
        why += (
            f" The alert's message points near step {named} (the metric's best); the checkpoint named here is the "
            f"last usable one saved before the episode began"
            + (
                ", which is later than that step."
                if chosen["step"] > named
                else ", none being saved nearer it."
            )
        )
    skip = [first, last] if rule in SKIP_BATCH_RULES else None
    resume = _command(trainer, chosen, run_path) if chosen is not None else None
    command = resume[0] if resume else None
    parts = [why]
    if resume is not None:
        parts.append(f"To resume from it ({trainer.kind}: {trainer.evidence}), {resume[1]}.")
    elif chosen is not None:
        parts.append(f"Resume from it with your trainer's resume option ({trainer.evidence}).")
    if skip is not None:
        parts.append(
            f"When replaying, skip the batches of steps {first}-{last} (the spike's): the same data in the same "
            f"order would likely spike again; drop those samples or reshuffle the data."
        )
    interrupted = advice.get("interrupted_save")
    if rule == RUN_FAILED and interrupted is not None:
        parts.append(
            f"Not step {interrupted}: its save was under way when the run failed, so it is not complete."
        )
    if chosen is None and advice_step is not None and rule not in CHECKPOINT_RULES:
        later = ", saved after this trouble began: keep it only with the caveat its reason gives"
        parts.append(
            f"(The checkpoint advice, which checkpoint to keep at the end, names step {advice_step}"
            f"{later if advice_step >= first else ''}.)"
        )
    if (
        chosen is not None
        and advice_step is not None
        and advice_step != chosen["step"]
        and rule not in CHECKPOINT_RULES
    ):
        scored = any(c.get("value") is not None for c in advice.get("checkpoints", []))
        basis = (
            f"by {advice.get('metric')}" if scored else "as the latest good one, with no evaluation to go by"
        )
        # the short lines are read beside the Checkpoints page, which keeps the advice's step and may list this
        # one as safe to delete: the Keep line itself says what this one is for and defers to the advice, in
        # the paragraph's words (`check` prints the paragraph, the dashboard the lines)
        resume_only = (
            f"to resume from before the trouble; at the end, the checkpoint advice keeps step {advice_step} "
            f"({basis})"
        )
        parts.append(f"(This is where {resume_only}.)")
    else:
        resume_only = None
    if chosen is not None and chosen["step"] in advice.get("deletable", ()):
        # an alert that no longer counts (resolved, its run ended): its resume point is no longer kept
        # (`recommend.keep_for_actions`), and the Keep line beside the Checkpoints page says so
        over = "now that the trouble is resolved and the run has ended, the checkpoint advice lists it as safe to delete"
        parts.append(f"({over[0].upper()}{over[1:]}.)")
        resume_only = f"{resume_only}; {over}" if resume_only else over
    return {
        "checkpoint": chosen,
        "trainer": trainer.kind,
        "trainer_evidence": trainer.evidence,
        "command": command,
        "restart_step": chosen["step"] if chosen is not None else None,
        "skip_steps": skip,
        "advice_step": advice_step,
        "text": " ".join(parts),
        **_lines(
            chosen,
            resume,
            skip,
            reason,
            never_learned=bool(advice.get("never_learned")),
            resume_only=resume_only,
            # none seen before the trouble: the advice's own step (no folder of it seen) is where to go back to
            advice_before=advice_step if advice_step is not None and advice_step <= first else None,
        ),
    }


def _lines(
    chosen: dict | None,
    resume: tuple[str, str, str] | None,
    skip: list[int] | None,
    reason: str,
    never_learned: bool,
    advice_before: int | None,
    resume_only: str | None = None,
) -> dict:
    """`keep`, `run`, `why`: the action in three short lines (the command itself is `command`, said once).
    `resume_only`: the chosen checkpoint is where to resume from, not the one the checkpoint advice keeps;
    said on the `keep` line (read as "Keep step 50 ..."), which then names the advice's step."""
    if chosen is not None:
        keep = f"step {chosen['step']}" + (f" ({chosen['path']})" if chosen.get("path") else "")
        if chosen.get("inferred"):
            keep += ", implied by the run's files: check it exists"
        if resume_only:
            keep += f", {resume_only}"
        run = resume[2] if resume is not None else "resume from it with your trainer's resume option"
    elif never_learned:
        keep, run = (
            "none: no checkpoint is better than the base model",
            "fix the cause, then start from the base model",
        )
    elif advice_before is not None:
        keep = f"step {advice_before}, the checkpoint advice's, if the trainer saved it (no folder of it was seen)"
        run = "resume from it with your trainer's resume option; without it, start from the beginning"
    else:
        keep, run = (
            "nothing: no good checkpoint from before the trouble was seen",
            "fix the cause, then start from the beginning (or the base model)",
        )
    if skip is not None:
        run += f"; when replaying, skip the batches of steps {skip[0]}-{skip[1]}"
    return {"keep": keep, "run": run, "why": reason}


def _kept_line(alert: dict, advice: dict) -> str:
    """Why a validation alert's checkpoint is the advice's, in one short sentence (`text` has the advice's
    whole reason)."""
    rec = advice["recommended"]
    value = next((c.get("value") for c in advice.get("checkpoints", []) if c["step"] == rec["step"]), None)
    line = f"The checkpoint advice keeps it: the best {advice.get('metric')}" + (
        f" ({fmt(value)})" if value is not None else ""
    )
    own = (alert.get("evidence") or {}).get("best_step")
    if own is not None and own != rec["step"]:
        line += f"; this alert's own best evaluation is step {own} (the full text says why they differ)"
    return line + "."


def _first_sentence(text: str) -> str:
    head = text.split(". ", 1)[0].split("; ", 1)[0].rstrip(".")
    return head + "."


def _kept_by_advice(alert: dict, advice: dict) -> tuple[dict | None, str]:
    """A validation alert's checkpoint is the advice's; when the alert's own best evaluation is elsewhere,
    the reason says why the two differ."""
    rec = advice.get("recommended")
    metric, own_best = alert.get("metric"), (alert.get("evidence") or {}).get("best_step")
    if rec is None:
        where = f" nearest step {own_best}" if own_best is not None else ""
        return None, (
            f"No complete checkpoint of this run was seen, so there is none to go back to; keep the one saved"
            f"{where} if the trainer saved it elsewhere."
        )
    if rec.get("path") is None:  # the best evaluation's step, no checkpoint seen there
        return None, rec["reason"]
    chosen = _checkpoint_entry(advice, rec["step"]) or {"step": rec["step"], "path": rec.get("path")}
    text = f"Keep step {rec['step']} ({rec.get('path')}), the checkpoint advice's choice: {rec['reason']}"
    if own_best is not None and own_best != rec["step"]:
        if advice.get("metric") != metric:
            text += (
                f" It differs from this alert's best evaluation (step {own_best} of {metric}) because the "
                f"advice chooses by {advice.get('metric')}."
            )
        elif own_best in ((rec.get("tie") or {}).get("steps") or ()):
            tie = rec["tie"]
            text += (
                f" It differs from this alert's best evaluation (step {own_best}) because the two tie: their values "
                f"are within the evaluations' own noise ({noise_text(tie['noise'])}), and the tie goes to {tie['rule']}."
            )
        else:
            text += (
                f" It differs from this alert's best evaluation (step {own_best}) because no complete checkpoint "
                f"outside a bad episode was saved at that step; step {rec['step']} is the nearest one evaluated best."
            )
    return chosen, text


def _last_good_before(
    alert: dict,
    checkpoints: list[dict],
    bad: list[tuple[int, int]],
    restart_before: int,
    advice_step: int | None = None,
    direction: str = "min",
) -> tuple[dict | None, str, str]:
    """The newest usable checkpoint saved before the episode began (for a spike, `restart_before` steps
    before it when one exists, and not the save just before it when its own evaluation already shows the
    damage: `_damaged_save`), the sentence saying which and why, and the why alone (a short line)."""
    first = int(alert["first_step"])
    run_level = not alert.get("metric")  # stalled / failed: a checkpoint at the last step is still good
    usable = [
        c
        for c in checkpoints
        if (c["step"] <= first if run_level else c["step"] < first)
        and (c.get("complete") or (c.get("inferred") and c.get("complete") is None))
        and not any(lo <= c["step"] <= hi for lo, hi in bad)
    ]
    if not usable:
        seen = [c for c in checkpoints if not c.get("inferred")]
        later = f" (the first one seen is step {seen[0]['step']}, after it began)" if seen else ""
        if not checkpoints:
            none = "no checkpoint of this run was seen"
        elif not seen:
            none = "the run's files imply no checkpoint"
        else:
            none = "no complete checkpoint outside a bad episode was saved"
        resumed = (alert.get("evidence") or {}).get("resumed_from")
        if isinstance(resumed, int) and resumed <= first:
            # the run's own log says it resumed from a checkpoint: one is there, at that step or later
            reason = (
                f"its log says it resumed from the checkpoint at step {resumed} ('Continuing training from global "
                f"step {resumed}'), so that one, or a later save, is in its output folder ({none} here)"
            )
            text = f"Go on from the run's latest checkpoint: {reason}; resume from the latest of them, not from the beginning."
            return (
                {"step": resumed, "path": None, "complete": None, "inferred": True},
                text,
                f"The run resumed from step {resumed}: its latest checkpoint is at that step or later.",
            )
        if advice_step is not None and advice_step <= first:
            # one voice with the checkpoint advice: its step is where to go back to, if the trainer saved it
            text = (
                f"No checkpoint of this run was seen before step {first}, where the trouble began; the checkpoint "
                f"advice's step {advice_step} is the one to go back to if the trainer saved it there (else restart "
                f"from the beginning once the cause is fixed)."
            )
            return None, text, f"The checkpoint advice's step {advice_step}, if the trainer saved it."
        reason = f"{none} before step {first}, where the trouble began{later}"
        text = (
            f"There is no checkpoint to go back to: {reason}. "
            f"Restart from the beginning (or the base model) once the cause is fixed."
        )
        return None, text, reason[0].upper() + reason[1:] + "."
    damaged = _damaged_save(usable, direction) if alert["rule"] in SPIKE_RULES else None
    if damaged is not None:
        usable = usable[:-1]
    pick = usable[-1]
    margin = ""
    if alert["rule"] in SPIKE_RULES:
        early = [c for c in usable if c["step"] <= first - restart_before]
        if early:
            pick = early[-1]
            margin = f", at least {restart_before} steps before the spike (restart well before it, not just before)"
        else:
            margin = f", only {first - pick['step']} step(s) before the spike: none was saved {restart_before} or more before it"
    implied = pick.get("inferred_from") or "its trainer_state.json"
    kind = (
        f"checkpoint the run's files imply ({implied}; no folder seen on disk: check it exists)"
        if pick.get("inferred")
        else "complete checkpoint saved"
    )
    value = ""
    if pick.get("value") is not None:
        at = pick.get("evaluated_at")
        # a value carried from the latest evaluation before the save is said to be that one's, not this save's
        value = f" (evaluation {fmt(pick['value'])}" + (
            f", at step {at}, the latest before this save)" if at not in (None, pick["step"]) else ")"
        )
    chosen = {k: pick.get(k) for k in ("step", "path", "complete", "inferred")}
    sound = " whose own evaluation does not already show it" if damaged else ""
    reason = (
        f"the last {kind} before the trouble began at step {first}{sound}, outside every bad episode{margin}"
    )
    short = "complete checkpoint" if not pick.get("inferred") else "checkpoint the run's files imply"
    text = f"Go back to step {pick['step']}{value}: {reason}.{damaged or ''}"
    word = "sound " if damaged else ""  # the newest save before it is not: the sentence after says why
    why = (
        f"The last {word}{short} before step {first}{value}, where the trouble began{margin}.{damaged or ''}"
    )
    return chosen, text, why


def _damaged_save(usable: list[dict], direction: str) -> str | None:
    """Why not the newest of `usable` (the save just before a spike), or None: its own evaluation is worse than
    the evaluation saved before it by more than `DAMAGE_NOISES` times the earlier evaluations' own noise, so the
    update that set the spike off was saved in it (a loss logged at step N was computed before step N's update;
    step N's save and evaluation come after it), or is not finite. Needs an earlier usable checkpoint to go back
    to instead. Only finite evaluations make the noise (a NaN among them made it NaN, and every save damaged)."""
    pick = usable[-1] if len(usable) > 1 else None
    if pick is None or pick.get("value") is None or pick.get("evaluated_at") != pick["step"]:
        return None
    if not math.isfinite(pick["value"]):
        return (
            f" Not step {pick['step']}: its own evaluation, {fmt(pick['value'])}, already shows the damage: the "
            "update that set the spike off was saved in it."
        )
    before = [
        c
        for c in usable[:-1]
        if c.get("value") is not None and math.isfinite(c["value"]) and c.get("evaluated_at") == c["step"]
    ]
    noise = eval_noise([c["value"] for c in before])
    if noise <= 0:
        return None
    last = before[-1]
    worse = pick["value"] - last["value"] if direction == "min" else last["value"] - pick["value"]
    if worse <= DAMAGE_NOISES * noise:
        return None
    return (
        f" Not step {pick['step']}: its own evaluation, {fmt(pick['value'])} against {fmt(last['value'])} at step "
        f"{last['step']} ({worse / noise:.0f}x the evaluations' own noise, {noise_text(noise)}), already shows the "
        f"damage: the update that set the spike off was saved in it."
    )


def _checkpoint_entry(advice: dict, step: int) -> dict | None:
    for c in advice.get("checkpoints", []):
        if c["step"] == step:
            return {k: c.get(k) for k in ("step", "path", "complete", "inferred")}
    return None


def _command(trainer: Trainer, checkpoint: dict, run_path: str | None) -> tuple[str, str, str] | None:
    """(the exact resume command or setting for this trainer, the sentence that says how to use it, the same
    without the command), or None when the trainer is not known."""
    path, host = _on_host(str(checkpoint.get("path") or ""))
    where = f" on {host}" if host else ""
    if not path:  # a checkpoint the run's log names but nobody has seen: the trainer's "latest" is the one
        if trainer.kind != "hf":
            return None
        command = "trainer.train(resume_from_checkpoint=True)"
        return (
            command,
            f"call `{command}` (the Trainer takes the latest checkpoint in its output_dir)",
            "call this in your training script (it takes the latest checkpoint in output_dir)",
        )
    if trainer.kind == "runwatch":
        out, _ = _on_host(run_path or "RUN_DIR")
        command = f"python -m trainer.launch --preset {trainer.preset} --out {out} --resume-from {checkpoint['step']}"
        return command, f"run{where} `{command}`", f"this command{where}"  # read after the label "Run"
    if trainer.kind == "verl":
        command = f"trainer.resume_mode=resume_path trainer.resume_from_path={path}"
        return (
            command,
            f"add to your verl command{where} `{command}`",
            f"add this to your verl command{where}",
        )
    if trainer.kind == "hf":
        command = f'trainer.train(resume_from_checkpoint="{path}")'
        return (
            command,
            (
                f"call `{command}`{where} (a script taking TrainingArguments, TRL's too: "
                f"`--resume_from_checkpoint {path}`)"
            ),
            f"call this in your training script{where} (or pass `--resume_from_checkpoint {path}`)",
        )
    if trainer.kind == "llamafactory":
        command = f"resume_from_checkpoint: {path}"
        return (
            command,
            (
                f"put `{command}` in your llamafactory-cli train YAML{where} (or pass `--resume_from_checkpoint {path}`)"
            ),
            f"put this in your llamafactory-cli train YAML{where} (or pass `--resume_from_checkpoint {path}`)",
        )
    return None


def _on_host(path: str) -> tuple[str, str | None]:
    """A remote path `host:/x` as (/x, host); a local one as (path, None)."""
    found = _REMOTE.match(path)
    return (found.group(2), found.group(1)) if found else (path, None)
