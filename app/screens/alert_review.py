"""Alert review: a queue of incidents across runs (errors first, then warnings, then notices, newest first
within each), filtered; one incident at a time with what to do (keep / run / why), its evidence charts and
its alerts, acknowledged or resolved as a whole."""

from __future__ import annotations

import time

import streamlit as st

from app import ui
from app.charts import metric_figure
from app.series import from_api
from collector.api.models import CLEARED_OPEN, Alert, AlertChangeState, Incident, IncidentChange
from collector.core.printable import middle

# Steps of context drawn on each side of an incident, as a share of its length (at least 20 steps).
CONTEXT_SHARE = 1.0
STATES = ("open", "acked", "resolved", "all")
SEVERITY_WORDS = {"error": "error", "warn": "warning", "info": "notice"}
RANK = {s: i for i, s in enumerate(ui.SEVERITIES)}  # error 0, warn 1, info 2
EVIDENCE_CHARTS = 3  # the incident's metrics drawn, cause first
HISTORY_ALERTS = 20  # alerts whose history is fetched (one request each)
# A longer run name is shortened in the middle to fit its column (RUN_WIDTH px); the review line names it whole.
RUN_CHARS = 44
RUN_WIDTH = 320

api = ui.api()
st.title("Alerts")

incidents = api.incidents(state="all")
if not incidents:
    st.info("No alerts in any run. The collector raises them as it reads the runs' metrics.")
    st.stop()
alerts = {a.id: a for a in api.alerts(state="all")}


def _evidence(incident: Incident) -> list[Alert]:
    return [alerts[a] for a in incident.alert_ids if a in alerts]


def _newest(incident: Incident) -> float:
    return max((a.created_at or 0.0 for a in _evidence(incident)), default=0.0)


def _queue_order(incident: Incident) -> tuple:
    return (
        RANK.get(incident.severity, len(RANK)),
        -_newest(incident),
        -incident.last_step,
        -incident.id,
    )


def _steps(incident: Incident) -> str:
    first, last = incident.first_step, incident.last_step
    return f"{first}" if first == last else f"{first}–{last}"


def _severity(incident: Incident | Alert) -> str:
    return SEVERITY_WORDS.get(incident.severity, incident.severity)


filters = st.columns(4)
runs = filters[0].multiselect("Run", sorted({i.run for i in incidents}))
rules = filters[1].multiselect("Rule", sorted({r for i in incidents for r in i.rules}))
severities = filters[2].multiselect(
    "Severity",
    [s for s in ui.SEVERITIES if any(i.severity == s for i in incidents)],
    format_func=lambda s: SEVERITY_WORDS.get(s, s),
)
state = filters[3].selectbox("State", STATES, index=0)

queue = sorted(
    (
        i
        for i in incidents
        if (not runs or i.run in runs)
        and (not rules or any(r in rules for r in i.rules))
        and (not severities or i.severity in severities)
        and (state == "all" or i.state == state)
    ),
    key=_queue_order,
)
shown_alerts = sum(i.alert_count for i in queue)
st.caption(
    f"{len(queue)} of {len(incidents)} incident{'s' * (len(incidents) != 1)} ({shown_alerts} "
    f"alert{'s' * (shown_alerts != 1)}), errors first, then warnings, then notices, the newest first within each"
)
if not queue:
    st.info("No incident matches these filters.")
    st.stop()

st.dataframe(
    [
        {
            "severity": _severity(i),
            "run": middle(i.run, RUN_CHARS),
            "trouble": " → ".join(i.rules),
            "steps": _steps(i),
            "alerts": i.alert_count,
            "state": i.state,
            "message": i.message,
        }
        for i in queue
    ],
    hide_index=True,
    width="stretch",
    column_config={
        "run": st.column_config.TextColumn(
            "run", help="A long name is shortened in the middle", width=RUN_WIDTH
        ),
        "message": st.column_config.TextColumn("message", width="large"),
    },
)


def _done_words(did: str, done: IncidentChange) -> str:
    """The toast after an ack or resolve; on a team's lake the owning collector applies it a moment later."""
    if done.state_requested:
        return (
            f"Asked the collector that owns the run to set {len(done.requested or [])} alert(s) to "
            f"{done.state_requested}: shown here once it has applied it (a few seconds)"
        )
    return f"{did} {len(done.changed)} alert(s) of the incident"


def _label(incident_id: int) -> str:
    i = next(x for x in queue if x.id == incident_id)
    count = f", {i.alert_count} alerts" if i.alert_count > 1 else ""
    return f"[{_severity(i)}] {' → '.join(i.rules)} in {i.run} at steps {_steps(i)} ({i.state}{count})"


chosen = st.selectbox("Review incident", [i.id for i in queue], format_func=_label, key="incident_choice")
incident = next(i for i in queue if i.id == chosen)
evidence = _evidence(incident)
color = {"error": st.error, "warn": st.warning}.get(incident.severity, st.info)
many = (
    f" {incident.alert_count} alerts at steps {', '.join(map(str, incident.steps))}."
    if len(evidence) > 1
    else ""
)
color(
    f"**{' → '.join(incident.rules)}** ({_severity(incident)}, {incident.state}) in run "
    f"`{incident.run}`: {incident.message}{many}"
)

action = incident.action
if action:
    # the API's action in three lines; the command once, in a code block (it has a copy button)
    st.markdown("**What to do**")
    st.markdown(f"**Keep** {action.keep}  \n**Run** {action.run}")
    if action.command:
        st.code(action.command, language="bash")
    st.markdown(f"**Why** {action.why}")
    st.caption(f"Trainer: {action.trainer} ({action.trainer_evidence}).")

drawn = [m for m in incident.metrics if m][:EVIDENCE_CHARTS]
first, last = incident.first_step, incident.last_step
margin = max(20, int((last - first) * CONTEXT_SHARE))
for metric in drawn:
    series = [
        from_api(s)
        for s in api.metrics(incident.run, [metric], start=max(0, first - margin), end=last + margin)
    ]
    if series and series[0]["steps"]:
        st.plotly_chart(
            metric_figure(
                series,
                title=f"Evidence: {metric} around steps {first}–{last}",
                alerts=evidence,  # one trouble: every alert of it, on each of its metrics
            ),
            key=f"evidence-{incident.id}-{metric}",
        )
    else:
        st.caption(f"No points of {metric} around steps {first}–{last}.")
if not drawn:
    st.caption("This incident is about the run as a whole (no single metric to draw).")

open_ids = [a.id for a in evidence if a.state == "open"]
unresolved = [a.id for a in evidence if a.state != "resolved"]
if incident.state == "open" and not unresolved:
    st.caption(f"Every alert of this incident has cleared. {CLEARED_OPEN}")  # (every page's sentence)
note = st.text_input("Note (stored with each of its alerts)", key=f"note-{incident.id}")
act = st.columns([1, 1, 4])
read_only = ui.read_only_why()  # (a read-only team API: a click would only meet its 403)
if read_only:
    st.caption(f"Acknowledge and Resolve are not offered here: {read_only}.")
if act[0].button("Acknowledge", disabled=not open_ids or bool(read_only), key=f"ack-{incident.id}"):
    done = api.acknowledge_incident(incident.id, note)
    st.toast(_done_words("Acknowledged", done))
    st.rerun()
if act[1].button("Resolve", disabled=not unresolved or bool(read_only), key=f"resolve-{incident.id}"):
    done = api.resolve_incident(incident.id, note)
    st.toast(_done_words("Resolved", done))
    st.rerun()


def _current_change(asked: Incident) -> AlertChangeState | None:
    """The incident's change as the API says it now (its run's incidents asked again; an incident found by
    any of its alerts, since an applied change may regroup them)."""
    found = api.incidents(run=asked.run, state="all")
    same = next((i for i in found if i.id == asked.id), None) or next(
        (i for i in found if set(i.alert_ids) & set(asked.alert_ids)), None
    )
    return same.change if same is not None else asked.change


pending = incident.change is not None and incident.change.done_at is None


# A team's lake: what became of the last ack or resolve asked (the CLI's words); while the collector that owns
# the run has not applied or refused it, asked again every refresh (then kept: nothing more comes of it).
@st.fragment(run_every=ui.settings().refresh_s if pending else None)
def change_line() -> None:
    change = incident.change
    if pending:
        kept = f"change_done:{incident.id}:{change.asked_at}"
        change = st.session_state.get(kept) or _current_change(incident)
        if change is not None and change.done_at is not None:
            st.session_state[kept] = change
    if change is None:
        return
    said = change.said(time.time())
    shown = said[:1].upper() + said[1:]
    if change.outcome not in (None, change.state):  # refused, and why
        st.error(shown, icon=":material/block:")
    else:
        st.caption(shown)


change_line()

with st.expander(f"Evidence: {len(evidence)} alert(s)", expanded=len(evidence) == 1):
    st.dataframe(
        [
            {
                "id": a.id,
                "severity": _severity(a),
                "rule": a.rule,
                "metric": a.metric,
                "steps": f"{a.first_step}–{a.last_step}",
                "state": a.state,
                "message": a.message,
                "note": a.note or "",
            }
            for a in evidence
        ],
        hide_index=True,
        width="stretch",
        column_config={"message": st.column_config.TextColumn("message", width="large")},
    )
    history = sorted(
        ((a.id, h) for a in evidence[:HISTORY_ALERTS] for h in api.alert(a.id).history),
        key=lambda pair: pair[1].at or 0.0,
    )
    if history:
        st.markdown("**History**")
        st.dataframe(
            [
                {
                    "at": ui.parse_time(h.at),
                    "alert": alert_id,
                    "event": h.event,
                    "state": h.state,
                    "note": h.note or "",
                }
                for alert_id, h in history
            ],
            hide_index=True,
            width="stretch",
            column_order=("at", "alert", "event", "state", "note"),
            column_config={"at": st.column_config.DatetimeColumn("at", format="YYYY-MM-DD HH:mm:ss")},
        )
