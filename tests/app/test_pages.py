"""Every dashboard page under `streamlit.testing.AppTest`, against a real collector serving real runs.

The collector (a subprocess) has ingested copies of the public trainer_state.json histories and a real CPU
verl smoke run; each test compares what a page shows with what the API (or the CLI) says.
"""

from __future__ import annotations

import base64
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from app.api import DashboardApi
from app.connection import read_marker
from collector.api.models import CLEARED_OPEN, RL_JUDGED
from tests.app.conftest import (
    REPO,
    SMOKE_RUN,
    real_run_ids,
    start_collector,
    stop_process,
    wait_for,
    write_rl_and_sft_runs,
)

APP = str(REPO / "app" / "streamlit_app.py")
PAGE_FILES = {
    "run": "screens/run_charts.py",
    "alerts": "screens/alert_review.py",
    "checkpoints": "screens/checkpoint_picker.py",
    "compare": "screens/run_compare.py",
    "health": "screens/run_health.py",
}
# A run page draws a dozen charts from a dozen API calls; the machine is shared, so allow for slowness.
PAGE_TIMEOUT_S = 120
NAN_GRAD_RUN = "real/ChenguangYang96UCR__KG-LLM__outputs"  # fp16 overflow: grad_norm NaN at steps 1, 2, 6
BURST_RUN = "real/Miguel-Alessio__qwen-chess-lora__logs"  # grad_norm burst ~131 at step 2680
HEALTHY_RUN = "real/Dheena731__tinyLlama-finetune__root"  # monotone eval_loss, best = last checkpoint
GRPO_RUN = (
    "real/srinath-manda__IITD_Feb26_AAIPL__outputs-checkpoint-500"  # TRL GRPO: reward, entropy, lengths
)


def open_page(page: str | None = None, run: str | None = None) -> AppTest:
    """Run the app (optionally with `run` chosen in the sidebar), then switch to `page` and run it."""
    at = AppTest.from_file(APP, default_timeout=PAGE_TIMEOUT_S)
    if run is not None:
        at.session_state["pending_run"] = run
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    if page is not None:
        at.switch_page(PAGE_FILES[page]).run()
        assert not at.exception, [e.value for e in at.exception]
    return at


def api_of(collector) -> DashboardApi:
    return DashboardApi(collector.client())


def _decode(value):
    # Plotly may send arrays as {"dtype": ..., "bdata": base64}; turn them back into lists.
    if isinstance(value, dict) and "bdata" in value and "dtype" in value:
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"]).tolist()
    return value


def figures(at: AppTest) -> list[dict]:
    """The plotly figures on the page, arrays decoded."""
    out = []
    for chart in at.get("plotly_chart"):
        fig = json.loads(chart.proto.spec)
        for trace in fig.get("data", []):
            for key in ("x", "y"):
                if key in trace:
                    trace[key] = _decode(trace[key])
        out.append(fig)
    return out


def figure_titled(figs: list[dict], title: str) -> dict:
    for fig in figs:
        text = fig["layout"].get("title", {}).get("text", "")
        if text.split("<br>")[0] == title:
            return fig
    pytest.fail(
        f"no chart titled {title!r}; titles: {[f['layout'].get('title', {}).get('text') for f in figs]}"
    )


def trace(fig: dict, name: str) -> dict:
    for t in fig["data"]:
        if t.get("name") == name:
            return t
    pytest.fail(f"no trace {name!r}; traces: {[t.get('name') for t in fig['data']]}")


def test_overview_lists_every_run_with_status_and_alert_counts(app_env):
    at = open_page()
    assert [t.value for t in at.title] == ["Runs"]
    table = at.dataframe[0].value
    expected = set(real_run_ids())
    assert set(table["run"]) == expected
    runs = {r.id: r for r in api_of(app_env).runs()}
    for _, row in table.iterrows():
        api_run = runs[row["run"]]
        assert row["status"] == (api_run.status or "unknown")
        assert row["errors"] == api_run.open_alerts.error
        assert row["warnings"] == api_run.open_alerts.warn
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Runs"] == str(len(expected))


@pytest.mark.parametrize("run", real_run_ids())
def test_every_run_page_of_every_real_run_renders_without_error(app_env, run):
    at = open_page("run", run=run)
    assert at.title[0].value == run
    assert at.get("plotly_chart"), f"no chart on the run page of {run}"
    for page in ("checkpoints", "health"):
        at.switch_page(PAGE_FILES[page]).run()
        assert not at.exception, (page, [e.value for e in at.exception])
        assert not at.error, (page, [e.value for e in at.error])
        assert run in at.title[0].value


def test_overview_filters_by_name(app_env):
    at = open_page()
    at.text_input[0].input("whisper").run()
    shown = set(at.dataframe[0].value["run"])
    assert shown == {r for r in real_run_ids() if "whisper" in r.lower()}
    assert len(shown) == 2


def test_run_page_draws_role_panels_and_nan_markers(app_env):
    at = open_page("run", run=NAN_GRAD_RUN)
    assert [t.value for t in at.title] == [NAN_GRAD_RUN]
    figs = figures(at)
    loss = figure_titled(figs, "Loss")
    assert "loss" in {t["name"] for t in loss["data"]}
    grad = figure_titled(figs, "Gradient norm")
    assert grad["layout"]["yaxis"]["type"] == "log"
    # the planted-by-nature NaN grad norms of this fp16 run are red crosses at their steps
    assert {1, 2, 6} <= set(trace(grad, "NaN/inf")["x"])
    lr = figure_titled(figs, "Learning rate")
    assert trace(lr, "learning_rate")["y"]
    # HF runs log `epoch`: the epoch view draws the loss's mean per epoch with its spread
    epochs = api_of(app_env).epochs(NAN_GRAD_RUN, "loss").epochs
    per_epoch = figure_titled(figs, "loss per epoch")
    assert trace(per_epoch, "mean")["y"] == pytest.approx([e.mean for e in epochs])


def test_run_page_lists_the_files_it_reads_and_those_it_does_not(app_env):
    detail = api_of(app_env).run(NAN_GRAD_RUN)
    at = open_page("run", run=NAN_GRAD_RUN)
    [files] = [e for e in at.expander if e.label.startswith("Files of this run")]
    assert (
        files.label == f"Files of this run ({len(detail.sources)} read, {len(detail.skipped_files)} not read)"
    )
    [table] = files.dataframe
    assert list(table.value["path"]) == [s.path for s in detail.sources]
    assert list(table.value["points"]) == [s.points for s in detail.sources] and detail.sources[0].points > 0


def test_run_page_marks_every_alert_of_the_run_on_its_chart(app_env):
    api = api_of(app_env)
    with_metric = sorted({a.run for a in api.alerts() if a.metric})
    assert with_metric, "the collector raised no alert about a metric in any real run; nothing to check"
    run = with_metric[0]
    alerts = [a for a in api.alerts(run=run) if a.metric]
    at = open_page("run", run=run)
    figs = figures(at)
    for alert in alerts:
        label = f"{alert.rule} ({alert.severity})"
        marked = [
            fig["layout"]["title"]["text"]
            for fig in figs
            if any(t.get("name", "").startswith(label) and alert.first_step in t["x"] for t in fig["data"])
            and any(t.get("name") == alert.metric for t in fig["data"])
        ]
        assert marked, f"alert {label} on {alert.metric} is not marked on the chart of that metric"


def test_rl_run_gets_reward_entropy_and_response_length_panels(app_env):
    at = open_page("run", run=GRPO_RUN)
    figs = figures(at)
    for title, metric in (
        ("Reward", "reward"),
        ("Entropy", "entropy"),
        ("Response length", "completions/mean_length"),
    ):
        assert metric in {t["name"] for t in figure_titled(figs, title)["data"]}


def test_run_page_draws_a_grad_norm_burst_of_a_real_run(app_env):
    at = open_page("run", run=BURST_RUN)
    grad = figure_titled(figures(at), "Gradient norm")
    drawn = [
        v for t in grad["data"] if t.get("name", "").startswith("grad_norm") for v in t["y"] if v is not None
    ]
    assert max(drawn) > 100  # the burst (~131 at step 2680, median 0.33) is drawn


@pytest.mark.slow
def test_run_page_of_the_verl_smoke_run(smoke_env):
    at = open_page("run", run=SMOKE_RUN)
    figs = figures(at)
    titles = [f["layout"]["title"]["text"].split("<br>")[0] for f in figs]
    assert {"Loss", "Learning rate", "Gradient norm"} <= set(titles)
    loss = figure_titled(figs, "Loss")
    names = {t["name"] for t in loss["data"]}
    assert {"train/loss", "val/loss"} <= names
    detail = api_of(smoke_env).run(SMOKE_RUN)
    series = api_of(smoke_env).metrics(SMOKE_RUN, ["train/loss"])[0]
    raw = trace(loss, "train/loss raw")["y"]
    assert raw == [v if math.isfinite(v) else None for v in series.values]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Status"] == detail.status == "completed"
    # other verl metrics are grouped by prefix below the role panels
    assert any(e.label.startswith("perf/ (") for e in at.expander)


def test_smoothing_and_log_scale_controls_change_the_loss_chart(app_env):
    at = open_page("run", run=NAN_GRAD_RUN)
    assert "loss raw" in {t["name"] for t in figure_titled(figures(at), "Loss")["data"]}
    at.slider[0].set_value(0.0).run()
    loss = figure_titled(figures(at), "Loss")
    assert "loss raw" not in {t["name"] for t in loss["data"]}
    at.toggle[0].set_value(True).run()
    assert figure_titled(figures(at), "Loss")["layout"]["yaxis"]["type"] == "log"


def collector_cli(collector, *args: str) -> object:
    out = subprocess.run(
        [sys.executable, "-m", "collector", *args, "--db", str(collector.db), "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_alert_review_is_a_queue_of_incidents_errors_first(app_env):
    # issue 23.2: incidents, errors first, then warnings, then notices; the top of the queue is under review
    api = api_of(app_env)
    at = open_page("alerts")
    assert [t.value for t in at.title] == ["Alerts"]
    table = at.dataframe[0].value
    top = at.selectbox(key="incident_choice")
    assert top.index == 0
    first = next(i for i in api.incidents(state="open") if i.id == top.value)
    assert " → ".join(first.rules) == table["trouble"][0]
    head, _, tail = table["run"][0].partition("…")  # a long name is shortened in the middle
    assert first.run.startswith(head) and first.run.endswith(tail) and first.run in top.options[0]
    every = api.incidents(state="all")
    table = _state_filter(at, "all").dataframe[0].value
    assert len(table) == len(every) and sum(table["alerts"]) == sum(i.alert_count for i in every)
    order = {"error": 0, "warning": 1, "notice": 2}
    ranks = [order[s] for s in table["severity"]]
    assert ranks == sorted(ranks) and len(set(ranks)) > 1


def test_acknowledging_an_incident_acknowledges_its_open_alerts_with_the_note(app_env):
    at = open_page("alerts")
    incident_id = at.selectbox(key="incident_choice").value
    incident = next(i for i in api_of(app_env).incidents(state="all") if i.id == incident_id)
    before = {a["id"]: a for a in collector_cli(app_env, "alerts", "--state", "all")}
    opened = [a for a in incident.alert_ids if before[a]["state"] == "open"]
    assert incident.state == "open" and opened
    assert at.get("plotly_chart") or not any(incident.metrics)  # the evidence chart
    at.text_input(key=f"note-{incident_id}").input("seen in the app test").run()
    at.button(key=f"ack-{incident_id}").click().run()
    assert not at.exception, [e.value for e in at.exception]
    after = {a["id"]: a for a in collector_cli(app_env, "alerts", "--state", "all")}
    assert all(after[a]["state"] == "acked" and after[a]["note"] == "seen in the app test" for a in opened)
    others = [a for a in incident.alert_ids if a not in opened]
    assert all(after[a]["state"] == before[a]["state"] for a in others)  # resolved ones stay resolved


def _state_filter(at, state: str):
    next(s for s in at.selectbox if s.label == "State").set_value(state).run()
    return at


def test_resolving_an_incident_resolves_its_alerts_with_note_and_history(app_env):
    api = api_of(app_env)
    at = _state_filter(open_page("alerts"), "all")
    alerts = {a.id: a for a in api.alerts(state="all")}
    incident = next(
        i
        for i in api.incidents(state="all")
        if i.state != "resolved" and any(alerts[a].state != "resolved" for a in i.alert_ids)
    )
    at.selectbox(key="incident_choice").set_value(incident.id).run()
    at.text_input(key=f"note-{incident.id}").input("fixed the lr").run()
    at.button(key=f"resolve-{incident.id}").click().run()
    assert not at.exception, [e.value for e in at.exception]
    for alert_id in incident.alert_ids:
        stored = api.alert(alert_id)
        assert stored.state == "resolved"
        if alerts[alert_id].state != "resolved":
            assert stored.note == "fixed the lr"
            assert any(h.note == "fixed the lr" for h in stored.history)
    # an incident whose alerts all cleared stays open (and offered) only while its run may go on within the
    # keep-firing window, and the page says so
    now = next(i for i in api.incidents(state="all") if i.id == incident.id)
    cleared = any("has cleared" in c.value for c in at.caption)
    assert cleared == (now.state == "open")
    _state_filter(at, "open")
    offered = [o for s in at.selectbox if s.key == "incident_choice" for o in s.options]
    assert any(f"{' → '.join(now.rules)} in {now.run} " in o for o in offered) == cleared


def test_alert_filters_narrow_the_queue(app_env):
    every = api_of(app_env).incidents(state="all")
    assert len({r for i in every for r in i.rules}) > 1
    rule = every[0].rules[-1]
    at = _state_filter(open_page("alerts"), "all")
    at.multiselect[1].set_value([rule]).run()
    table = at.dataframe[0].value
    assert all(rule in trouble.split(" → ") for trouble in table["trouble"])
    assert len(table) == len([i for i in every if rule in i.rules])


@pytest.mark.slow
def test_checkpoint_page_shows_the_recommendation_and_its_path(smoke_env):
    advice = api_of(smoke_env).checkpoints(SMOKE_RUN)
    assert advice.checkpoints, "the smoke run saved no checkpoint"
    at = open_page("checkpoints", run=SMOKE_RUN)
    table = at.dataframe[0].value
    assert list(table["step"]) == sorted(c.step for c in advice.checkpoints)
    codes = [c.value for c in at.code]
    if advice.recommended:
        assert f"Keep step {advice.recommended.step:,}" in at.success[0].value
        assert advice.recommended.path in codes
        assert table.set_index("step").loc[advice.recommended.step, "recommended"]
    assert set(table[table["safe to delete"]]["step"]) == set(advice.deletable)
    # every other checkpoint says why it stays, in the advice's words (`kept`)
    shown = {s: why for s, why in zip(table["step"], table["kept because"], strict=True) if why}
    assert shown == {k.step: k.why for k in advice.kept} and set(shown).isdisjoint(advice.deletable)
    # the path of the chosen checkpoint is in a code block (which has a copy button)
    at.selectbox(key="checkpoint_choice").set_value(table["step"].iloc[0]).run()
    assert table["path"].iloc[0] in [c.value for c in at.code]


def test_compare_overlays_runs_and_lists_config_differences(app_env):
    runs = [r for r in real_run_ids() if "whisper" in r.lower()]
    at = open_page("compare")
    at.multiselect(key="compare_runs").set_value(runs).run()
    figs = figures(at)
    assert figs
    overlay = figs[0]  # the default: each run's loss, whatever the run calls it
    assert overlay["layout"]["title"]["text"].startswith("loss")
    names = {t["name"] for t in overlay["data"]}
    assert {f"{run} (loss)" for run in runs} <= names
    diff = api_of(app_env).compare(runs).config_diff
    # named for what it shows: each run's merged config (run.json and trainer_state.json here), not run.json's
    assert "Config values that differ" in [h.value for h in at.subheader]
    tables = at.dataframe
    if diff:
        assert set(tables[-1].value["key"]) == {d.key for d in diff}


def test_health_checklist_and_config(app_env):
    items = api_of(app_env).health_checklist(HEALTHY_RUN)
    assert items
    at = open_page("health", run=HEALTHY_RUN)
    assert at.title[0].value == f"Health of {HEALTHY_RUN}"
    counts = {m.label.split()[-1]: int(m.value) for m in at.metric}
    for state in ("pass", "fail", "unknown"):
        assert counts[state] == sum(i.state == state for i in items)
    shown = " ".join(m.value for m in at.markdown)
    for item in items:
        assert item.title in shown
    assert at.json, "the run's config is not shown"
    assert "Config" in [h.value for h in at.subheader]
    assert any("trainer_state.json" in c.value for c in at.caption)  # where the config comes from


def _own_setup(real_root: Path, tmp_path: Path, monkeypatch, run: str) -> tuple[Path, Path]:
    """A database and a root holding one real run, named to the app through its environment."""
    db = tmp_path / "own.duckdb"
    root = tmp_path / "root"
    root.mkdir()
    (root / "one.json").write_bytes((real_root / "real" / f"{run.split('/')[1]}.json").read_bytes())
    monkeypatch.setenv("RUNWATCH_DB", str(db))
    monkeypatch.setenv("RUNWATCH_ROOTS", str(root))
    return db, root


def test_the_app_starts_a_collector_when_none_runs(real_root, tmp_path, monkeypatch):
    db, root = _own_setup(real_root, tmp_path, monkeypatch, NAN_GRAD_RUN)
    assert read_marker(db) is None
    at = AppTest.from_file(APP, default_timeout=PAGE_TIMEOUT_S).run()
    info = read_marker(db)
    try:
        assert info is not None, "the app did not start a collector"
        assert not at.exception, [e.value for e in at.exception]
        assert any("Started a collector" in t.value for t in at.toast)
        assert any("started by this dashboard" in c.value for c in at.sidebar.caption)
        assert Path(f"{db}.collector.log").exists()
    finally:
        if info is not None:
            os.killpg(info["pid"], signal.SIGTERM)  # the app started it in its own session
            wait_for(lambda: read_marker(db) is None, "the started collector exits", 60)


def test_the_app_on_a_database_with_nothing_running_and_no_roots_says_how_to_start_one(tmp_path, monkeypatch):
    db = tmp_path / "team.duckdb"  # as the README's team dashboard line, before the team API is started
    monkeypatch.setenv("RUNWATCH_DB", str(db))
    monkeypatch.delenv("RUNWATCH_ROOTS", raising=False)
    monkeypatch.chdir(tmp_path)
    at = AppTest.from_file(APP, default_timeout=PAGE_TIMEOUT_S).run()
    assert not at.exception, [e.value for e in at.exception]
    said = " ".join(e.value for e in at.error)
    assert f"nothing is running for {db}" in said and "serve --db" in said, said
    assert read_marker(db) is None and not Path(f"{db}.collector.log").exists()  # no collector started


def test_the_app_recovers_when_its_collector_is_killed(real_root, tmp_path, monkeypatch):
    db, root = _own_setup(real_root, tmp_path, monkeypatch, HEALTHY_RUN)
    first = start_collector(db, [root], tmp_path / "first.log")
    try:
        at = AppTest.from_file(APP, default_timeout=PAGE_TIMEOUT_S).run()
        assert not at.exception and not at.error
        os.killpg(first.proc.pid, signal.SIGKILL)  # no clean shutdown: the marker stays, naming a dead pid
        first.proc.wait()
        at.run()
        assert any("did not answer" in e.value for e in at.error), [e.value for e in at.error]
        at.run()  # the next run finds no live collector and starts one
        info = read_marker(db)
        assert info is not None and info["pid"] != first.proc.pid
        assert not at.exception and not at.error, [e.value for e in at.error]
        assert any("started by this dashboard" in c.value for c in at.sidebar.caption)
    finally:
        stop_process(first.proc)
        info = read_marker(db)
        if info is not None:
            os.killpg(info["pid"], signal.SIGTERM)
            wait_for(lambda: read_marker(db) is None, "the started collector exits", 60)


def test_alert_review_says_what_to_do_in_three_lines_with_the_command_once(app_env):
    # the action (issue 12 item 8) is drawn as the API sends it; issue 23.2: Keep / Run / Why, the command
    # once in a code block (its copy button), not the paragraph
    at = _state_filter(open_page("alerts"), "all")
    incident = next(i for i in api_of(app_env).incidents(state="all") if i.action)
    action = incident.action
    at.selectbox(key="incident_choice").set_value(incident.id).run()
    assert not at.exception, [e.value for e in at.exception]
    shown = [m.value for m in at.markdown]
    assert "**What to do**" in shown
    assert f"**Keep** {action.keep}  \n**Run** {action.run}" in shown and f"**Why** {action.why}" in shown
    assert action.text not in shown
    assert [c.value for c in at.code] == ([action.command] if action.command else [])
    if action.command:
        assert not any(action.command in m for m in shown)


def test_an_unknown_run_in_the_address_is_said_not_shown_silently_as_another(app_env):
    """`/run?run=ID` with an ID the database does not hold (mistyped, or a file laid out under another name): the
    page says so and which run it shows instead."""
    at = AppTest.from_file(APP, default_timeout=PAGE_TIMEOUT_S)
    at.query_params["run"] = "no/such-run"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    said = [w.value for w in at.warning]
    assert any("No run `no/such-run` in this database: showing `" in w for w in said), said
    at2 = AppTest.from_file(APP, default_timeout=PAGE_TIMEOUT_S)
    at2.query_params["run"] = HEALTHY_RUN
    at2.run()
    assert not [w.value for w in at2.warning if "No run" in w.value]


def test_a_stopped_runs_page_does_not_warn_of_its_stop_file(tmp_path, monkeypatch):
    """runwatch's own stop request in a run's folder is listed among the run's files not read, with its reason,
    but is no file to warn of (it was: every run stopped from runwatch said "1 file(s) of this run not read")."""
    root, db = tmp_path / "root", tmp_path / "own.duckdb"
    run = root / "exp"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "data": {"train/loss": 1.0 / s}}) + "\n" for s in range(1, 21))
    )
    (run / "runwatch.stop").write_text(json.dumps({"reason": "diverging", "by": "person"}))
    collector = start_collector(db, [root], tmp_path / "collector.log")
    try:
        monkeypatch.setenv("RUNWATCH_DB", str(db))
        monkeypatch.setenv("RUNWATCH_ROOTS", str(root))
        client = collector.client()
        # (both: the file list is stored when the run is found, its points a commit later)
        detail = wait_for(
            lambda: (d := client.get("/api/runs/exp"))["skipped_files"] and d["last_step"] == 20 and d,
            "exp's 20 steps read and its stop file listed",
        )
        [skipped] = detail["skipped_files"]
        assert skipped["expected"] and not skipped["copy"], skipped
        at = open_page("run", run="exp")
        [files] = [e for e in at.expander if e.label.startswith("Files of this run")]
        assert files.label == "Files of this run (1 read, 1 not read)", files.label
        warned = [w.value for w in at.warning if "not read" in w.value]
        assert not warned, warned
    finally:
        stop_process(collector.proc)


def test_the_run_page_says_what_became_of_a_stop_beside_its_button(tmp_path, monkeypatch):
    """A stop asked on a local run page is written at once: the confirmation closes and one line says so in the
    words of `collector run` (`StopState.said`), the Stop button disabled while the stop stands (a second press
    would change nothing). One refused (its stop file is a link) says `Stop refused:` and why once, as a
    refusal through a team's lake does, not "could not answer this page", and the button asks again."""
    root, db = tmp_path / "root", tmp_path / "own.duckdb"
    for name in ("live", "linked"):
        (root / name).mkdir(parents=True)
        (root / name / "metrics.jsonl").write_text(
            "".join(json.dumps({"step": s, "data": {"train/loss": 1.0 / s}}) + "\n" for s in range(1, 21))
        )
        (root / name / "status.json").write_text('{"state": "running"}')
    (tmp_path / "outside.txt").write_text("not a stop request")
    (root / "linked" / "runwatch.stop").symlink_to(tmp_path / "outside.txt")
    collector = start_collector(db, [root], tmp_path / "collector.log")
    try:
        monkeypatch.setenv("RUNWATCH_DB", str(db))
        monkeypatch.setenv("RUNWATCH_ROOTS", str(root))
        client = collector.client()
        wait_for(
            lambda: {r["id"]: r["last_step"] for r in client.get("/api/runs")} == {"live": 20, "linked": 20},
            "both runs' 20 steps",
        )
        said, buttons = {}, {}
        before = open_page("run", run="linked")
        assert [e.value for e in before.error if e.value.startswith("Stop refused: ")], before.error
        assert not before.button(key="stop_run").disabled  # it asks again, once the link is put right
        for run in ("live", "linked"):
            at = open_page("run", run=run)
            assert not at.button(key="stop_run").disabled
            at.button(key="stop_run").click().run()
            at.button(key="stop_run_confirmed").click().run()
            assert not at.exception, [e.value for e in at.exception]
            # the confirmation closed: one line says what became of the stop, no other box beside it
            assert not [b for b in at.button if b.key in ("stop_run_confirmed", "stop_run_cancelled")]
            assert not [w for w in at.warning if w.value.startswith("Stop ")], [w.value for w in at.warning]
            said[run] = [e.value for e in [*at.success, *at.error, *at.info, *at.caption]]
            buttons[run] = at.button(key="stop_run")
        written = [s for s in said["live"] if "by person (stopped from the dashboard); written: " in s]
        assert len(written) == 1 and written[0].startswith("Stop asked "), said["live"]
        assert not [s for s in said["live"] if s.startswith("Asked the")], said["live"]  # that one line alone
        assert buttons["live"].disabled and "asking again would change nothing" in buttons["live"].help
        assert (root / "live" / "runwatch.stop").is_file()
        refused = [s for s in said["linked"] if s.startswith("Stop refused: ")]
        assert len(refused) == 1 and "runwatch.stop is a symbolic link" in refused[0], said["linked"]
        assert not any("could not answer" in s for s in said["linked"]), said["linked"]
        assert not buttons["linked"].disabled and buttons["linked"].help.startswith("Ask again")
        assert (tmp_path / "outside.txt").read_text() == "not a stop request"
        # asked again after the page is opened anew: the stop stands, and the button says so
        again = open_page("run", run="live")
        assert again.button(key="stop_run").disabled
        assert [c.value for c in again.success if c.value.startswith("Stop asked ")], again.success
        assert not [c.value for c in again.caption if c.value.startswith("Stop asked ")], again.caption
    finally:
        stop_process(collector.proc)


def test_playback_draws_to_its_end_when_its_last_draws_are_the_same_figure(tmp_path, monkeypatch):
    """Playback redraws its charts as the stream goes; once every point has arrived, the last progress and the
    completion draw the very same figure into the same slot. Streamlit took those as one element twice
    (StreamlitDuplicateElementId) and stopped the playback before "Played ...": test_browser's playback test
    failed so at random under load. A redraw at every progress event (REDRAW_S 0) makes it certain."""
    import app.playback

    root, db = tmp_path / "root", tmp_path / "pb.duckdb"
    (root / "done").mkdir(parents=True)
    rows = [
        {"step": s, "data": {"train/loss": 3.0 - s * 0.01}} for s in range(1, 21)
    ]  # no wall_time: steps/s
    (root / "done" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "done" / "status.json").write_text(
        json.dumps({"state": "completed", "step": 20, "total_steps": 20})
    )
    monkeypatch.setenv("RUNWATCH_DB", str(db))
    monkeypatch.setenv("RUNWATCH_ROOTS", str(root))
    monkeypatch.setattr(app.playback, "REDRAW_S", 0.0)
    collector = start_collector(db, [root], tmp_path / "collector.log")
    try:
        client = collector.client()

        def read_to_its_end() -> bool:
            if client.get("/api/runs/done")["last_step"] != 20:
                raise LookupError("not read to step 20 yet")
            return True

        wait_for(read_to_its_end, "run done read to step 20", 120, proc=collector.proc)
        at = open_page("run", "done")
        at.select_slider(key="play_speed").set_value(10.0)
        at.button(key="play").click().run()
        assert not at.exception, [e.value for e in at.exception]
        assert any(c.value.startswith("Played 20 steps") for c in at.caption), [c.value for c in at.caption]
    finally:
        stop_process(collector.proc)


def _human_cli(collector, *args: str) -> str:
    """`collector ARGS` as a person reads it (no --json), 100 columns wide."""
    out = subprocess.run(
        [sys.executable, "-m", "collector", *args, "--db", str(collector.db)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "100"},
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_cleared_incident_still_open_is_said_alike_on_every_page(tmp_path, monkeypatch):
    """While a run goes on, an incident whose alerts all cleared stays open for its keep-firing window: the
    Alerts queue lists it as open, so the run page, the overview and the CLI's `runs`/`run` say so too (they
    said "none" and "—": no alert is open), and `open_alerts` still counts open alerts only."""
    root, db = tmp_path / "root", tmp_path / "own.duckdb"
    (root / "live").mkdir(parents=True)
    losses = [float("nan") if s == 30 else 1.0 / s for s in range(1, 41)]  # a NaN loss at step 30 of 40
    (root / "live" / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "data": {"train/loss": v}}) + "\n" for s, v in enumerate(losses, 1))
    )
    (root / "live" / "status.json").write_text('{"state": "running"}')
    collector = start_collector(db, [root], tmp_path / "collector.log")
    try:
        monkeypatch.setenv("RUNWATCH_DB", str(db))
        monkeypatch.setenv("RUNWATCH_ROOTS", str(root))
        client = collector.client()
        [incident] = wait_for(
            lambda: [i for i in client.get("/api/incidents?run=live") if i["first_step"] == 30],
            "live's NaN at step 30 told as an incident",
        )
        client.post(f"/api/incidents/{incident['id']}/resolve", {"note": "a bad batch"})
        [after] = client.get("/api/incidents?run=live&state=open")  # the queue still lists it as open
        assert after["id"] == incident["id"]
        detail = client.get("/api/runs/live")
        assert detail["open_alerts"] == {
            "error": 0,
            "warn": 0,
            "info": 0,
        }  # the contract: alerts not resolved
        assert detail["cleared_open_incidents"] == 1
        [row] = client.get("/api/runs")
        assert row["cleared_open_incidents"] == 1 and row["open_alerts"] == detail["open_alerts"]
        at = open_page("run", run="live")
        [tile] = [m for m in at.metric if m.label == "Open alerts"]
        assert tile.value == "1 incident cleared, still open", tile.value
        # one sentence from one place (`models.CLEARED_OPEN`): the CLI and the app worded it apart
        assert CLEARED_OPEN in tile.proto.help
        overview = open_page()
        assert list(overview.dataframe[0].value["alerts"]) == ["1 incident cleared, still open"]
        review = open_page("alerts")
        assert f"Every alert of this incident has cleared. {CLEARED_OPEN}" in [
            c.value for c in review.caption
        ]
        said = _human_cli(collector, "run", "live")
        assert "open alerts: 1 incident(s) cleared, still open" in said, said
        assert CLEARED_OPEN[:-1] in " ".join(said.split()), said
        table = _human_cli(collector, "runs")
        assert "cleared:1" in table and f"cleared: {CLEARED_OPEN[:-1]}" in " ".join(table.split())
    finally:
        stop_process(collector.proc)


def test_the_overview_says_what_an_rl_run_is_judged_by_as_collector_runs_does(tmp_path, monkeypatch):
    """An RL run logs no loss: the overview's loss columns said "—" for it while `collector runs` showed its
    reward (`r:`) and validation score (`s:`) with a legend under the table. The overview now shows the same
    values, marked the same, with the same legend (only while an RL run is in view); an SFT run is unchanged."""
    root, db = tmp_path / "root", tmp_path / "own.duckdb"
    write_rl_and_sft_runs(root)
    collector = start_collector(db, [root], tmp_path / "collector.log")
    try:
        monkeypatch.setenv("RUNWATCH_DB", str(db))
        monkeypatch.setenv("RUNWATCH_ROOTS", str(root))
        client = collector.client()

        def read_to_their_ends() -> dict:
            found = {r["id"]: r for r in client.get("/api/runs")}
            if any(found[k]["last_step"] != 20 for k in ("grpo", "sft")):
                raise LookupError("not read to step 20 yet")
            return found

        rows = wait_for(read_to_their_ends, "both runs read to step 20", proc=collector.proc)
        rl, sft = rows["grpo"], rows["sft"]
        assert rl["kind"] == "rl" and rl["train_loss"] is None and rl["val_loss"] is None
        assert math.isclose(rl["reward"], 0.1 + 20 / 97) and math.isclose(rl["val_score"], 0.3 + 20 / 331)
        assert sft["kind"] == "sft" and math.isclose(sft["val_loss"], 2.5 / 20)

        overview = open_page()
        table = overview.dataframe[0].value.set_index("run")
        # the dashboard's digits (4, as for its losses); the CLI's are 6: the same values
        assert table.loc["grpo", "train loss"] == f"r:{rl['reward']:.4g}"
        assert table.loc["grpo", "val loss"] == f"s:{rl['val_score']:.4g}"
        assert table.loc["sft", "train loss"] == f"{sft['train_loss']:.4g}"
        assert table.loc["sft", "val loss"] == f"{sft['val_loss']:.4g}"
        captions = [c.value for c in overview.caption]
        assert RL_JUDGED in captions, captions
        cli = _human_cli(collector, "runs")
        [cli_rl] = [line for line in cli.splitlines() if line.startswith("grpo ")]
        assert f"r:{rl['reward']:.6g}" in cli_rl and f"s:{rl['val_score']:.6g}" in cli_rl, cli_rl
        assert RL_JUDGED in " ".join(cli.split()), cli  # one legend, word for word

        overview.text_input[0].input("sft").run()  # no RL run in view: no legend
        assert list(overview.dataframe[0].value["run"]) == ["sft"]
        assert RL_JUDGED not in [c.value for c in overview.caption]
    finally:
        stop_process(collector.proc)
