"""Reading what Python printed: a dict's `'key': value` items, numbers as numpy/torch print them, and the
errors (tracebacks, launcher kill messages) a console log ends with. Pure text in, values out."""

from __future__ import annotations

import re

from collector.formats._common import bad_text

# One `'key': value` item of a printed dict; the value may be quoted (TRL prints some as strings, and
# pprint splits long dicts into quoted fragments).
_ITEM = re.compile(r"'([^']+)':\s*'?([^,'{}]+?)'?\s*(?=[,}])")
# One `'key': 'quoted value'` item: its value.
_QUOTED_ITEM = re.compile(r"'[^']+':\s*'([^']*)'\s*(?=[,}])")
# A numpy or torch scalar as Python prints it: np.float64(1.5), np.int32(2), tensor(2., device='cuda:0').
_WRAPPED = re.compile(r"^[A-Za-z_][\w.]*\(([^(),]+)(?:,.*)?\)$")
TRACEBACK = "Traceback (most recent call last)"
IGNORED = "Exception ignored in"
# A line that ends a job on its own: launcher kill messages, as DeepSpeed and torchrun print them; Hydra's and
# swanlab's words for a job that raised (the traceback after them names the exception).
_FATAL = re.compile(
    r"(received SIG[A-Z]+|got signal|Killed|CUDA out of memory|exits with return code = [1-9]"
    r"|^Error executing job with overrides|Error happened while training)"
)
# A tqdm bar that a message was printed right after, on the same terminal line.
_BAR_PREFIX = re.compile(r"^\s*\d+%\|[^|]*\|[^\[]*\[[^\]]*\]\s*")
_NEAR = 5  # lines: a traceback this close after a fatal line explains it (it does not start a new error)
_EXCEPTION_LINE = re.compile(r"^\s*([A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b.*)$")
# A traceback's frame: the last one before an exception line is where it was raised.
_FRAME = re.compile(r'^File "([^"]+)", line (\d+), in (\S+)')
# An exception line that is the exception's name alone (`NotImplementedError`): it says what only with where.
_BARE = re.compile(r"^[A-Za-z_][\w.]*(\(\))?$")
# Python's words between the exceptions of a chain: the one above is the cause (or the first failure) of the
# one below, which is often only its consequence (a half-written file, a wrapper).
_CHAINED = (
    "During handling of the above exception, another exception occurred",
    "The above exception was the direct cause of the following exception",
)


def dict_numbers(text: str) -> dict[str, float]:
    """Every `'key': number` item of a printed dict (the text from its `{`), in order; other items skipped."""
    numbers: dict[str, float] = {}
    for match in _ITEM.finditer(text):
        value = number(match.group(2))
        if value is not None:
            numbers[match.group(1)] = value
    return numbers


def holds_text(text: str) -> bool:
    """Whether a printed dict (the text from its `{`) has an item whose value is quoted text that is not a
    number (`'agent_id': 'market_maker'`): a program's own record, not a trainer's metrics (those print numbers,
    some quoted, never words)."""
    return any(number(value) is None for value in _QUOTED_ITEM.findall(text))


def number(text: str) -> float | None:
    """A printed number: `1e-05`, `nan`, `-inf`, or a numpy/torch scalar's repr (`np.float32(1.5)`)."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    match = _WRAPPED.match(text)
    if match is None:
        return None
    try:
        return float(match.group(1))
    except ValueError:
        return None


def may_be_error(raw: bytes) -> bool:
    """A cheap test on a raw line before `note_error` looks at it."""
    return any(
        word in raw
        for word in (
            b"Error", b"Exception", b"Interrupt", b"Exit", b"Traceback", b"SIG", b"signal", b"Killed", b"memory",
            b"above exception", b'File "',
        )
    )  # fmt: skip


def note_error(text: str, line_no: int, error: dict | None) -> dict | None:
    """The error a console log ends with so far, given its next line: a traceback (named by its last
    exception line) or a fatal line (a launcher's kill message, Hydra's `Error executing job`); `error`
    unchanged for any other line.

    The error is `{"line", "text", "traceback", "ignored"}` and, for a chain of exceptions (`During handling of
    the above exception, another exception occurred`, `The above exception was the direct cause of ...`),
    `cause`: `{"line", "text"}` of the chain's first exception line; `ignored` marks a traceback Python printed under
    `Exception ignored in ...` (a shutdown-time complaint, not the job failing). Such a complaint after a
    real error never replaces it (`skip` is set while its traceback is read). A traceback right after a fatal
    line keeps the fatal line until its own exception line comes. The caller drops the error when the run
    logs metrics again, and reports it only when not `ignored` (see `reported`).
    """
    text = _BAR_PREFIX.sub("", text.strip())
    if error is not None and error.get("skip"):
        # inside the traceback of a shutdown complaint that came after the real error: its lines are not ours
        if _EXCEPTION_LINE.match(text):
            return {k: v for k, v in error.items() if k != "skip"}
        if not _FATAL.search(text):
            return error
        error = {k: v for k, v in error.items() if k != "skip"}
    in_traceback = error is not None and error["traceback"]
    ignored = error is not None and error.get("ignored", False)
    if text.startswith(IGNORED):
        if error is not None and not ignored:
            return {**error, "skip": True}
        return {"line": line_no, "text": bad_text(text), "traceback": True, "ignored": True}
    if text.startswith(TRACEBACK):
        # A traceback right after `Exception ignored in` belongs to it.
        if ignored and line_no - error["line"] <= 2:
            return {**error, "line": line_no, "ignored": True}
        if error is not None and not in_traceback and line_no - error["line"] <= _NEAR:
            return {**error, "traceback": True}
        return {"line": line_no, "text": bad_text(text), "traceback": True, "ignored": False}
    if in_traceback and text.startswith(_CHAINED):
        if "cause" not in error and _EXCEPTION_LINE.match(error["text"]):
            return {**error, "cause": {"line": error["line"], "text": error["text"]}}
        return error
    if in_traceback and (frame := _FRAME.match(text)):
        return {**error, "frame": {"file": frame[1], "line": int(frame[2]), "function": frame[3]}}
    if in_traceback and _EXCEPTION_LINE.match(text):
        chained = {"cause": error["cause"]} if "cause" in error else {}
        # the frame above a bare exception is where it was raised (its message would have said what)
        raised = {"raised_in": error["frame"]} if "frame" in error and _BARE.match(text) else {}
        return {
            "line": line_no,
            "text": bad_text(text),
            "traceback": True,
            "ignored": ignored,
            **chained,
            **raised,
        }
    if _FATAL.search(text):
        return {"line": line_no, "text": bad_text(text), "traceback": False, "ignored": False}
    return error


def reported(error: dict | None, path: str = "") -> dict | None:
    """The error as a run fact (`{"line", "text", "file"}`), or None when there is none or it was ignored.
    The last exception of a chain is quoted with the first one, which caused it: `text` reads `<last> (raised
    while handling line N: <first>)`, and `cause` is `{"line", "text"}` of the first. An exception quoted by
    its name alone (`NotImplementedError`) carries `raised_in`: `{"file", "line", "function"}` of the
    traceback's frame that raised it."""
    if error is None or error.get("ignored"):
        return None
    raised = {"raised_in": dict(error["raised_in"])} if "raised_in" in error else {}
    cause = error.get("cause")
    if cause is None:
        return {"line": error["line"], "text": error["text"], "file": path, **raised}
    text = f"{error['text']} (raised while handling line {cause['line']}: {cause['text']})"
    return {"line": error["line"], "text": text, "file": path, "cause": dict(cause), **raised}
