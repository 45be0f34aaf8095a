"""Alert review: every alert across runs, filtered; one at a time with its evidence chart, acked or resolved."""

from __future__ import annotations

import streamlit as st

from app import ui
from app.charts import metric_figure
from app.series import from_api

# Steps of context drawn on each side of an episode, as a share of the episode's length (at least 20 steps).
CONTEXT_SHARE = 1.0
STATES = ("open", "acked", "resolved", "all")

api = ui.api()
st.title("Alerts")

everything = api.alerts(state="all")
if not everything:
    st.info("No alerts in any run. The collector raises them as it reads the runs' metrics.")
    st.stop()

filters = st.columns(4)
runs = filters[0].multiselect("Run", sorted({a["run"] for a in everything}))
rules = filters[1].multiselect("Rule", sorted({a["rule"] for a in everything}))
severities = filters[2].multiselect(
    "Severity", [s for s in ui.SEVERITIES if any(a["severity"] == s for a in everything)]
)
state = filters[3].selectbox("State", STATES, index=0)

shown = [
    a
    for a in everything
    if (not runs or a["run"] in runs)
    and (not rules or a["rule"] in rules)
    and (not severities or a["severity"] in severities)
    and (state == "all" or a["state"] == state)
]
st.caption(f"{len(shown)} of {len(everything)} alerts")
if not shown:
    st.info("No alert matches these filters.")
    st.stop()

st.dataframe(
    [
        {
            "id": a["id"],
            "severity": a["severity"],
            "run": a["run"],
            "rule": a["rule"],
            "metric": a.get("metric"),
            "steps": f"{a['first_step']}–{a['last_step']}",
            "state": a["state"],
            "message": a.get("message"),
            "note": a.get("note") or "",
        }
        for a in shown
    ],
    hide_index=True,
    width="stretch",
    column_config={
        "run": st.column_config.TextColumn("run", width="medium"),
        "message": st.column_config.TextColumn("message", width="large"),
    },
)


def _label(alert_id: int) -> str:
    a = next(x for x in shown if x["id"] == alert_id)
    return f"#{a['id']} [{a['severity']}] {a['rule']} in {a['run']} at steps {a['first_step']}–{a['last_step']} ({a['state']})"


chosen = st.selectbox("Review alert", [a["id"] for a in shown], format_func=_label, key="alert_choice")
alert = api.alert(chosen)
color = {"error": st.error, "warn": st.warning}.get(alert["severity"], st.info)
color(
    f"**{alert['rule']}** ({alert['severity']}, {alert['state']}) in run `{alert['run']}`: {alert.get('message')}"
)

action = alert.get("action")
if action:
    # the API's action: the checkpoint to go back to and the command that resumes from it
    st.markdown("**What to do**")
    st.markdown(action["text"])
    if action.get("command"):
        st.code(action["command"], language="bash")

if alert.get("metric"):
    first, last = alert["first_step"], alert["last_step"]
    margin = max(20, int((last - first) * CONTEXT_SHARE))
    evidence = api.metrics(alert["run"], [alert["metric"]], start=max(0, first - margin), end=last + margin)
    series = [from_api(s) for s in evidence]
    if series and series[0]["steps"]:
        st.plotly_chart(
            metric_figure(
                series, title=f"Evidence: {alert['metric']} around steps {first}–{last}", alerts=[alert]
            ),
            key=f"evidence-{alert['id']}",
        )
    else:
        st.caption(f"No points of {alert['metric']} around steps {first}–{last}.")
else:
    st.caption("This alert is about the run as a whole (no single metric to draw).")

note = st.text_input("Note (stored with the alert)", key=f"note-{alert['id']}")
act = st.columns([1, 1, 4])
if act[0].button("Acknowledge", disabled=alert["state"] != "open", key=f"ack-{alert['id']}"):
    api.acknowledge(alert["id"], note)
    st.toast(f"Alert #{alert['id']} acknowledged")
    st.rerun()
if act[1].button("Resolve", disabled=alert["state"] == "resolved", key=f"resolve-{alert['id']}"):
    api.resolve(alert["id"], note)
    st.toast(f"Alert #{alert['id']} resolved")
    st.rerun()

history = alert.get("history") or []
if history:
    st.markdown("**History**")
    st.dataframe(
        [{**h, "at": ui.parse_time(h.get("at")), "note": h.get("note") or ""} for h in history],
        hide_index=True,
        width="stretch",
        column_config={"at": st.column_config.DatetimeColumn("at", format="YYYY-MM-DD HH:mm:ss")},
    )
