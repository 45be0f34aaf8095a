"""The Hugging Face Trainer's console log: the dicts it prints between tqdm progress bars.

    {'loss': 0.538, 'grad_norm': 0.23, 'learning_rate': 1.7e-05, 'epoch': 0.11}
     10%|█         | 20/181 [03:20<26:49, 10.00s/it]
    {'eval_loss': 0.417, 'eval_runtime': 44.5, 'epoch': 0.55}
    {'train_runtime': 1810.4, 'train_samples_per_second': 0.8, 'train_loss': 0.4859, 'epoch': 1.0}

The dicts carry no step. When the progress bar moves between every two logged dicts (stdout and stderr
written in order), a dict's step is the bar's count when it was printed; when the dicts come in clumps
(stdout block-buffered apart from the bar's stderr), the step is the dict's position times `logging_steps`
(as the log prints it, else the trainer_state.json beside the log says: discovery hands it as the `state`
of a read from the file's start, else 1). The file decides which at its first logged dict, by what comes next: the
training bar moving (steps from the bar) or another dict (steps by order); until the file says, that dict is
held back (not consumed). With no training bar before it, or one already finished, it is order at once.
"""

from __future__ import annotations

import re

from collector.core.model import Format, ParseResult, RunInfo
from collector.formats._common import complete_lines
from collector.formats._printed import dict_numbers, holds_text, may_be_error, note_error, reported

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# tqdm's bar: ` 10%|█         | 20/181 [03:20<26:49, 10.00s/it]`.
_BAR = re.compile(r"\|\s*(\d+)/(\d+)\s*\[")
_LOGGING_STEPS = re.compile(r"logging_steps\s*[=:]\s*(\d+)")
# The Trainer resuming from a checkpoint: `  Continuing training from global step 1000`.
_RESUMED = re.compile(r"Continuing training from global step (\d+)")
# The Trainer's start-up banner: `  Total optimization steps = 200` (also `200,` with a thousands comma).
_TOTAL_STEPS = re.compile(r"Total optimization steps\s*=\s*([\d,]+)")
TRAIN_KEYS = ("loss", "learning_rate", "grad_norm", "reward")


def parse(data: bytes, first_line: int = 1, *, path: str = "", state: object = None) -> ParseResult:
    """Points from the logged dicts among the complete lines of `data` (see the module docstring for steps).

    Every number in a dict is a point named by its key (quoted numbers, `nan`, `inf`, numpy scalars too); a
    dict with a quoted word for a value (`{'step': 0, 'agent_id': 'market_maker', 'reward': -0.67}`, a record
    the training script printed itself) is not the trainer's and is skipped: neither its numbers nor a step;
    an evaluation dict (`eval_*` keys) is stored at the step of the training log before it; the final
    `train_runtime` dict at the last step, and it sets `info["completed"]`. tqdm bars and other output are
    not bad lines. `info`: `total_steps` and `current_step` from the training bar, `step_source` ("bar" or
    "order"), `completed`, and `error` ({"line", "text", "file"}: a traceback's exception line or a
    launcher's kill message, and `path`) when one came after the last logged dict (None once the run logs
    again), `resumed_from` (the checkpoint step of HF's `Continuing training from global step N`, else None).
    `state` (JSON) carries the bar, the dict count and the decision between reads.
    """
    st = _State(state)
    lines, consumed = complete_lines(data)
    result = ParseResult(consumed=consumed, lines=len(lines))
    pieces = list(_pieces(lines, first_line))
    points = result.points
    for index, (line_no, start, piece) in enumerate(pieces):
        brace = piece.find("{'")
        if not piece.strip():
            st.cleared = True  # tqdm.write clears the bar's line before it prints a message
        for bar in _BAR.finditer(piece if brace < 0 else piece[:brace]):
            _note_bar(int(bar.group(1)), int(bar.group(2)), st)
        if brace < 0:
            st.error = note_error(piece, line_no, st.error)
            if "logging_steps" in piece:
                _note_logging_steps(piece, st)
            elif "Total optimization steps" in piece:
                _note_total_steps(piece, st)
            elif "Continuing training from global step" in piece and (resumed := _RESUMED.search(piece)):
                st.resumed_from = int(resumed.group(1))
            continue
        values = dict_numbers(piece[brace:])
        kind = _kind(values) if not holds_text(piece[brace:]) else None
        if kind == "train":
            if st.mode is None:
                st.mode = _decide(st, piece, pieces[index + 1 :])
                if st.mode is None:
                    # The first logged dict waits until the file shows whether the bar moves with the dicts.
                    result.consumed, result.lines = start, line_no - first_line
                    break
            st.logged += 1
            step = st.step_base + st.logged * st.logging_steps
            if st.mode == "bar" and st.bar is not None:
                step = st.bar if st.last_step is None or st.bar > st.last_step else st.last_step + 1
            st.last_step = step
        elif kind is not None:
            step = st.last_step if st.last_step is not None else (st.bar or 0)
            st.completed = st.completed or kind == "summary"
        else:
            continue
        st.error = None
        for name, value in values.items():
            points.add(step, name, value)
    result.state = st.to_json()
    result.info = {
        "total_steps": st.total,
        "current_step": st.bar if st.total is not None else st.last_step,
        "step_source": st.mode,
        "completed": st.completed,
        "error": reported(st.error, path),
        "resumed_from": st.resumed_from,
    }
    return result


def _pieces(lines: list[bytes], first_line: int):
    """(line number, byte offset of the line, text) of every terminal piece worth a look: a line's pieces
    between carriage returns, as a terminal would show them (tqdm redraws its bar with `\\r`)."""
    offset = 0
    for line_no, raw in enumerate(lines, start=first_line):
        start, offset = offset, offset + len(raw) + 1
        if (
            b"{'" not in raw
            and b"|" not in raw
            and not may_be_error(raw)
            and b"logging_steps" not in raw
            and b"Total optimization steps" not in raw
            and b"Continuing training" not in raw
        ):
            continue
        text = raw.decode("utf-8", errors="replace")
        if "\x1b" in text:
            text = _ANSI.sub("", text)
        for piece in text.split("\r"):
            yield line_no, start, piece


class _State:
    """What a read hands to the next: the bar, the dict count, the decision, the last step."""

    FIELDS = (
        "bar",
        "total",
        "mode",
        "logged",
        "last_step",
        "logging_steps",
        "steps_from",
        "completed",
        "error",
        "resumed_from",
        "cleared",
        "marks",
        "step_base",
    )

    def __init__(self, state: object) -> None:
        saved = state if isinstance(state, dict) else {}
        self.bar: int | None = saved.get("bar")
        self.total: int | None = saved.get("total")
        self.mode: str | None = saved.get("mode")  # "bar" | "order" | None (not decided yet)
        self.logged: int = saved.get("logged", 0)  # training dicts read so far
        self.last_step: int | None = saved.get("last_step")
        self.logging_steps: int = saved.get("logging_steps", 1)
        # where logging_steps came from: "printed", "state" (the trainer_state.json beside the log), "count"
        # (the run's total steps over its logged dicts) or None (not known: 1)
        self.steps_from: str | None = saved.get("steps_from", "state" if "logging_steps" in saved else None)
        self.completed: bool = saved.get("completed", False)
        self.error: dict | None = saved.get("error")  # {"line", "text", "traceback"}
        self.resumed_from: int | None = saved.get("resumed_from")  # the checkpoint step the run resumed from
        self.cleared: bool = saved.get("cleared", False)  # the bar's line was just cleared (tqdm.write)
        # per bar total: {"first", "last": the counts a log was written at, "gaps": {spacing: times}}
        self.marks: dict = saved.get("marks", {})
        self.step_base: int = saved.get("step_base", 0)  # ordered dicts count from this step

    def to_json(self) -> dict:
        return {name: getattr(self, name) for name in self.FIELDS}


def _decide(st: _State, first: str, ahead: list[tuple[int, int, str]]) -> str | None:
    """At the first training dict: "bar" when the training bar moves before the next training dict,
    "order" when another dict comes first (or there is no bar to follow); None while the data does not say."""
    if st.bar is None:
        return "order"  # no training bar: nothing to follow
    if st.total is not None and st.bar >= st.total:
        # the bar finished before any dict: the dicts come at the end, all at once; with no logging_steps
        # known, wait for the end (the summary dict, or an error) to count them
        if st.steps_from is not None:
            return "order"
        return "order" if _count_logging_steps(st, [(0, 0, first), *ahead]) else None
    for _, _, piece in ahead:
        brace = piece.find("{'")
        for bar in _BAR.finditer(piece if brace < 0 else piece[:brace]):
            if int(bar.group(2)) == st.total and int(bar.group(1)) != st.bar:
                return "bar"
        if brace >= 0 and _kind(dict_numbers(piece[brace:])) == "train" and not holds_text(piece[brace:]):
            if st.steps_from is None:
                _spacing_from_marks(st)
            return "order"
    return None


def _note_bar(count: int, total: int, st: _State) -> None:
    # The Trainer prints each log with tqdm.write: the bar's line is cleared and the bar drawn again at the same
    # count. That count is a logging step, in the order the (maybe buffered) dicts come: a mark, per bar total.
    if st.cleared and count == st.bar and total == st.total and not st.logged:
        marks = st.marks.setdefault(str(total), {"first": count, "last": count, "gaps": {}})
        gap = count - marks["last"]
        if gap > 0:
            marks["gaps"][str(gap)] = marks["gaps"].get(str(gap), 0) + 1
            marks["last"] = count
    st.cleared = False
    # The training bar is the one in progress when the first dict is logged; evaluation bars have their own
    # total and are ignored after that.
    if st.logged and st.total is not None and total != st.total:
        return
    st.bar, st.total = count, total


def _spacing_from_marks(st: _State) -> None:
    """Dicts numbered by order, no `logging_steps` known: the training bar's marks (its count each time a log
    was written over it) give it, when three or more marks agree on a spacing; the first mark is the first
    dict's step (a resumed run's too)."""
    marks = st.marks.get(str(st.total))
    if not marks or not marks["gaps"]:
        return
    gap, times = max(marks["gaps"].items(), key=lambda item: (item[1], -int(item[0])))
    if times >= 2 and 2 * times > sum(marks["gaps"].values()):
        st.logging_steps, st.steps_from = int(gap), "bar marks"
        st.step_base = marks["first"] - int(gap)


def _kind(values: dict[str, float]) -> str | None:
    if "train_runtime" in values:
        return "summary"
    if any(key.startswith("eval_") for key in values):
        return "eval"
    if any(key in values for key in TRAIN_KEYS):
        return "train"
    return None


def _note_logging_steps(text: str, st: _State) -> None:
    match = _LOGGING_STEPS.search(text)
    if match and st.logged == 0 and int(match.group(1)) > 0:
        st.logging_steps, st.steps_from = int(match.group(1)), "printed"


def _note_total_steps(text: str, st: _State) -> None:
    # the banner's total stands in for a bar the log does not show (tqdm off); a bar's own total wins
    match = _TOTAL_STEPS.search(text)
    if match and st.total is None and int(match.group(1).replace(",", "") or 0) > 0:
        st.total = int(match.group(1).replace(",", ""))


def _count_logging_steps(st: _State, ahead: list[tuple[int, int, str]]) -> bool:
    """Whether `ahead` (from the first dict on) reaches the end of a run whose bar finished before its first
    dict: the summary dict, or an error line after the dicts. Then its `n` training dicts were logged every
    `logging_steps` of its `total` steps (the Trainer logs at each multiple: total // logging_steps == n); the
    largest such spacing, total // n, puts the last dict nearest the end. None fits, or the dicts' epochs say
    the run resumed part-way (its first dict late in the run): 1, order alone."""
    count, epochs, error = 0, [], None
    for line_no, _, piece in ahead:
        brace = piece.find("{'")
        if brace < 0:
            error = note_error(piece, line_no, error)
            if error is not None and not error.get("ignored"):
                break
            continue
        if holds_text(piece[brace:]):
            continue
        values = dict_numbers(piece[brace:])
        kind = _kind(values)
        if kind == "summary":
            break
        if kind == "train":
            count += 1
            epochs.append(values.get("epoch"))
    else:
        return False
    # a resumed run logs its first dict late (epoch 1.015 of 2): count alone would spread its dicts over the run
    first, last = (epochs[0], epochs[-1]) if epochs else (None, None)
    resumed = first is not None and bool(last) and first / last > 1.5 / count
    spacing = st.total // count if count and st.total else 0
    if spacing > 1 and st.total // spacing == count and not resumed:
        st.logging_steps, st.steps_from = spacing, "count"
    return True


def sniff(head: bytes) -> bool:
    """Whether a console log's first 64 KiB hold an HF Trainer logged dict (`{'loss': ...` and kin)."""
    return any(marker in head for marker in (b"{'loss':", b"{'eval_loss':", b"{'train_runtime':"))


def run_info(info: dict) -> RunInfo:
    """Total steps from the training bar; `completed` as the end the log shows once the final summary dict was
    printed (a status file beside it keeps the last word: the Trainer prints that summary on a stopped run too)."""
    ended = "completed" if info.get("completed") else None
    facts = {
        k: info[k]
        for k in ("current_step", "step_source", "error", "resumed_from")
        if info.get(k) is not None
    }
    return RunInfo(ended=ended, total_steps=info.get("total_steps"), status_info=facts or None)


FORMAT = Format(
    name="hf_console",
    parse=parse,
    sniffed=("*.log", "*.out", "*.txt", "output.log"),
    sniff=sniff,
    run_info=run_info,
    copy=True,
)
