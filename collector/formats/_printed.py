"""Reading what Python printed: a dict's `'key': value` items, numbers as numpy/torch print them, and the
errors (tracebacks, launcher kill messages) a console log ends with. Pure text in, values out."""

from __future__ import annotations

import re

from collector.formats._common import bad_text

# One `'key': value` item of a printed dict; the value may be quoted (TRL prints some as strings, and
# pprint splits long dicts into quoted fragments).
_ITEM = re.compile(r"'([^']+)':\s*'?([^,'{}]+?)'?\s*(?=[,}])")
# A numpy or torch scalar as Python prints it: np.float64(1.5), np.int32(2), tensor(2., device='cuda:0').
_WRAPPED = re.compile(r"^[A-Za-z_][\w.]*\(([^(),]+)(?:,.*)?\)$")
TRACEBACK = "Traceback (most recent call last)"
# A line that ends a job on its own: launcher kill messages, as DeepSpeed and torchrun print them.
_FATAL = re.compile(
    r"(received SIG[A-Z]+|got signal|Killed|CUDA out of memory|exits with return code = [1-9])"
)
_EXCEPTION_LINE = re.compile(r"^\s*([A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b.*)$")


def dict_numbers(text: str) -> dict[str, float]:
    """Every `'key': number` item of a printed dict (the text from its `{`), in order; other items skipped."""
    numbers: dict[str, float] = {}
    for match in _ITEM.finditer(text):
        value = number(match.group(2))
        if value is not None:
            numbers[match.group(1)] = value
    return numbers


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
    return b"Error" in raw or b"Traceback" in raw or b"SIG" in raw or b"signal" in raw or b"Killed" in raw


def note_error(text: str, line_no: int, error: dict | None) -> dict | None:
    """The error a console log ends with so far, given its next line: a traceback (named by its last
    exception line) or a launcher's kill message; `error` unchanged for any other line.

    The error is `{"line", "text", "traceback"}`; the caller drops it when the run logs metrics again.
    """
    text = text.strip()
    in_traceback = error is not None and error["traceback"]
    if text.startswith(TRACEBACK) or (in_traceback and _EXCEPTION_LINE.match(text)):
        return {"line": line_no, "text": bad_text(text), "traceback": True}
    if _FATAL.search(text):
        return {"line": line_no, "text": bad_text(text), "traceback": False}
    return error
