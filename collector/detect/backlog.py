"""The backlog path: a stored backlog judged in bulk with exactly the findings of `RunDetector.update`.

Stable interface:

- `judge_backlog(detector, steps, metrics, values) -> list[AlertEvent]`: the same events, and the same
  detector state afterwards, as `detector.update(Points(steps, metrics, values, [None] * n))` (points with
  no wall time, in file order); the columns are numpy arrays (`metrics` of str or object).

How: the incremental engine stays the one definition of a finding. Each rule's screen (the protocol in
`collector.detect.screening`; declared on the rule's class and kept beside it) says, with numpy over the whole
series, how far its next points surely give quiet verdicts; only the points where some rule may fire (and the
points of a metric while one of its episodes is open, a non-finite value, a rule whose state is not ready, a
rule without a screen) go through `RunDetector.update` one by one, in file order. Between them each rule takes its quiet points in bulk, and the
run's facts (loss level, lr, step times, step gaps) are brought up to each fed point in bulk. A step that
rewinds or repeats a metric goes through `update` too (it rewinds the rules), and bulk judging resumes after it.
"""

from __future__ import annotations

import heapq

import numpy as np

from collector.core.model import Points
from collector.core.roles import RL_ROLES, role_of, value_scale
from collector.detect.base import HOLD
from collector.detect.engine import AlertEvent, RunDetector, _Metric
from collector.detect.rules import rules_for
from collector.detect.runlevel import STALLED
from collector.detect.screening import ScreenContext, screen_of

__all__ = ["judge_backlog", "judge_columns"]

_EVAL_ROLES = ("val_loss", "val_score", "eval_metric")
_NOTED = ("loss", "lr", "step_time")  # facts noted at every point, brought up to date in bulk
_FIRST_HORIZON, _LAST_HORIZON = 256, 1 << 16  # points screened at once: numpy calls stay few, arrays small
_RECENT, _RECENT_LIMIT = 64, 128  # as engine's: re-read memory per metric
_MAX_REWINDS = 64  # more rewinds than this in one backlog: the rest goes through `update`


def judge_backlog(det: RunDetector, steps, metrics, values) -> list[AlertEvent]:
    """See the module docstring."""
    index: dict[str, int] = {}
    codes = np.fromiter(
        (index.setdefault(m, len(index)) for m in metrics), dtype=np.int64, count=len(metrics)
    )
    return judge_columns(det, steps, codes, list(index), values)


def judge_columns(det: RunDetector, steps, codes, names: list[str], values) -> list[AlertEvent]:
    """`judge_backlog` with the metrics given as codes into `names` (how the store hands them out)."""
    steps = np.asarray(steps, dtype=np.int64)
    values = np.asarray(values, dtype=np.float64)
    codes = np.asarray(codes, dtype=np.int64)
    if not det.facts.is_rl:
        det.facts.is_rl = any(role_of(m) in RL_ROLES for m in names)
    start, n, rewinds = 0, len(steps), 0
    while start < n:
        cut, groups = _first_rewind(det, steps, codes, names, start)
        if rewinds >= _MAX_REWINDS:
            cut = start
        if cut > start:
            if cut < n:  # the rows of each metric up to the cut
                groups = [g[: np.searchsorted(g, cut - start)] for g in groups]
                groups = [g for g in groups if len(g)]
            segment = slice(start, cut)
            _Segment(det, steps[segment], codes[segment], names, values[segment], groups).run()
        if cut >= n:
            break
        if rewinds >= _MAX_REWINDS:
            rest = slice(cut, n)
            det.update(Points(steps[rest].tolist(), [names[c] for c in codes[rest]], values[rest].tolist(),
                              [None] * (n - cut)), flush=False)  # fmt: skip
            break
        rewinds += 1
        _one(det, int(steps[cut]), names[codes[cut]], float(values[cut]))
        start = cut + 1
    return det.episodes.flush()


def _one(det: RunDetector, step: int, metric: str, value: float) -> None:
    # not flushed: what `update` hands out once per batch, the backlog hands out once at its end (an incident's
    # episodes not handed out yet still fold into one)
    det.update(Points([step], [metric], [value], [None]), flush=False)


def _groups(codes: np.ndarray) -> list[np.ndarray]:
    """The rows of each metric (ascending), metrics in the order of their first row."""
    if not len(codes):
        return []
    found = np.unique(codes)
    if len(found) <= 64:  # a few metrics: one comparison each beats a sort of every row
        groups = [np.flatnonzero(codes == c) for c in found]
    else:
        order = np.argsort(codes, kind="stable")
        groups = np.split(order, np.flatnonzero(np.diff(codes[order])) + 1)
    return sorted(groups, key=lambda g: int(g[0]))


def _first_rewind(det: RunDetector, steps, codes, names, start: int) -> tuple[int, list[np.ndarray]]:
    """The first row at or after `start` whose step does not move its metric forward (a rewind or re-read),
    and the rows of each metric from `start` (relative to it)."""
    s = steps[start:]
    groups = _groups(codes[start:])
    cut = len(s)
    for rows in groups:
        ss = s[rows]
        back = np.flatnonzero(ss[1:] <= ss[:-1])
        if len(back):
            cut = min(cut, int(rows[back[0] + 1]))
        state = det._metrics.get(names[codes[start + rows[0]]])
        if state is not None and state.last_step is not None and ss[0] <= state.last_step:
            cut = min(cut, int(rows[0]))
    return start + cut, groups


class _Rule:
    __slots__ = ("rule", "screen", "key", "pos", "lim", "kind", "horizon")

    def __init__(self, rule, key) -> None:
        self.rule, self.screen, self.key = rule, screen_of(rule), key
        self.pos = self.lim = 0
        self.kind = "hot"  # what happens at `lim`: "hot" (the rule is fed that point), "horizon", "done"
        self.horizon = _FIRST_HORIZON


class _Track:
    """One metric's points in the segment and where each of its rules stands."""

    def __init__(self, det: RunDetector, metric: str, rows: np.ndarray, steps, values) -> None:
        self.metric, self.state = metric, det._metrics[metric]
        self.rows, self.steps, self.raw = rows, steps, values
        finite = np.isfinite(values)
        self.f_rows, self.f_steps = rows[finite], steps[finite]
        self.f_vals = values[finite] * self.state.scale if self.state.scale != 1.0 else values[finite]
        self.bad_rows = rows[~finite]
        self.rules = [_Rule(rule, key) for rule, key, _ in self.state.judged]
        self.full = self.state.role in _EVAL_ROLES or any(r.screen is None for r in self.rules)
        self.force: int | None = None  # a finite index fed in full whatever the screens say
        self.bad = 0  # next non-finite row
        self.cursor = 0  # next finite index not yet handled
        # what `update` keeps per metric, as the segment found it (rows fed in full change it meanwhile)
        self.recent0 = list(self.state.recent.items())


class _Segment:
    """Rows where every metric moves forward: judged with screens (see the module docstring)."""

    def __init__(self, det: RunDetector, steps, codes, names, values, groups: list[np.ndarray]) -> None:
        self.det, self.steps, self.values = det, steps, values
        self.tracks: list[_Track] = []
        for group in groups:  # metrics met for the first time are created in file order, as update does
            metric = names[codes[group[0]]]
            if metric not in det._metrics:
                role = role_of(metric)
                det._metrics[metric] = _Metric(
                    metric, rules_for(metric, role, det.config), role, value_scale(metric)
                )
            self.tracks.append(_Track(det, metric, group, steps[group], values[group]))
        facts = det.facts
        evals = [t.steps for t in self.tracks if t.state.role in _EVAL_ROLES]
        known = np.fromiter([*facts._eval_counts, *facts.checkpoint_steps], dtype=np.int64)
        self.ctx = ScreenContext(facts, np.unique(np.concatenate([known, *evals])))
        # facts noted at every point of a role, in file order across metrics of that role
        self.noted = {}
        for role in _NOTED:
            parts = [(t.f_rows, t.f_vals) for t in self.tracks if t.state.role == role]
            if len(parts) == 1:
                self.noted[role] = [parts[0][0], parts[0][1], 0]
            elif parts:
                rows = np.concatenate([p[0] for p in parts])
                o = np.argsort(rows, kind="stable")
                self.noted[role] = [rows[o], np.concatenate([p[1] for p in parts])[o], 0]
        # the run's latest step and the gaps between new latest steps (`RunDetector._note_step`)
        prev = det.last_step if det.last_step is not None else (int(steps.min()) - 1 if len(steps) else 0)
        running = np.maximum.accumulate(np.concatenate([[prev], steps]))
        new = steps > running[:-1]
        self.new_rows = np.nonzero(new)[0]
        self.gaps = steps[new] - running[:-1][new]
        self.first_gap = det.last_step is not None
        self.new_done = 0

    # ----- bringing the run's state up to a row -----

    def _sync(self, row: int) -> None:
        """Facts and step bookkeeping as they stand just before `row`."""
        det, facts = self.det, self.det.facts
        for role, entry in self.noted.items():
            rows, vals, done = entry
            upto = int(np.searchsorted(rows, row))
            if upto > done:
                chunk = vals[done:upto]
                if role == "loss":
                    facts.note_train_losses(chunk, det.config.rules.no_learning.ln_vocab_rel)
                elif role == "lr":
                    facts.note_lrs(chunk)
                else:
                    det._step_times.extend(chunk[-det._step_times.maxlen :].tolist())
                entry[2] = upto
        upto = int(np.searchsorted(self.new_rows, row))
        if upto > self.new_done:
            lo = self.new_done if self.new_done or self.first_gap else 1
            det._step_gaps.extend(self.gaps[max(lo, upto - det._step_gaps.maxlen) : upto].tolist())
            det.last_step = int(self.steps[self.new_rows[upto - 1]])
            self.new_done = upto

    def _after_fed(self, row: int) -> None:
        """`update` noted this row itself: skip it in the bulk bookkeeping."""
        for entry in self.noted.values():
            rows, done = entry[0], entry[2]
            if done < len(rows) and rows[done] == row:
                entry[2] = done + 1
        if self.new_done < len(self.new_rows) and self.new_rows[self.new_done] == row:
            self.new_done += 1
            self.first_gap = True

    # ----- the rules -----

    def _advance(self, t: _Track, r: _Rule, to: int) -> None:
        if to > r.pos:
            r.screen.advance(r.rule, t.f_steps[r.pos : to], t.f_vals[r.pos : to], self.ctx)
            r.pos = to

    def _screen(self, t: _Track, r: _Rule) -> None:
        """Where rule `r` may fire next, from its position."""
        nf = len(t.f_vals)
        if r.pos >= nf:
            r.lim, r.kind = nf, "done"
            return
        is_open = r.key in self.det.episodes.open_by_key
        if (
            r.screen is None
            or (is_open and not r.screen.holds_between)
            or not r.screen.ready(r.rule, self.ctx)
        ):
            r.lim, r.kind = r.pos, "hot"
            return
        end = min(nf, r.pos + r.horizon)
        steps, values = t.f_steps[r.pos : end], t.f_vals[r.pos : end]
        if is_open:  # only points that surely hold: a verdict of None counts towards closing the episode
            k = r.screen.between(r.rule, steps, values, self.ctx)
        else:
            k = r.screen.quiet(r.rule, steps, values, self.ctx)
        r.lim = r.pos + k
        if r.lim == end:
            r.kind = "done" if end == nf else "horizon"
            r.horizon = min(4 * r.horizon, _LAST_HORIZON)
        else:
            r.kind = "hot"
            r.horizon = _FIRST_HORIZON  # points that may fire come close together: screen less ahead

    def _next(self, t: _Track) -> int | None:
        """The next row of this metric where something must happen (None: none left)."""
        best = None
        if t.bad < len(t.bad_rows):
            best = int(t.bad_rows[t.bad])
        nf = len(t.f_rows)
        lims = [r.lim for r in t.rules if r.kind != "done"]
        if t.full and t.cursor < nf:
            lims.append(t.cursor)
        if t.force is not None:
            lims.append(t.force)
        if lims:
            q = min(lims)
            if q < nf and (best is None or t.f_rows[q] < best):
                best = int(t.f_rows[q])
        return best

    def _feed(self, t: _Track, row: int, q: int | None) -> None:
        """Row `row` (finite index `q`, None for a non-finite value) through `update`."""
        det = self.det
        if q is not None:
            for r in t.rules:
                self._advance(t, r, q)
        self._sync(row)
        _one(det, int(self.steps[row]), t.metric, float(self.values[row]))
        self._after_fed(row)
        open_ = det.episodes.open_by_key
        if q is None:
            t.bad += 1
            if t.state.nonfinite_key in open_:
                t.force = int(np.searchsorted(t.f_rows, row))  # the next finite point misses, or closes it
            return
        t.cursor = q + 1
        t.force = q + 1 if t.state.nonfinite_key in open_ else None
        for r in t.rules:
            r.pos = q + 1
            if r.lim <= q or (r.key in open_ and not getattr(r.screen, "holds_between", False)):
                self._screen(t, r)

    def _visit(self, t: _Track, row: int) -> None:
        if t.bad < len(t.bad_rows) and t.bad_rows[t.bad] == row:
            self._feed(t, row, None)
            return
        q = int(np.searchsorted(t.f_rows, row))
        if t.full or t.force == q:
            self._feed(t, row, q)
            return
        hot = []
        for r in t.rules:
            if r.lim != q or r.kind == "done":
                continue
            self._advance(t, r, q)
            if r.kind == "hot":
                hot.append(r)
            else:
                self._screen(t, r)  # a horizon reached: screen further
        if hot:
            # only these rules may fire here (the others' verdicts are quiet): fed alone, in the rules' order,
            # with the facts as `update` has them at this point (this point's own noted)
            det = self.det
            self._sync(row + 1)
            step, value = int(t.f_steps[q]), float(t.f_vals[q])
            open_ = det.episodes.open_by_key
            for r in hot:
                verdict = r.rule.feed(step, value, det.facts)
                if verdict is None:
                    if r.key in open_:
                        det.episodes.miss(r.key, r.rule.clear_after)
                elif verdict is not HOLD:
                    det._found(r.rule, r.key, verdict, step, t.metric)
                r.pos = q + 1
            for r in hot:
                self._screen(t, r)

    def run(self) -> None:
        det = self.det
        full = sum(len(t.f_rows) for t in self.tracks if t.full)
        if 2 * full > len(self.steps):
            # most points would be fed one by one anyway (evaluation metrics, rules without a screen): one batch
            # through the engine costs less per point than the screens' bookkeeping around each
            names = {t.metric: t for t in self.tracks}
            metric = np.empty(len(self.steps), dtype=object)
            for name, t in names.items():
                metric[t.rows] = name
            det.update(Points(self.steps.tolist(), metric.tolist(), self.values.tolist(), [None] * len(self.steps)),
                       flush=False)  # fmt: skip
            return
        heap = []
        for i, t in enumerate(self.tracks):
            for r in t.rules:
                self._screen(t, r)
            if t.state.nonfinite_key in det.episodes.open_by_key:
                t.force = 0
            nxt = self._next(t)
            if nxt is not None:
                heap.append((nxt, i))
        heapq.heapify(heap)
        while heap:
            row, i = heapq.heappop(heap)
            t = self.tracks[i]
            self._visit(t, row)
            nxt = self._next(t)
            if nxt is not None:
                heapq.heappush(heap, (nxt, i))
        for t in self.tracks:
            for r in t.rules:
                if r.screen is not None:
                    self._advance(t, r, len(t.f_vals))
        self._sync(len(self.steps))
        self._finish()
        det.episodes.close((STALLED, ""))

    def _finish(self) -> None:
        """Per-metric bookkeeping `update` keeps: last step and the steps remembered for re-reads."""
        for t in self.tracks:
            state = t.state
            state.last_step = int(t.steps[-1])
            # `update` prunes its memory to the last 64 steps each time it passes 128
            keep = len(t.recent0) + len(t.steps)
            if keep > _RECENT_LIMIT:
                keep = _RECENT + (keep - _RECENT_LIMIT - 1) % (_RECENT_LIMIT - _RECENT + 1)
            tail = list(zip(t.steps[-keep:].tolist(), t.raw[-keep:].tolist(), strict=True)) if keep else []
            pairs = t.recent0[len(t.recent0) - (keep - len(tail)) :] + tail if keep > len(tail) else tail
            state.recent = dict(pairs)
