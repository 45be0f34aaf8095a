"""torchtune's metric log (`metric_logger: torchtune.training.metric_logging.DiskLogger`): `log_<unix time>.txt`
in the recipe's `log_dir` (its configs put it in `${output_dir}/logs`), one line per logging step.

`log_dict` writes `Step 12 | loss:1.234 lr:2e-05 tokens_per_second_per_gpu:1530.2 ` (each item followed by a
space), `log` writes `Step 12 | loss:1.234`. Values are written with `str()`: floats, `nan`, and torch tensors
as torch prints them (`grad_norm:tensor(0.8120, device='cuda:0')`, a space inside), which is why items are
read as `name:value` pairs rather than split on spaces. The file holds nothing else (no times, no headers).
"""

from __future__ import annotations

import re

from collector.core.model import BadLine, Format, ParseResult
from collector.formats._common import STEP_MAX, bad_text, complete_lines
from collector.formats._printed import number

# A record: `Step N | ` and its items (the DiskLogger's own spacing; torchtune's docs align it with two).
_RECORD = re.compile(r"^Step\s+(\d+)\s*\|(.*)$")
# One `name:value` item; a tensor's value runs to its closing parenthesis, spaces and colons included.
_ITEM = re.compile(r"\s*([^\s:]+):(tensor\([^)]*\)|\S*)")
# A record first in a file's head: what makes a `.txt` file a torchtune log (the DiskLogger's file starts with
# one; torchtune's console output, which holds the same records, starts with other text).
_HEAD_RECORD = re.compile(rb"\A\s*Step\s+\d+\s*\|\s*[^\s:]+:")


def parse(data: bytes, first_line: int = 1, *, path: str = "", state: object = None) -> ParseResult:
    """Points from the complete `Step N | name:value ...` lines of `data`, each at its line's step.

    Values are read as Python prints them (e-notation, `nan`, `inf`, a torch or numpy scalar such as
    `tensor(0.8120, device='cuda:0')`). Every line that is not such a record (other text, bytes that are
    not UTF-8, a step beyond the 64-bit range, an item that is not `name:value`) is reported in `bad` with
    its 1-based line number; an item whose value is not a number is reported with its line too, and the
    line's other items are kept. Blank lines are ignored. `path` and `state` are unused: the format needs no state between reads.
    """
    lines, consumed = complete_lines(data)
    result = ParseResult(consumed=consumed, lines=len(lines))
    line_no = first_line - 1
    for raw in lines:
        line_no += 1
        try:
            text = raw.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError as err:
            result.bad.append(BadLine(line_no, f"not UTF-8 text (byte {err.start})", bad_text(raw)))
            continue
        if not text.strip():
            continue
        record = _RECORD.match(text)
        if record is None:
            result.bad.append(BadLine(line_no, "not a torchtune `Step N | name:value` record", bad_text(raw)))
            continue
        read_record(record, line_no, raw, result)
    return result


def read_record(record: re.Match, line_no: int, raw: bytes | str, result: ParseResult) -> None:
    """Adds the points of one record (`record`: its step digits and the text after `|`, as `_RECORD` finds
    them) to `result`, or reports it in `result.bad` with `line_no` (a step beyond the 64-bit range, text
    that is not `name:value` items; values that are not numbers, the line's other values kept)."""
    digits = record.group(1)
    if len(digits) > 19 or int(digits) > STEP_MAX:
        result.bad.append(BadLine(line_no, f"step {digits[:30]} is beyond the 64-bit range", bad_text(raw)))
        return
    step = int(digits)
    items, rest = items_of(record.group(2))
    if rest:
        result.bad.append(BadLine(line_no, f"not a `name:value` item: {rest[:60]!r}", bad_text(raw)))
        return
    not_numbers = []
    for name, value in items:
        found = number(value)
        if found is None:
            not_numbers.append(f"{name}:{value[:40]}")
        else:
            result.points.add(step, name, found)
    if not_numbers:
        reason = f"not a number: {', '.join(not_numbers)} (the line's other values were read)"
        result.bad.append(BadLine(line_no, reason, bad_text(raw)))


def items_of(text: str) -> tuple[list[tuple[str, str]], str]:
    """The `name:value` items of a record's text after `|`, and what is left over that is not one ("" when
    the whole text is items)."""
    items, at = [], 0
    while (found := _ITEM.match(text, at)) is not None and found.end() > at:
        items.append((found.group(1), found.group(2)))
        at = found.end()
    return items, text[at:].strip()


def sniff(head: bytes) -> bool:
    """Whether a `.txt` file starts with a torchtune `Step N | name:value` record (blank lines aside)."""
    return _HEAD_RECORD.match(head) is not None


# A DiskLogger opens a new `log_<unix time>.txt` each time a recipe starts (a rerun or a resume into the same
# output_dir): the files of one logs folder are one run's lives, not runs gathered side by side.
FORMAT = Format(name="torchtune_log", parse=parse, sniffed=("*.txt",), sniff=sniff, lives=("log_[0-9]*.txt",))
