"""Which run a file is read into, when discovery's answer for a known file changes.

Four changes, four answers: a run renamed (its id gained or lost a root's name after an id collision) keeps
the file's position; a file now read in another format (a log whose first HF dict just came) is read again
from its start; a file found to belong to another run (an HF output folder reused by several runs, split once
the evidence shows, `formats.hf_lineage`; a live HF run's TensorBoard file, read as a run of its own until the
first checkpoint showed whose it is) leaves its points' old run and is read again into its own; a file found
to be a copy its run does not read (a live HF run's console, once its states exist) leaves the run it was
read into (that run, or a run of its own: `logs/`) and is read no more, as a first reading would not read it. A run left with no file and no point is removed (`store.reattribute.remove_if_empty`).
"""

from __future__ import annotations

import dataclasses

from collector.ingest import segments
from collector.store.db import SourceState, Store
from collector.store.reattribute import forget_source, forget_source_points, left_behind, remove_if_empty


@dataclasses.dataclass(frozen=True, slots=True)
class Moved:
    """A file moved out of `run_id`, whose highest step left is now `last_step` (None: no point left);
    `removed`: the run had nothing else and is gone, with that many of its alerts (None: it stays)."""

    run_id: str
    last_step: int | None
    path: str
    removed: int | None = None
    to: str | None = None  # the run it is read into now (None: no run reads it)


def place_source(
    store: Store, known: SourceState | None, run_id: str, path: str, fmt: str
) -> tuple[SourceState, Moved | None]:
    """The state of the file `path` as a source of `run_id` in format `fmt`, given what was `known` of it;
    and, when it moved from another run, that run's new last step (its points are gone from it, in the
    same transaction that sets the file's position back to its start)."""
    if known is None:
        return store.add_source(run_id, path, fmt), None
    if known.run_id == run_id and known.format == fmt:
        return known, None
    renamed = _renamed(known.run_id, run_id)
    with store.transaction() as cur:
        fresh = store.add_source(run_id, path, fmt)
        if known.run_id == run_id or renamed:
            if known.format != fmt:
                return dataclasses.replace(fresh, segment=known.segment + 1, points=known.points), None
            return dataclasses.replace(fresh, **segments.position(known)), None
        last = forget_source_points(cur, known.run_id, known.id)
        fresh = dataclasses.replace(fresh, segment=known.segment + 1)
        store.save_source(cur, fresh)
        removed = remove_if_empty(cur, known.run_id)
    return fresh, Moved(known.run_id, last, path, removed)


def leave_run(store: Store, known: SourceState) -> Moved:
    """The file `known` was read into a run and is now a copy that its own run does not read: its points
    leave the run they were stored in, its source row goes, and that run goes too if nothing else is left."""
    with store.transaction() as cur:
        last = forget_source(cur, known.run_id, known.id)
        removed = remove_if_empty(cur, known.run_id)
    return Moved(known.run_id, last, known.path, removed)


def clear_left_behind(store: Store) -> list[Moved]:
    """Take out of the runs no file is read into the points of files since read into another run (what an
    earlier collector left: a ghost run of a live HF run's TensorBoard file), and remove those runs if nothing
    is left; a renamed run's points stay where they are."""
    out = []
    for run, source, path, now in left_behind(store.cursor()):
        if _renamed(run, now):
            continue
        with store.transaction() as cur:
            last = forget_source_points(cur, run, source)
            removed = remove_if_empty(cur, run)
        out.append(Moved(run, last, path, removed, to=now))
    return out


def _renamed(old: str, new: str) -> bool:
    """Whether `new` is `old` with a root's name put before it or taken away (an id collision's prefix)."""
    return new.endswith("/" + old) or old.endswith("/" + new)
