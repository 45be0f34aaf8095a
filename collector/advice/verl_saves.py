"""The checkpoints a verl run saved, as its log tells them (`trainer.save_freq`). Pure: no I/O.

- `verl_save_freq(info) -> int | None`: verl's `trainer.save_freq` from the run's config (a console log's
  printed config, a run.json or Hydra config), None when it is not verl's or saving is off (<= 0).
- `verl_checkpoints_from_config(info, last_step, state) -> (list[dict], int | None)`: the INFERRED saves
  (`global_step_{k * save_freq}`, under `trainer.default_local_dir` when the run printed it, up to the last
  logged step, and the final step of a completed run), each marked `inferred: True` like `hf_saves`' ones,
  and the step whose save a failed run most likely interrupted (None when there is none).

verl saves a step's checkpoint before it logs that step's metrics, so every save due at or before the last
logged step finished; a failed run's save due right after it was under way when the run failed.
"""

from __future__ import annotations

from collector.advice.hf_saves import implied_saves


def _trainer_section(info: dict | None) -> dict:
    """verl's `trainer` config section, at the top of run info or under `config` ({} when there is none)."""
    for node in (info or {}, (info or {}).get("config")):
        trainer = node.get("trainer") if isinstance(node, dict) else None
        if isinstance(trainer, dict) and "save_freq" in trainer:
            return trainer
    return {}


def verl_save_freq(info: dict | None) -> int | None:
    """verl's save frequency from run info: `trainer.save_freq` at the top or under `config`."""
    freq = _trainer_section(info).get("save_freq")
    if type(freq) is int and freq > 0:
        return freq
    if type(freq) is float and freq.is_integer() and freq > 0:
        return int(freq)
    return None


def verl_checkpoints_from_config(
    info: dict | None, last_step: int | None, state: str | None
) -> tuple[list[dict], int | None]:
    """(inferred checkpoints, interrupted save step) of a verl run whose checkpoint folders nobody has seen
    (see the module docstring); ([], None) without a save frequency or a logged step."""
    freq = verl_save_freq(info)
    if freq is None or not isinstance(last_step, int) or last_step <= 0:
        return [], None
    fact = f"trainer.save_freq {freq} in the run's log"
    folder = _trainer_section(info).get("default_local_dir")
    # under the folder the run printed (trainer.default_local_dir), else named alone
    prefix = f"{folder.rstrip('/')}/" if isinstance(folder, str) and folder.strip("/") else ""
    steps = {s: fact for s in range(freq, last_step + 1, freq)}
    if state == "completed":
        steps.setdefault(last_step, "the run's completion (verl saves its last step)")
    interrupted = None
    if state == "failed" and (last_step + 1) % freq == 0:
        interrupted = last_step + 1
    return implied_saves(steps, f"{prefix}global_step_"), interrupted
