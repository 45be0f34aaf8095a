"""One read of one source through its format's parser, into the caller's open transaction.

The incremental path: bytes from the stored offset (from 0 for a whole document), parsed by the format's
`Format.parse` with the state it carries between reads, stored with the new offset in the same commit;
bad lines are quarantined with their numbers, a line longer than `MAX_LINE_BYTES` is quarantined whole.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable

import duckdb

from collector.core.model import BadLine, Format, ParseResult, Points, RunInfo
from collector.ingest.segments import SIG_BYTES, inside_line, read_range, written_at
from collector.store import points as store_points
from collector.store.db import SourceState, Store

MAX_LINE_BYTES = 64 << 20  # a "line" longer than this is quarantined instead of buffered forever

Report = Callable[[str, str], None]  # (path, what happened and what was done), for a person to read


@dataclasses.dataclass(slots=True)
class Cycle:
    """What one shared transaction collects: to write in a few statements at its end (plain appends, source
    positions, runs' last steps), and to tell detection after the commit (new points, run facts)."""

    plain: list[tuple[SourceState, Points]] = dataclasses.field(default_factory=list)
    saves: list[SourceState] = dataclasses.field(default_factory=list)
    last_steps: dict[str, int] = dataclasses.field(default_factory=dict)
    written_at: dict[str, float] = dataclasses.field(default_factory=dict)  # runs' newest points, file time
    fresh: dict[str, Points] = dataclasses.field(default_factory=dict)
    infos: list[tuple[str, RunInfo]] = dataclasses.field(default_factory=list)


def read_chunk(
    cur: duckdb.DuckDBPyConnection,
    store: Store,
    fmt: Format,
    source: SourceState,
    file_stat: os.stat_result,
    cycle: Cycle,
    after_step: int,
    chunk_bytes: int,
    report: Report,
    context: dict | None = None,
) -> bool:
    """Read the next chunk of `source` (its file as `file_stat` saw it; `after_step` the run's highest
    stored step) through `fmt`'s parser into the open transaction, advancing `source`; True when more is
    waiting. Plain appends wait in `cycle` for one insert of the whole cycle; bad lines are quarantined and
    reported.
    `context` (what the file's neighbours say, `discover.Source.context`) is the parser's state on a read
    from the file's start."""
    whole = fmt.whole_document
    if whole:
        unchanged = (file_stat.st_size, file_stat.st_mtime) == (source.size, source.mtime)
        if unchanged and source.offset == file_stat.st_size:
            return False
        start, want = 0, file_stat.st_size
    else:
        if file_stat.st_size == source.offset:
            return False
        start, want = source.offset, min(file_stat.st_size - source.offset, chunk_bytes)
        if fmt.lines and inside_line(source):
            return _skip_rest_of_long_line(
                cur, store, source, file_stat, read_range(source.path, start, want), cycle
            )
    data = read_range(source.path, start, want)
    result = _parse(fmt, source, data, 1 if whole else source.lines + 1, context)
    if not whole and result.consumed == 0 and len(data) >= want and file_stat.st_size - start > want:
        # One line longer than a chunk: read more of it, up to a limit, then quarantine it.
        data = read_range(source.path, start, min(file_stat.st_size - start, MAX_LINE_BYTES))
        result = _parse(fmt, source, data, source.lines + 1, context)
        if result.consumed == 0 and len(data) >= MAX_LINE_BYTES:
            end = data.find(b"\n")
            _skip_long_line(cur, store, source, data, end, report)
            return True
    run = source.run_id
    points = result.points
    overlap = (
        whole
        or not points
        or min(points.step) <= after_step
        # A resumed run that appended to its file repeats steps within one read: merge them too.
        or len(set(zip(points.metric, points.step, strict=True))) != len(points)
    )
    if overlap:
        # This run's plain appends read earlier in the transaction go in first, so the merge sees them.
        mine = [batch for batch in cycle.plain if batch[0].run_id == run]
        if mine:
            store_points.add_points_many(cur, mine)
            cycle.plain = [batch for batch in cycle.plain if batch[0].run_id != run]
        store_points.add_points(cur, source, result.points, may_overlap=True)
    else:
        cycle.plain.append((source, result.points))
    if whole:  # read whole again: what was bad in its earlier text (written half, then whole) is gone
        store.clear_quarantine(cur, source)
    _quarantine(cur, store, source, result, report)
    if whole:
        source.offset, source.lines = file_stat.st_size, result.lines
    else:
        source.offset += result.consumed
        source.lines += result.lines
        source.tail_sig = (
            data[max(0, result.consumed - SIG_BYTES) : result.consumed]
            if result.consumed
            else source.tail_sig
        )
    source.size, source.mtime = file_stat.st_size, file_stat.st_mtime
    source.points += len(result.points)
    cycle.saves.append(source)
    if result.points:
        # The highest step of the cycle (not of this file): a later file's step at or below it merges.
        cycle.last_steps[run] = max(cycle.last_steps.get(run, result.points.step[0]), max(result.points.step))
        cycle.written_at[run] = max(
            cycle.written_at.get(run, 0.0), written_at(file_stat.st_mtime, time.time())
        )
        cycle.fresh.setdefault(run, Points()).extend(result.points)
    if result.info and fmt.run_info is not None:
        facts = fmt.run_info(result.info)
        cycle.infos.append((run, facts))
        _store_info(cur, store, run, facts)
    return not whole and source.offset < file_stat.st_size and result.consumed > 0


def _parse(
    fmt: Format, source: SourceState, data: bytes, first_line: int, context: dict | None
) -> ParseResult:
    # The state a parser carries between reads (a CSV's header) is kept with the source, as JSON; a read
    # from offset 0 starts from what the file's neighbours say (`context`), or with nothing.
    state = json.loads(source.parser_state) if source.parser_state and source.offset else context
    result = fmt.parse(data, first_line, path=source.path, state=state)
    if result.state is not None:
        source.parser_state = json.dumps(result.state)
    return result


def _quarantine(cur, store: Store, source: SourceState, result: ParseResult, report: Report) -> None:
    if result.skipped:
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(result.skipped.items()))
        report(
            source.path, f"values that are not numbers skipped ({kinds}); the numbers beside them are stored"
        )
    if not result.bad:
        return
    store.quarantine(cur, source, result.bad)
    first = result.bad[0]
    if not result.points and len(result.bad) >= result.lines:
        report(
            source.path,
            f"0 points: all {len(result.bad)} lines read were bad and are quarantined "
            f"(line {first.line}: {first.reason})",
        )
        return
    more = f" (and {len(result.bad) - 1} more bad lines)" if len(result.bad) > 1 else ""
    report(source.path, f"line {first.line}: {first.reason}; line quarantined, the rest ingested{more}")


def _skip_long_line(cur, store: Store, source: SourceState, data: bytes, end: int, report: Report) -> None:
    skip = end + 1 if end >= 0 else len(data)
    bad = [
        BadLine(
            source.lines + 1,
            f"line longer than {MAX_LINE_BYTES} bytes",
            data[:200].decode("utf-8", "replace"),
        )
    ]
    store.quarantine(cur, source, bad)
    source.offset += skip
    source.lines += 1 if end >= 0 else 0
    source.tail_sig = data[max(0, skip - SIG_BYTES) : skip]
    store.save_source(cur, source)
    report(source.path, f"line {source.lines}: longer than {MAX_LINE_BYTES} bytes; quarantined")


def _skip_rest_of_long_line(
    cur, store: Store, source: SourceState, file_stat: os.stat_result, data: bytes, cycle: Cycle
) -> bool:
    """The offset is inside a line already quarantined as too long (it ends in no newline): skip to the
    line's end without another entry. True while more of the file waits."""
    end = data.find(b"\n")
    skip = end + 1 if end >= 0 else len(data)
    source.offset += skip
    source.lines += 1 if end >= 0 else 0
    source.tail_sig = data[max(0, skip - SIG_BYTES) : skip]
    source.size, source.mtime = file_stat.st_size, file_stat.st_mtime
    cycle.saves.append(source)
    return source.offset < file_stat.st_size


def _store_info(cur, store: Store, run: str, facts: RunInfo) -> None:
    store.update_run_info(
        cur,
        run,
        status=facts.status,
        ended=facts.ended,
        total_steps=facts.total_steps,
        config=json.dumps(facts.config, default=str) if facts.config is not None else None,
        status_info=json.dumps(facts.status_info, default=str) if facts.status_info is not None else None,
    )
    if facts.config_part:
        store.merge_run_config(cur, run, json.dumps(facts.config_part, default=str))
