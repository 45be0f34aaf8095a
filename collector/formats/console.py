"""verl console logs: `step:N - key:value - key:value` lines among any other output of a training job.

Lines without such a record (model loading, warnings, progress bars) are ignored, not bad: a console log is
mostly other text.
"""

from __future__ import annotations

import re

from collector.core.model import BadLine, Format, ParseResult, RunInfo
from collector.formats._common import STEP_MAX, bad_text, complete_lines
from collector.formats._printed import dict_numbers, may_be_error, note_error, number, reported

# A record somewhere in a file's head: what makes a `.txt` file a console log.
_HEAD_RECORD = re.compile(rb"step:\s*\d+\s+-\s+[^\s:]+:")
# Colors and cursor moves (ESC [ ... letter) that terminals, Ray and rich put around text.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# "step:12 - " at the start of the line or after a separator (prefixes like "(TaskRunner pid=1) " are common).
_RECORD = re.compile(r"(?:^|(?<=[\s\]\)|>:]))step:\s*(\d+)\s+-\s+(.*)$")
_ITEM_SEPARATOR = re.compile(r"\s+-\s+")
# verl's validation dicts, printed with pprint before and after training.
_VALIDATION = re.compile(r"(?:Initial|Final) validation metrics: \{")
# verl's training bar: `Training Progress:  17%|█▋  | 2/12 [22:35<1:51:07, 666.75s/it]`.
_PROGRESS = re.compile(r"Training Progress:.*?\|\s*(\d+)/(\d+)\s*\[")
# Ray's prefix on a worker's output line: `(TaskRunner pid=44095) `.
_RAY_PREFIX = re.compile(r"^\s*\(\w+ pid=\d+(?:, ip=[\d.]+)?\)\s?")
# A pprint string fragment that opens with its own quote: `"np.float64(0.5), 'key': "` or `'np.float64(6.97)}'`.
_FRAGMENT = re.compile(r"""^["'](np\.|tensor\(|[-\d.]|'|nan|inf|[A-Za-z_]\w*\()""")
_MAX_DICT_LINES = 200
# verl's save and test frequencies as it prints them: the config dump at start (pprint: `'save_freq': 150,`)
# and Hydra overrides (`trainer.save_freq=150`, echoed by launch scripts and by `Error executing job`).
_SETTING = re.compile(r"""(?:'|\btrainer\.)(save_freq|test_freq)(?:'\s*:\s*|=)(-?\d{1,12})\b""")
# and where it saves (`'default_local_dir': '/ckpt/exp',`, `trainer.default_local_dir=/ckpt/exp`; not an unresolved
# `${...}`): a resume command names the folder
_SAVE_DIR = re.compile(
    r"""(?:'|\btrainer\.)default_local_dir(?:'\s*:\s*'|=)([^'"\s,\]}$]+)(?=['"\s,\]}]|$)"""
)


def parse(data: bytes, first_line: int = 1, *, path: str = "", state: object = None) -> ParseResult:
    """Points from the `step:N - key:value - ...` records among the complete lines of `data`, and from verl's
    `Initial validation metrics: {...}` (at the step before training: the last step seen, else 0) and
    `Final validation metrics: {...}` (at the last step seen) dicts, which pprint may spread over lines.

    Promises: only complete lines are consumed (and a validation dict only once its closing `}` is there);
    ANSI color codes are removed first; a carriage return splits a line into the pieces a terminal would
    show (progress bars), each read on its own; values in e-notation, `nan`, `inf`, `-inf` and numpy/torch
    scalars are read as floats; items whose value is not a number are skipped. A line that holds `step:` but
    is not UTF-8 is reported in `bad`; other undecodable lines are ignored like any non-record output.
    `info`: `total_steps` and `current_step` from verl's `Training Progress: N/M` bar, `completed` once the
    `Final validation metrics` dict (verl prints it when training ends) was read, `error` as in `hf_console`
    (a traceback or kill message after the last record, with `file`: `path`). `state` carries the last step,
    the bar, the completion and the error between reads.
    """
    saved = state if isinstance(state, dict) else {}
    last_step, total, current = saved.get("last_step"), saved.get("total"), saved.get("current")
    error = saved.get("error")
    completed = saved.get("completed", False)
    settings = dict(saved.get("settings") or {})
    lines, consumed = complete_lines(data)
    result = ParseResult(consumed=consumed, lines=len(lines))
    points = result.points
    line_no = first_line - 1
    offset = 0
    index = 0
    while index < len(lines):
        raw = lines[index]
        index += 1
        line_no += 1
        start, offset = offset, offset + len(raw) + 1
        wanted = b"step:" in raw or b"validation metrics" in raw or b"Training Progress" in raw
        if (b"_freq" in raw or b"default_local_dir" in raw) and not wanted:
            _note_settings(raw.decode("utf-8", errors="replace"), settings)
        if not wanted:
            if may_be_error(raw):
                error = note_error(raw.decode("utf-8", errors="replace"), line_no, error)
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            result.bad.append(BadLine(line_no, f"non-UTF-8 bytes at column {err.start + 1}", bad_text(raw)))
            continue
        if "\x1b" in text:
            text = _ANSI.sub("", text)
        if (found := _VALIDATION.search(text)) is not None:
            # The dict may go on over the next lines (pprint): gather them up to its closing brace.
            body, taken = _dict_text(text[found.end() - 1 :], lines[index:])
            if body is None:
                result.consumed, result.lines = start, line_no - first_line
                break
            index, line_no = index + taken, line_no + taken
            offset += sum(len(lines[i]) + 1 for i in range(index - taken, index))
            step = 0 if last_step is None else last_step
            for name, value in dict_numbers(body).items():
                points.add(step, name, value)
            error = None
            completed = completed or found.group(0).startswith("Final")
            continue
        for piece in text.split("\r"):
            if (bar := _PROGRESS.search(piece)) is not None:
                current, total = int(bar.group(1)), int(bar.group(2))
            match = _RECORD.search(piece.rstrip())
            if match is None:
                continue
            digits = match.group(1)
            step = int(digits) if len(digits) <= 19 else STEP_MAX + 1  # (no 5,000-digit int() either)
            if step > STEP_MAX:
                reason = (
                    f"step {digits[:40]}{'...' if len(digits) > 40 else ''} is beyond the 64-bit step range"
                )
                result.bad.append(BadLine(line_no, reason, bad_text(piece)))
                continue
            last_step, error = step, None
            for item in _ITEM_SEPARATOR.split(match.group(2)):
                name, sep, raw_value = item.partition(":")
                name = name.strip()
                if not sep or not name:
                    continue
                value = number(raw_value)
                if value is not None:
                    points.add(step, name, value)
    result.state = {
        "last_step": last_step,
        "total": total,
        "current": current,
        "error": error,
        "completed": completed,
        "settings": settings,
    }
    result.info = {
        "total_steps": total,
        "current_step": current if current is not None else last_step,
        "completed": completed,
        "error": reported(error, path),
        "settings": settings,
    }
    return result


def _note_settings(text: str, settings: dict) -> None:
    """verl's `save_freq` / `test_freq` / `default_local_dir` from a config or override line into `settings`;
    the first value seen of each stays (the config dump comes before any later mention)."""
    for name, value in _SETTING.findall(text):
        settings.setdefault(name, int(value))
    for folder in _SAVE_DIR.findall(text):
        settings.setdefault("default_local_dir", folder)


def _dict_text(first: str, following: list[bytes]) -> tuple[str | None, int]:
    """A printed dict starting at `first`'s `{`, with as many of the `following` lines as it spans, each
    without the Ray prefix and pprint's string quotes; (None, 0) while its end is not there yet."""
    parts = [_unquoted(first)]
    depth = first.count("{") - first.count("}")
    taken = 0
    while depth > 0:
        if taken >= len(following):
            return None, 0
        if taken >= _MAX_DICT_LINES:
            break  # a brace that never closes: read what there is rather than hold the file forever
        line = _RAY_PREFIX.sub("", _ANSI.sub("", following[taken].decode("utf-8", errors="replace")))
        taken += 1
        parts.append(_unquoted(line))
        depth += line.count("{") - line.count("}")
    return "".join(parts), taken


def _unquoted(line: str) -> str:
    """One line of a dict as pprint splits a long repr: a string literal (`"...'key': "`), maybe opening or
    closing the call's parentheses; its text without the quotes."""
    line = line.strip().removeprefix("(").strip()
    if line.endswith(")") and line[-2:-1] in ("'", '"'):
        line = line[:-1]
    if line[:1] in ("'", '"') and not line.startswith(("'", '"'), 1) and _FRAGMENT.match(line):
        line = line[1:]
    if line[-1:] in ("'", '"') and not line.endswith("}"):
        line = line[:-1]
    return line


def looks_like_console(head: bytes) -> bool:
    """Whether a file's first bytes hold a `step:N - name:` record."""
    return _HEAD_RECORD.search(head) is not None


def run_info(info: dict) -> RunInfo:
    """Total steps from verl's training bar; `completed` as the end the log shows once verl printed its final
    validation (a status file beside it keeps the last word); the step the
    bar shows and the error the log ends with, as facts (a run whose log ends in an error is `failed`: the
    API reads `status_info.error`, which a later record clears); the `trainer.save_freq` / `test_freq` the log
    printed, merged into the run's config (`config_part`) where run settings are read from."""
    ended = "completed" if info.get("completed") else None
    facts = {k: info[k] for k in ("current_step", "error") if info.get(k) is not None}
    settings = info.get("settings") or None
    return RunInfo(
        ended=ended,
        total_steps=info.get("total_steps"),
        status_info=facts or None,
        config_part={"trainer": dict(settings)} if settings else None,
    )


FORMAT = Format(
    name="console",
    parse=parse,
    names=("*.log", "*.out"),
    sniffed=("*.txt",),
    sniff=looks_like_console,
    run_info=run_info,
    copy=True,
)
