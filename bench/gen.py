"""The benchmark's input data: one synthetic verl SFT history, the same for every script and every peer.

A history is a pure function of (steps, seed, val_every): a decaying loss, a grad norm near 1, a warm-up
plus cosine learning rate and a step time near 0.11 s, with five planted grad-norm spikes and one NaN
loss at fixed fractions of the run, so every script can check that the trouble is still visible after
the data went through a store. The writers at the bottom cache files in bench/out/data, keyed by those
parameters, because a 1M-step file takes seconds to write and the TensorBoard copy minutes.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
# Figures, databases and work folders; RUNWATCH_BENCH_OUT moves them (two people benchmarking in one
# checkout would overwrite each other's JSON). Generated inputs stay in one shared cache either way.
OUT = Path(os.environ.get("RUNWATCH_BENCH_OUT") or BENCH / "out")
DATA = BENCH / "out" / "data"

TRAIN_METRICS = ("train/loss", "train/grad_norm", "train/lr", "train/time(s)")
VAL_METRIC = "val/loss"
# Fractions of the run where trouble is planted; odd fractions so they do not sit on bucket edges.
SPIKE_FRACTIONS = (0.137, 0.311, 0.523, 0.707, 0.911)
NAN_FRACTION = 0.613
# Normal grad norms stay below ~1.6; a spike is an order of magnitude above that.
SPIKE_VALUES = (25.0, 30.0, 35.0, 40.0, 45.0)
RUN_NAME = "bench-run"


@dataclass(frozen=True)
class History:
    """Where the trouble sits in a generated history, and how many points it holds."""

    steps: int
    seed: int
    val_every: int
    spike_steps: tuple[int, ...]
    spike_values: tuple[float, ...]
    nan_step: int

    @property
    def key(self) -> str:
        return f"verl-{self.steps}-s{self.seed}-v{self.val_every}"

    @property
    def val_points(self) -> int:
        return self.steps // self.val_every if self.val_every else 0

    @property
    def points(self) -> int:
        """Every (metric, step) point in the file, NaN included."""
        return len(TRAIN_METRICS) * self.steps + self.val_points


def history(steps: int, seed: int = 0, val_every: int = 1000) -> History:
    """The trouble plan for a run of `steps` steps (steps count from 1)."""
    if steps < 100:
        raise ValueError(f"steps={steps}: a history needs at least 100 steps to plant its trouble apart")
    spikes = tuple(max(2, int(steps * f)) for f in SPIKE_FRACTIONS)
    return History(steps, seed, val_every, spikes, SPIKE_VALUES, max(2, int(steps * NAN_FRACTION)))


def train_columns(h: History, start: int = 1, stop: int | None = None) -> dict[str, np.ndarray]:
    """The training metrics for steps start..stop-1 (all steps by default), one array per metric.

    Any slice holds the same values as the whole run; the planted spikes and NaN are set wherever they
    fall inside the slice.
    """
    stop = h.steps + 1 if stop is None else stop
    step = np.arange(start, stop, dtype=np.int64)
    noise = _noise(h.seed, start, stop)
    frac = step / h.steps
    loss = 0.6 + 5.0 * np.exp(-6.0 * frac) + 0.05 * noise[0]
    grad = np.clip(1.0 + 0.1 * noise[1], 0.5, 1.6)
    warm = max(1, h.steps // 100)
    lr = np.where(step < warm, 1e-4 * step / warm, 1e-4 * 0.5 * (1 + np.cos(math.pi * frac)))
    secs = 0.11 + 0.005 * np.abs(noise[2])
    for s, v in zip(h.spike_steps, h.spike_values, strict=True):
        if start <= s < stop:
            grad[s - start] = v
    if start <= h.nan_step < stop:
        loss[h.nan_step - start] = np.nan
    return {"step": step, "train/loss": loss, "train/grad_norm": grad, "train/lr": lr, "train/time(s)": secs}


_BLOCK = 65_536


def _noise(seed: int, start: int, stop: int) -> np.ndarray:
    """Standard normal noise, 3 rows, for steps start..stop-1: the same values however a run is sliced."""
    first, last = (start - 1) // _BLOCK, (stop - 2) // _BLOCK
    blocks = [np.random.default_rng([seed, b]).standard_normal((3, _BLOCK)) for b in range(first, last + 1)]
    joined = np.concatenate(blocks, axis=1)
    offset = first * _BLOCK + 1
    return joined[:, start - offset : stop - offset]


def val_loss(h: History, step: int) -> float:
    """The validation loss logged at `step` (a multiple of val_every)."""
    return 0.7 + 5.0 * math.exp(-6.0 * step / h.steps)


def _num(x: float) -> str:
    # Python's json writes non-finite floats as bare NaN/Infinity, and so does verl's file logger.
    return (
        repr(x) if math.isfinite(x) else ("NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity"))
    )


def verl_lines(h: History, start: int = 1, stop: int | None = None) -> Iterator[str]:
    """verl file-logger lines for steps start..stop-1, a `val/loss` record after every val_every-th step."""
    cols = train_columns(h, start, stop)
    steps = cols["step"].tolist()
    loss, grad = cols["train/loss"].tolist(), cols["train/grad_norm"].tolist()
    lr, secs = cols["train/lr"].tolist(), cols["train/time(s)"].tolist()
    for i, s in enumerate(steps):
        yield (
            f'{{"step":{s},"data":{{"train/loss":{_num(loss[i])},"train/grad_norm":{_num(grad[i])},'
            f'"train/lr":{_num(lr[i])},"train/time(s)":{_num(secs[i])}}}}}\n'
        )
        if h.val_every and s % h.val_every == 0:
            yield f'{{"step":{s},"data":{{"{VAL_METRIC}":{_num(val_loss(h, s))}}}}}\n'


def _write_atomically(path: Path, chunks: Iterator[str]) -> None:
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "w", encoding="utf-8") as f:
        for chunk in chunks:
            f.write(chunk)
    os.replace(tmp, path)


def _batched(h: History, batch: int = 50_000) -> Iterator[str]:
    for start in range(1, h.steps + 1, batch):
        yield "".join(verl_lines(h, start, min(start + batch, h.steps + 1)))


def verl_root(h: History) -> Path:
    """A root folder holding one run folder with the history as `metrics.jsonl` (written once, cached).

    Beside the root, `<key>.json` records the History so a reader can check a cached file's parameters.
    """
    root = DATA / h.key
    path = root / RUN_NAME / "metrics.jsonl"
    manifest = DATA / f"{h.key}.json"
    if not (path.exists() and manifest.exists()):
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_atomically(path, _batched(h))
        manifest.write_text(json.dumps(asdict(h) | {"points": h.points, "bytes": path.stat().st_size}))
    return root


def verl_file(h: History) -> Path:
    """The cached verl JSONL file of the history."""
    return verl_root(h) / RUN_NAME / "metrics.jsonl"


def tensorboard_dir(h: History) -> Path:
    """The same history as a TensorBoard event file, written once by torch's SummaryWriter and cached."""
    logdir = DATA / f"{h.key}-tb"
    done = logdir / ".done"
    if done.exists():
        return logdir
    from torch.utils.tensorboard import SummaryWriter

    if logdir.exists():
        for stale in logdir.iterdir():
            stale.unlink()
    writer = SummaryWriter(str(logdir), max_queue=10_000, flush_secs=3600)
    batch = 50_000
    for start in range(1, h.steps + 1, batch):
        cols = train_columns(h, start, min(start + batch, h.steps + 1))
        steps = cols["step"].tolist()
        values = [cols[m].tolist() for m in TRAIN_METRICS]
        for i, s in enumerate(steps):
            for m, v in zip(TRAIN_METRICS, values, strict=True):
                writer.add_scalar(m, v[i], s)
            if h.val_every and s % h.val_every == 0:
                writer.add_scalar(VAL_METRIC, val_loss(h, s), s)
    writer.close()
    done.write_text(json.dumps(asdict(h)))
    return logdir


def write_json(name: str, payload: dict) -> Path:
    """Write a script's figures to bench/out/<name>.json (the file run_all.py collects)."""
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2, default=float) + "\n")
    return path


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation; NaN for an empty list."""
    return float(np.percentile(values, q)) if values else float("nan")


def print_table(title: str, header: list[str], rows: list[list[object]]) -> None:
    """A plain aligned table on stdout."""
    cells = [[str(c) for c in header]] + [[_fmt(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    print(f"\n{title}")
    for j, r in enumerate(cells):
        print(
            "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        )
        if j == 0:
            print("  ".join("-" * w for w in widths))


def _fmt(c: object) -> str:
    if isinstance(c, bool):
        return "yes" if c else "no"
    if isinstance(c, float):
        if math.isnan(c):
            return "-"
        return f"{c:,.0f}" if abs(c) >= 1000 else f"{c:.3g}"
    if isinstance(c, int):
        return f"{c:,}"
    return str(c)
