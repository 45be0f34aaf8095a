"""Health checklist of a run (pass / fail / unknown, with evidence) and the run's recorded config."""

from __future__ import annotations

import streamlit as st

from app import ui

STATE_ICONS = {
    "pass": ":green[:material/check_circle:]",
    "fail": ":red[:material/cancel:]",
    "unknown": ":gray[:material/help:]",
}
PHASES = (("start", "At the start"), ("checkpoint", "At checkpoints"), ("end", "At the end"))

api = ui.api()
run = ui.require_run()

st.title(f"Health of {run}")
items = api.health_checklist(run)
if not items:
    st.info("The collector has no checklist for this run yet.")
else:
    totals = st.columns(3)
    for col, state in zip(totals, ("pass", "fail", "unknown"), strict=True):
        col.metric(f"{STATE_ICONS[state]} {state}", sum(i.state == state for i in items))
    known = {p for p, _ in PHASES}
    for phase, heading in (*PHASES, ("other", "Other checks")):
        in_phase = [i for i in items if (i.phase if i.phase in known else "other") == phase]
        if not in_phase:
            continue
        st.subheader(heading)
        for item in in_phase:
            icon = STATE_ICONS.get(item.state, STATE_ICONS["unknown"])
            st.markdown(f"{icon} **{item.title}** ({item.state})")
            if item.evidence:
                st.caption(item.evidence)

st.subheader("Config")
detail = api.run(run)
config = detail.config
st.caption(f"As the run's files record it, merged ({ui.CONFIG_SOURCES}).")
if config:
    st.json(config, expanded=1)
else:
    st.caption("None of this run's files records a config.")
if detail.status_info:
    with st.expander("Status file (status.json)"):
        st.json(detail.status_info)
