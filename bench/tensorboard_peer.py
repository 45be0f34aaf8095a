"""The TensorBoard peer of bench/backfill.py: its loads of the same history as an event file, and how many of
the planted spikes and the NaN each keeps (EventAccumulator keep-all and default guidance, and the server's
default view: its reservoir replayed over a keep-all load, or its own ingester)."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen  # noqa: E402


def trouble_kept(h: gen.History, series: dict[str, list[tuple[int, float]]]) -> dict:
    """How many planted spikes (exact step and value) and whether the NaN loss are among the kept points."""
    grad = dict(series.get("train/grad_norm", []))
    return {
        "points": sum(len(v) for v in series.values()),
        "spikes_kept": sum(1 for s, v in zip(h.spike_steps, h.spike_values, strict=True) if grad.get(s) == v),
        "spikes_planted": len(h.spike_steps),
        "nan_kept": any(math.isnan(v) for _, v in series.get("train/loss", [])),
    }


def server_sample(series: dict[str, list[tuple[int, float]]], size: int | None = None) -> dict:
    """What `tensorboard --logdir` keeps of these points: its own reservoir (seed 0, last point always
    kept), `size` per tag, the scalars plugin's default (1,000) unless told; fed in file order, exactly
    as its ingester's accumulator feeds it."""
    from tensorboard.backend.event_processing import data_ingester, reservoir
    from tensorboard.plugins.scalar import metadata as scalar_metadata

    size = size or data_ingester.DEFAULT_TENSOR_SIZE_GUIDANCE[scalar_metadata.PLUGIN_NAME]
    kept = {}
    for tag, points in series.items():
        r = reservoir.Reservoir(size)
        for p in points:
            r.AddItem(tag, p)
        kept[tag] = r.Items(tag)
    return kept


def server_load(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    """The TensorBoard server's own Python ingester (plugin accumulator, default guidance) on `logdir`."""
    from tensorboard.backend.event_processing import data_ingester, plugin_event_accumulator
    from tensorboard.util import tensor_util

    acc = plugin_event_accumulator.EventAccumulator(
        str(logdir),
        size_guidance=data_ingester.DEFAULT_SIZE_GUIDANCE,
        tensor_size_guidance=data_ingester.DEFAULT_TENSOR_SIZE_GUIDANCE,
    )
    acc.Reload()
    return {
        tag: [(e.step, float(tensor_util.make_ndarray(e.tensor_proto).item())) for e in acc.Tensors(tag)]
        for tag in acc.Tags()["tensors"]
    }


def tb_load(logdir: Path, mode: str, h: gen.History) -> dict:
    """Load the event file with TensorBoard in `mode` and count what survived of the trouble.

    keep_all: EventAccumulator with {scalars: 0}; it also replays the loaded points through the server's
    sampler (`server_sample`), which gives the server's default view without a second full load.
    default: EventAccumulator's default size guidance (10,000 scalars per tag).
    server_default: the server's plugin accumulator itself (slow: about 3x keep_all).
    """
    from tensorboard.backend.event_processing import event_accumulator

    t0 = time.perf_counter()
    if mode == "server_default":
        series = server_load(logdir)
    else:
        guidance = {event_accumulator.SCALARS: 0} if mode == "keep_all" else None
        acc = event_accumulator.EventAccumulator(str(logdir), size_guidance=guidance)
        acc.Reload()
        series = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    out = {"load_s": time.perf_counter() - t0} | trouble_kept(h, series)
    if mode == "keep_all":
        t0 = time.perf_counter()
        out["server_default_replay"] = trouble_kept(h, server_sample(series)) | {
            "replay_s": time.perf_counter() - t0
        }
    return out
