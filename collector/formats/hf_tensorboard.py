"""The HF Trainer's own TensorBoard logging (`<output_dir>/runs/<time_host>/events.out.tfevents.*`), read into
the names its `trainer_state.json` uses, so the two are one series per metric.

The Trainer's TensorBoard callback writes `train/loss`, `train/learning_rate`, `eval/loss` for the history's
`loss`, `learning_rate`, `eval_loss`: `train/X` is `X`, `eval/X` is `eval_X`; other tags are kept. Discovery
gives this format to event files under an HF output folder's `runs/` only (never by name alone): elsewhere a
`train/loss` is the name the trainer chose.
"""

from __future__ import annotations

from collector.core.model import Format, ParseResult
from collector.formats import tensorboard_events


def parse(data: bytes, first_line: int = 1, *, path: str = "", state: object = None) -> ParseResult:
    """`tensorboard_events.parse`, with the HF Trainer's tags renamed to its trainer_state.json names."""
    result = tensorboard_events.parse(data, first_line, path=path, state=state)
    names = result.points.metric
    renamed: dict[str, str] = {}
    for i, name in enumerate(names):
        new = renamed.get(name)
        if new is None:
            new = renamed[name] = hf_name(name)
        names[i] = new
    return result


def hf_name(tag: str) -> str:
    """The trainer_state.json name of an HF Trainer TensorBoard tag (`train/loss` -> `loss`,
    `eval/loss` -> `eval_loss`); other tags unchanged."""
    if tag.startswith("train/"):
        return tag[len("train/") :]
    if tag.startswith("eval/"):
        return "eval_" + tag[len("eval/") :]
    return tag


FORMAT = Format(name="hf_tensorboard", parse=parse, lines=False)
