"""Checkpoint picking: a run's checkpoints, the recommended one and why, and what is safe to delete."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import ui

api = ui.api()
run = ui.require_run()

st.title(f"Checkpoints of {run}")
advice = api.checkpoints(run)
checkpoints = sorted(advice.checkpoints, key=lambda c: c.step)
recommended = advice.recommended
deletable = set(advice.deletable)
kept = {
    k.step: k.why for k in advice.kept
}  # why each other one stays (an alert's action resumes from it, ...)
metric = advice.metric or "metric"
direction = advice.direction

if recommended:
    st.success(f"**Keep step {recommended.step:,}**: {recommended.reason}")
    if recommended.path:  # null when no checkpoint was seen: the step is the best evaluation's
        st.code(recommended.path, language=None)
else:
    st.info("No checkpoint to recommend yet (none is complete, or the run has no metric to judge them by).")

if not checkpoints:
    st.info("This run has no checkpoints.")
    st.stop()

table = pd.DataFrame(
    [
        {
            "step": c.step,
            metric: c.value,
            "complete": c.complete,  # None: not known (a checkpoint inferred, not seen on disk)
            "size": ui.human_bytes(c.bytes),
            "recommended": recommended is not None and c.step == recommended.step,
            "safe to delete": c.step in deletable,
            "kept because": kept.get(c.step, ""),
            "path": c.path,
        }
        for c in checkpoints
    ]
)


def _highlight(row: pd.Series) -> list[str]:
    style = "background-color: rgba(44,160,44,0.25); font-weight: bold" if row["recommended"] else ""
    return [style] * len(row)


st.caption(
    f"Judged by `{metric}`"
    + (f" ({'lower' if direction == 'min' else 'higher'} is better)" if direction else "")
)
st.dataframe(
    table.style.apply(_highlight, axis=1),
    hide_index=True,
    width="stretch",
    column_config={
        metric: st.column_config.NumberColumn(metric, format="%.4f"),
        "path": st.column_config.TextColumn("path", width="large"),
    },
)

if deletable:
    frees = advice.frees_bytes
    st.warning(
        f"Safe to delete: {len(deletable)} checkpoint(s), steps {', '.join(str(s) for s in sorted(deletable))}; "
        f"frees {ui.human_bytes(frees)}."
    )
    with st.expander("Paths safe to delete"):
        st.code("\n".join(c.path or "" for c in checkpoints if c.step in deletable), language=None)
else:
    st.caption("No checkpoint is safe to delete.")

steps = [c.step for c in checkpoints]
default = steps.index(recommended.step) if recommended and recommended.step in steps else len(steps) - 1
chosen = st.selectbox(
    "Copy the path of checkpoint",
    steps,
    index=default,
    format_func=lambda s: f"step {s:,}",
    key="checkpoint_choice",
)
st.code(next(c.path or "" for c in checkpoints if c.step == chosen), language=None)
