"""The runs of an HF output folder that several runs reused (`output_dir` rerun without a new name).

What tells runs apart, and what does not:
- Each `trainer_state.json` (the top-level one and every `checkpoint-N/`'s) carries its run's whole history
  from its first log on, and the run's settings. A resume from `checkpoint-N`, whether it goes on at N+1 or
  rewinds to an earlier checkpoint and writes over later ones, loads that history: its later states start
  with the same first log and keep the settings. A new run from scratch starts a new history. So two states
  are one run when their settings agree (`RUN_SETTINGS`, where both say) and their first logs are equal.
- The HF Trainer's TensorBoard lives (`runs/<time_host>/events.out.tfevents.<unix time>.*`, one per process)
  belong to the run of the first state written after the life started (a resume's life writes its run's
  next checkpoint); a life after every state belongs to the folder's current run, unless it starts from the
  beginning (its first step at or before the current run's first logged step, where a resume goes on past
  the checkpoint it loaded): then it is a new run that has saved nothing yet, and the folder's current run.
- The current run is the one written most recently; it keeps the folder's id, the others are
  `<folder>/run-to-<its last step>`. Which state is newest is told by the files' modification times, except
  among states written within `COPIED_WITHIN_S` of the newest: a folder copied, cloned or checked out from git
  is written in a few seconds in any order (a training run saves minutes apart, and a resume must load and
  train before it saves), so there the state of the highest step is the newest (and the run of the top-level
  state, else the longest, the current one).

Console logs and LLaMA-Factory's `trainer_log.jsonl`, appended by every life, stay with the current run.
Reads whole trainer_state.json files (remembered by size and modification time) and event files' first 64 KiB.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from collector.formats import hf_tensorboard, layouts, peek

HF_STATE = "trainer_state.json"
# The settings that tell two HF runs in one output folder apart (a run keeps them across its checkpoints).
RUN_SETTINGS = (
    "max_steps",
    "num_train_epochs",
    "train_batch_size",
    "logging_steps",
    "save_steps",
    "trial_name",
)
# States modified within this many seconds of the newest one were not told apart by training (see the module
# docstring): their step, not their time, says which came last.
COPIED_WITHIN_S = 120.0
_LIFE_START = re.compile(r"tfevents\.(\d{9,11})\.")
# path -> ((size, mtime), facts): a rescan reads no state twice; a life's first step, once its file holds one
_facts: dict[str, tuple[tuple, dict | None]] = {}
_first_steps: dict[str, int] = {}


@dataclass(slots=True)
class Lineage:
    """One run of the folder: its state files, the one most recently written (`source`, None for a run that
    has saved nothing yet), its last step and first logged step, when it last wrote, its TensorBoard lives."""

    states: list[Path] = field(default_factory=list)
    source: Path | None = None
    last_step: int | None = None
    first_step: int | None = None
    written: float = 0.0
    lives: list[Path] = field(default_factory=list)


def state_facts(path: Path) -> dict | None:
    """An HF `trainer_state.json`'s run settings (`RUN_SETTINGS`), its first logged entry (`first_log`),
    `global_step` and the file's modification time (`mtime`); None when it cannot be read."""
    try:
        st = path.stat()
    except OSError:
        return None
    key = (st.st_size, st.st_mtime)
    known = _facts.get(str(path))
    if known is not None and known[0] == key:
        return known[1]
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        state = None
    facts = None
    if type(state) is dict:
        history = state.get("log_history")
        first = history[0] if type(history) is list and history else None
        facts = {k: state.get(k) for k in RUN_SETTINGS} | {
            "first_log": first,
            "global_step": state.get("global_step"),
            "mtime": st.st_mtime,
        }
    if len(_facts) > 4096:
        _facts.clear()
    _facts[str(path)] = (key, facts)
    return facts


def other_run(own: dict | None, theirs: dict | None) -> str | None:
    """Why a state `theirs` was written by another run than the one `own` describes (None when it is the
    run's own, or either is unknown): different settings, or a different first log."""
    if own is None or theirs is None:
        return None
    for key in RUN_SETTINGS:
        if own.get(key) is not None and theirs.get(key) is not None and own[key] != theirs[key]:
            return f"written by another run ({key} {theirs[key]}, this run's {own[key]})"
    if own.get("first_log") and theirs.get("first_log") and own["first_log"] != theirs["first_log"]:
        return "written by another run (its history starts differently)"
    return None


def split_folder(
    folder: Path, real_root: Path, files: list[tuple[Path, str]], checkpoints: list[tuple[int, Path]]
) -> list[Lineage]:
    """The runs of an HF output folder (`files`: its files and formats; `checkpoints`: (step, state file) of
    its `checkpoint-N/`) when several runs wrote it, the current one last; [] when one run did."""
    states = [p for p, fmt in files if fmt == "hf_trainer_state" and p.name == HF_STATE]
    states += [path for _, path in sorted(checkpoints)]
    if len(states) < 2 and not (states and (folder / layouts.HF_LOGGING_DIR).is_dir()):
        return []
    found = lineages(states, layouts.hf_logging_files(folder, real_root))
    return found if len(found) > 1 else []


def console_context(own: Path | None, checkpoints: list[Path], files: list[tuple[Path, str]]) -> dict | None:
    """What an HF console log in a folder needs from the trainer_state.json beside it: `{"logging_steps": N}`
    (its dicts carry no step; N turns their order into steps) from the run's `own` state, else the folder's
    `trainer_state.json`, its newest checkpoint state (`checkpoints` in step order) or, when the folder
    holds exactly one, a renamed state file; None when none says."""
    named = [p for p, fmt in files if fmt == "hf_trainer_state" and p.name == HF_STATE]
    renamed = [p for p, fmt in files if fmt == "hf_trainer_state" and p.name != HF_STATE]
    for path in [*([own] if own else []), *named, *checkpoints[-1:], *(renamed if len(renamed) == 1 else [])]:
        steps = (state_facts(path) or {}).get("logging_steps")
        if type(steps) is int and steps > 0:
            return {"logging_steps": steps}
    return None


def lineages(states: list[Path], lives: list[Path]) -> list[Lineage]:
    """The runs that wrote an HF output folder, from its state files (top-level and checkpoints) and its
    TensorBoard lives (see the module docstring); the current run last. One run when nothing says there
    were more (then nothing is split); states that cannot be read join the current run."""
    groups: list[tuple[dict, Lineage]] = []
    unread: list[Path] = []
    for path in states:
        facts = state_facts(path)
        if facts is None:
            unread.append(path)
            continue
        group = next((g for own, g in groups if other_run(own, facts) is None), None)
        if group is None:
            groups.append((facts, group := Lineage()))
        group.states.append(path)
    for _, group in groups:
        group.source = latest([(p, _step(state_facts(p) or {})) for p in group.states])
        facts = state_facts(group.source) or {}
        group.written = max((state_facts(p) or {}).get("mtime", 0.0) for p in group.states)
        group.last_step, group.first_step = _step(facts), _step(facts.get("first_log") or {}, "step")
    found = sorted((g for _, g in groups), key=lambda g: (g.written, _top_level(g.source), g.last_step or 0))
    if not found:
        return [Lineage(states=unread, lives=list(lives))]
    # Written within a copy's few seconds of the newest: the run of the top-level state, else the longest, is
    # the current one (the folder's id), whatever the order the copy wrote them in.
    alike = [g for g in found if g.written >= found[-1].written - COPIED_WITHIN_S]
    current = max(alike, key=lambda g: (_top_level(g.source), g.last_step or 0, g.written))
    found.remove(current)
    found.append(current)
    found[-1].states.extend(unread)
    written = sorted(
        (((state_facts(p) or {}).get("mtime", 0.0), g) for g in found for p in g.states if p not in unread),
        key=lambda w: w[0],
    )
    fresh = Lineage()
    for life in lives:
        start = life_start(life)
        owner = next((g for when, g in written if start is not None and when > start), None)
        if owner is None and _starts_over(life, found[-1]):
            owner = fresh
            fresh.written = max(fresh.written, mtime_of(life))
        (owner or found[-1]).lives.append(life)
    return [*found, fresh] if fresh.lives else found


def latest(states: list[tuple[Path, int | None]]) -> Path:
    """Of one run's (state file, global_step) pairs, the state it wrote last: the most recently modified one (a
    resume rewound to an earlier checkpoint writes lower steps after higher ones), except that among those
    modified within `COPIED_WITHIN_S` of it (a copied or cloned folder) the one of the highest step."""
    written = [(mtime_of(path), step if step is not None else -1, path) for path, step in states]
    newest = max(when for when, _, _ in written)
    alike = [(step, when, path) for when, step, path in written if when >= newest - COPIED_WITHIN_S]
    return max(alike, key=lambda w: (w[0], w[1]))[2]


def life_start(path: Path) -> float | None:
    """When a TensorBoard life began: the Unix time in its file name (`events.out.tfevents.<time>.<host>...`)."""
    match = _LIFE_START.search(path.name)
    return float(match.group(1)) if match else None


def _starts_over(life: Path, current: Lineage) -> bool:
    """Whether a life after every state starts from the beginning rather than resuming the current run: its
    first step at or before the run's first logged step while the run had gone further."""
    if current.first_step is None or current.last_step is None or current.last_step <= current.first_step:
        return False
    first = _first_steps.get(str(life))
    if first is None:
        steps = hf_tensorboard.parse(peek.head(life) or b"").points.step
        if not steps:
            return False  # nothing logged yet (or not in its first 64 KiB): asked again at the next rescan
        if len(_first_steps) > 4096:
            _first_steps.clear()
        first = _first_steps[str(life)] = min(steps)
    return first <= current.first_step


def _top_level(state: Path | None) -> bool:
    return state is not None and not state.parent.name.startswith("checkpoint-")


def _step(facts: dict, key: str = "global_step") -> int | None:
    value = facts.get(key)
    return value if type(value) is int else None


def mtime_of(path: Path) -> float:
    """A file's modification time (0 when it cannot be read)."""
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
