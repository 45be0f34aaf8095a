"""Run-directory writers: metrics.jsonl, the CSV histories, status.json and run.json.

Each one is a `RunCallback` with one concern. Files that are appended (JSONL, CSV) are opened in append
mode, so a resumed run adds to what the crashed run wrote and never truncates it; their lines go through a
memory buffer written at a bounded interval, at checkpoints, at the end and at exit (trainer/appender.py),
and each line's text is built from pieces encoded once (metric names, the CSV's column order). Whole-file documents
(status.json, run.json) are replaced atomically (write a temporary file, then rename), so a reader never
sees half a document.
"""

from __future__ import annotations

import csv
import json
import os
import platform
import socket
import time
from operator import is_
from pathlib import Path
from typing import Any

from trainer.appender import BufferedAppender
from trainer.callbacks import RunCallback, RunInfo, scalar


def write_json_atomic(path: Path, document: dict[str, Any]) -> None:
    """Replace `path` with `document` in one rename, so readers see the old or the new file, never a mix."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(document, indent=2, default=str) + "\n")
    os.replace(tmp, path)


_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
_KEYS: dict[str, str] = {}  # metric name -> its JSON string and colon, encoded once per name


def _json_key(key: str) -> str:
    text = _KEYS.get(key)
    if text is None:
        text = json.dumps(key) + ":"
        if len(_KEYS) < 100_000:  # names are few; a trainer logging unbounded names must not grow this
            _KEYS[key] = text
    return text


def _json_value(value: Any) -> str:
    if type(value) is float:
        text = repr(value)  # what json.dumps writes for a float
        return _NON_FINITE.get(text, text)
    if type(value) is int:
        return str(value)
    return json.dumps(scalar(value), allow_nan=True, default=str)


class RecordTexts:
    """Each plain number's text of the record last logged, shared by the writers of one run.

    Built once per logged record: the JSONL and CSV writers of one step get the same dict and share the
    float formatting, the larger part of a step's cost. `default_writers` gives its writers one; a writer
    made alone has its own.
    """

    def __init__(self) -> None:
        self._metrics: dict[str, Any] | None = None  # the last record formatted
        self._keys: tuple = ()
        self._values: tuple = ()
        self._texts: dict[str, str | None] = {}

    def of(self, metrics: dict[str, Any]) -> dict[str, str | None]:
        """Each plain number's text as Python writes it (`repr`: nan, inf), None for any other value. Reused
        only for the very same dict holding the very same objects as the last call's."""
        if (
            metrics is self._metrics
            and len(metrics) == len(self._keys)
            and all(map(is_, metrics, self._keys))
            and all(map(is_, metrics.values(), self._values))
        ):
            return self._texts
        texts = {
            key: repr(value) if type(value) is float or type(value) is int else None
            for key, value in metrics.items()
        }
        self._metrics, self._keys, self._values, self._texts = (
            metrics,
            tuple(metrics),
            tuple(metrics.values()),
            texts,
        )
        return texts


def metrics_line(step: int, metrics: dict[str, Any], texts: RecordTexts | None = None) -> str:
    """One line of verl's file-logger format, `{"step":N,"data":{...}}` (what json.dumps would write);
    `texts` shares the numbers' texts with the run's other writers.

    Unlike verl's logger (orjson, which writes NaN as null), non-finite values stay `NaN`/`Infinity`, so
    a NaN loss reaches the monitor as a NaN and not as a missing value.
    """
    parts = []
    for key, text in (texts or RecordTexts()).of(metrics).items():
        value = _NON_FINITE.get(text, text) if text is not None else _json_value(metrics[key])
        parts.append(_json_key(key) + value)
    return '{"step":' + _json_value(step) + ',"data":{' + ",".join(parts) + "}}"


class AppendingWriter(RunCallback):
    """A writer whose file goes through a BufferedAppender (`self.out`): written out at each checkpoint, and
    closed (written, then released) when the run ends in any way."""

    out: BufferedAppender | None = None

    def on_checkpoint_saved(self, step: int, path: str) -> None:
        if self.out is not None:
            self.out.flush()

    def _close(self) -> None:
        if self.out is not None:
            self.out.close()
            self.out = None

    def on_train_end(self, step: int) -> None:
        self._close()

    def on_exception(self, step: int, error: str) -> None:
        self._close()

    def on_stopped(self, step: int, reason: str) -> None:
        self._close()


class MetricsJsonlWriter(AppendingWriter):
    """metrics.jsonl: one line per log call, appended; written at least every FLUSH_EVERY_S (the collector
    tails it live), at each checkpoint and at the end (see trainer/appender.py for what a kill loses)."""

    FLUSH_EVERY_S = 0.2

    def __init__(self, run_dir: Path, texts: RecordTexts | None = None) -> None:
        self.path = run_dir / "metrics.jsonl"
        self.out: BufferedAppender | None = None
        self.texts = texts or RecordTexts()

    def on_train_begin(self, info: RunInfo) -> None:
        self.out = BufferedAppender(self.path, self.FLUSH_EVERY_S)

    def _write(self, step: int, metrics: dict[str, Any]) -> None:
        if self.out is not None:
            self.out.append(metrics_line(step, metrics, self.texts) + "\n")

    def on_step_end(self, step: int, metrics: dict[str, float]) -> None:
        self._write(step, metrics)

    def on_validation_end(self, step: int, metrics: dict[str, float]) -> None:
        self._write(step, metrics)


class CsvHistoryWriter(AppendingWriter):
    """A CSV with a `step` column and one column per metric, one row per logged step, appended.

    `kind` picks which records it takes: "train" (training_history.csv) or "val" (validation_history.csv).
    A metric that first appears mid-run widens the header; the file is then rewritten once, atomically,
    with the earlier rows kept (empty cells for the new column). Rows are written at least every
    FLUSH_EVERY_S, at each checkpoint and at the end (see trainer/appender.py).
    """

    FLUSH_EVERY_S = 1.0

    def __init__(self, path: Path, kind: str, texts: RecordTexts | None = None) -> None:
        self.path = path
        self.kind = kind
        self.texts = texts or RecordTexts()
        self.columns: list[str] = []
        self._known: set[str] = set()
        self.out: BufferedAppender | None = None

    def on_train_begin(self, info: RunInfo) -> None:
        if self.path.exists() and self.path.stat().st_size > 0:
            with open(self.path, newline="") as fp:
                self.columns = next(csv.reader(fp), [])
        self._known = set(self.columns)

    def _widen(self, new_columns: list[str]) -> None:
        if self.out is not None:
            self.out.close()  # its rows go to the file before it is rewritten; the rename ends its handle
            self.out = None
        rows: list[dict[str, str]] = []
        if self.path.exists():
            with open(self.path, newline="") as fp:
                rows = list(csv.DictReader(fp))
        self.columns = self.columns or ["step"]
        self.columns += [c for c in new_columns if c not in self.columns]
        self._known = set(self.columns)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        with open(tmp, "w", newline="") as fp:
            writer = csv.DictWriter(fp, fieldnames=self.columns)
            writer.writeheader()
            writer.writerows(rows)
        os.replace(tmp, self.path)

    def _append(self, step: int, metrics: dict[str, Any]) -> None:
        if not self.columns or not metrics.keys() <= self._known:
            self._widen([key for key in metrics if key not in self._known])
        if self.out is None:
            self.out = BufferedAppender(self.path, self.FLUSH_EVERY_S)
        texts = self.texts.of(metrics)
        cells = [_csv_cell(step)]
        for column in self.columns[1:]:
            cells.append(texts.get(column) or _csv_cell(metrics.get(column)))
        self.out.append(",".join(cells) + "\r\n")  # the csv module's own line ending, as the header has

    def on_step_end(self, step: int, metrics: dict[str, float]) -> None:
        if self.kind == "train":
            self._append(step, metrics)

    def on_validation_end(self, step: int, metrics: dict[str, float]) -> None:
        if self.kind == "val":
            self._append(step, metrics)


def _csv_cell(value: Any) -> str:
    """What csv.writer writes for one value (float text that float() reads back: nan, inf, -inf)."""
    if type(value) is float or type(value) is int:
        return repr(value)
    if value is None:
        return ""
    value = scalar(value)
    if isinstance(value, float | int):  # bool too: "True", as csv.writer writes it
        return repr(value) if not isinstance(value, bool) else str(value)
    text = str(value)
    if any(c in text for c in ',"\r\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


class StatusWriter(RunCallback):
    """status.json: state (running|completed|failed|stopped), step, total_steps, pid, host, updated_at (epoch s).

    Rewritten at every change of state and checkpoint, and at most once a second for the step count: an
    atomic rewrite costs about a millisecond, more than all the other writers of a step together.
    """

    STEP_EVERY_S = 1.0

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / "status.json"
        self.doc: dict[str, Any] = {}
        self._saved_at = -float("inf")

    def _save(self, **changes: Any) -> None:
        self.doc.update(changes, updated_at=time.time())
        write_json_atomic(self.path, self.doc)
        self._saved_at = time.monotonic()

    def on_train_begin(self, info: RunInfo) -> None:
        self.doc = {
            "state": "running",
            "step": info.resume_step,
            "total_steps": info.total_steps,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started_at": time.time(),
            "resumed_from": info.resume_step or None,
            "last_checkpoint_step": info.resume_step or None,
            "error": None,
        }
        self._save()

    def on_step_end(self, step: int, metrics: dict[str, float]) -> None:
        if time.monotonic() - self._saved_at >= self.STEP_EVERY_S:
            self._save(step=step)
        else:
            self.doc["step"] = step  # written with the next save

    def on_checkpoint_saved(self, step: int, path: str) -> None:
        self._save(last_checkpoint_step=step)

    def on_train_end(self, step: int) -> None:
        self._save(state="completed", step=step, finished_at=time.time())

    def on_exception(self, step: int, error: str) -> None:
        self._save(state="failed", step=step, error=error, finished_at=time.time())

    def on_stopped(self, step: int, reason: str) -> None:
        self._save(state="stopped", step=step, stop_reason=reason, finished_at=time.time())


class RunJsonWriter(RunCallback):
    """run.json: trainer, preset, resolved config, start time, versions, injected faults, schedule facts.

    Written once per start. A resumed run keeps the first start's `started_at` and adds itself to
    `resumes`, so the document still describes the whole run.
    """

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / "run.json"

    def on_train_begin(self, info: RunInfo) -> None:
        previous: dict[str, Any] = {}
        if self.path.exists():
            try:
                previous = json.loads(self.path.read_text())
            except (OSError, ValueError):
                previous = {}
        now = time.time()
        optim = info.config.get("optim")
        optim = optim if isinstance(optim, dict) else {}  # (HF's `optim` is the optimizer's name)
        doc = {
            "trainer": info.trainer,
            "preset": info.preset,
            "started_at": previous.get("started_at", now),
            "total_steps": info.total_steps,
            "lr_scheduler": optim.get("lr_scheduler_type"),
            "warmup_ratio": optim.get("lr_warmup_steps_ratio"),
            # Faults of every start of this run (a resume may run without the fault that preceded it).
            "injected": previous.get("injected", [])
            + [f for f in info.injected if f not in previous.get("injected", [])],
            "versions": versions(),
            "host": socket.gethostname(),
            "resumes": previous.get("resumes", []),
            **info.extra,
            "config": info.config,
        }
        if info.resume_step:
            doc["resumes"] = [*doc["resumes"], {"step": info.resume_step, "at": now}]
        write_json_atomic(self.path, doc)


def versions() -> dict[str, str]:
    """Versions of what produced the run (python, torch, verl, transformers)."""
    found = {"python": platform.python_version()}
    for name in ("torch", "verl", "transformers", "tokenizers"):
        try:
            module = __import__(name)
            found[name] = str(getattr(module, "__version__", "unknown"))
        except ImportError:
            continue
    return found


def default_writers(run_dir: Path, wandb: bool = False) -> list[RunCallback]:
    """The standard set for a run directory; `wandb=True` adds the W&B mirror (offline unless told)."""
    texts = RecordTexts()  # one step's numbers formatted once for all three
    writers: list[RunCallback] = [
        RunJsonWriter(run_dir),
        MetricsJsonlWriter(run_dir, texts),
        CsvHistoryWriter(run_dir / "training_history.csv", "train", texts),
        CsvHistoryWriter(run_dir / "validation_history.csv", "val", texts),
    ]
    if wandb:
        from trainer.wandb_mirror import WandbMirror

        writers.append(WandbMirror(run_dir))
    # Last, so status.json never names a step whose metrics are not on disk yet.
    writers.append(StatusWriter(run_dir))
    return writers
