"""Settings from flags, environment and defaults; finding a collector's marker (live or stale)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from app.connection import CollectorUnavailable, connect, marker_path, read_marker, roots_differ
from app.panels import metric_names, metrics_by_role, role_panels
from app.settings import DEFAULT_REFRESH_S, SettingsError, read_settings
from collector.api.models import MetricInfo, PanelInfo
from collector.api.runs import panels_of


def test_defaults_work_from_the_repository_root(tmp_path: Path):
    conf = read_settings([], {}, tmp_path)
    assert conf.db == tmp_path / ".runwatch" / "runwatch.duckdb"
    assert conf.roots == (tmp_path / "runs",)
    assert conf.refresh_s == DEFAULT_REFRESH_S


def test_flags_win_over_environment(tmp_path: Path):
    env = {
        "RUNWATCH_DB": "/x/env.duckdb",
        "RUNWATCH_ROOTS": os.pathsep.join(["/a", "/b"]),
        "RUNWATCH_REFRESH": "9",
    }
    from_env = read_settings([], env, tmp_path)
    assert from_env.db == Path("/x/env.duckdb")
    assert from_env.roots == (Path("/a"), Path("/b"))
    assert from_env.refresh_s == 9
    flags = ["--db", "d.duckdb", "--root", "r1", "--root", "/r2", "--refresh", "3", "--unrelated", "x"]
    conf = read_settings(flags, env, tmp_path)
    assert conf.db == tmp_path / "d.duckdb"
    assert conf.roots == (tmp_path / "r1", Path("/r2"))
    assert conf.refresh_s == 3


def test_a_database_named_without_roots_is_no_reason_to_start_a_collector(tmp_path: Path):
    """`--db` alone may be a team API's database (`serve --store` keeps no file there): with none running, the
    dashboard says so and how to start one, starting nothing (before, a collector on `runs/` took the
    database's marker, and the team API started later was refused). Roots named, the quick start's defaults
    or a local collector's existing file still start one."""
    db = tmp_path / "team.duckdb"
    assert read_settings(["--db", str(db)], {}, tmp_path).may_start is False
    assert read_settings([], {"RUNWATCH_DB": str(db)}, tmp_path).may_start is False
    assert read_settings(["--db", str(db), "--root", "r"], {}, tmp_path).may_start is True
    assert read_settings([], {"RUNWATCH_DB": str(db), "RUNWATCH_ROOTS": "r"}, tmp_path).may_start is True
    assert (
        read_settings([], {}, tmp_path).may_start is True
    )  # `python -m app`: .runwatch/runwatch.duckdb, runs/
    conf = read_settings(["--db", str(db)], {}, tmp_path)
    with pytest.raises(CollectorUnavailable) as refused:
        connect(conf.db, conf.roots, conf.may_start)
    said = str(refused.value)
    assert f"nothing is running for {db}" in said and f"serve --db {db} --store" in said, said
    assert f"--db {db} --root ROOT" in said, said
    assert not marker_path(db).exists() and not Path(f"{db}.collector.log").exists()  # nothing started
    assert not (tmp_path / "runs").exists()
    # A killed team API's marker (its pid gone) names the lake it served.
    marker_path(db).write_text(
        json.dumps({"pid": 2**22 + 7, "port": 1, "lake": "ducklake:postgres:dbname=lake"})
    )
    with pytest.raises(CollectorUnavailable, match="the team API of the lake ducklake:postgres:dbname=lake"):
        connect(conf.db, conf.roots, conf.may_start)


@pytest.mark.parametrize("bad", ["soon", "0", "-2"])
def test_a_bad_refresh_names_its_source(tmp_path: Path, bad: str):
    with pytest.raises(SettingsError, match="RUNWATCH_REFRESH"):
        read_settings([], {"RUNWATCH_REFRESH": bad}, tmp_path)
    with pytest.raises(SettingsError, match="--refresh"):
        read_settings(["--refresh", bad], {}, tmp_path)


def test_marker_of_a_dead_process_is_stale(tmp_path: Path):
    db = tmp_path / "r.duckdb"
    assert read_marker(db) is None
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    Path(f"{db}.collector.json").write_text(json.dumps({"pid": int(dead.stdout), "port": 1234, "roots": []}))
    assert read_marker(db) is None
    Path(f"{db}.collector.json").write_text(json.dumps({"pid": os.getpid(), "port": 1234, "roots": ["/a"]}))
    # A live pid that is no collector of this database (nothing proves itself on port 1234): stale too.
    assert read_marker(db) is None
    assert read_marker(db, prove=False)["port"] == 1234
    assert roots_differ(read_marker(db, prove=False), (Path("/a"), Path("/b"))) == ["/b"]
    Path(f"{db}.collector.json").write_text("{half")
    assert read_marker(db) is None


def test_panels_follow_the_roles_the_api_sends():
    # the run detail's `metrics` as the client parses them (collector.api.models.MetricInfo)
    metrics = TypeAdapter(list[MetricInfo]).validate_python(
        [
            {"metric": "val/loss", "points": 2, "last_step": 10, "role": "val_loss"},
            {"metric": "train/loss", "points": 9, "last_step": 10, "role": "loss"},
            {"metric": "train/lr(1e-3)", "points": 9, "last_step": 10, "role": "lr", "scale": 1e-3},
            {"metric": "perf/mfu", "points": 9, "last_step": 10, "role": None},
        ]
    )
    assert metric_names(metrics) == ["perf/mfu", "train/loss", "train/lr(1e-3)", "val/loss"]
    roles = metrics_by_role(metrics)
    assert roles == {"loss": ["train/loss"], "lr": ["train/lr(1e-3)"], "val_loss": ["val/loss"]}
    # the run detail's `panels`: what the collector declares for these roles (collector/core/panels.py)
    sent = TypeAdapter(list[PanelInfo]).validate_python(panels_of(set(roles)))
    assert [p.title for p in sent] == ["Loss", "Learning rate"]
    assert [(p.title, p.metrics, p.smooth) for p in role_panels(roles, sent)] == [
        ("Loss", ("train/loss", "val/loss"), True),
        ("Learning rate", ("train/lr(1e-3)",), False),
    ]
    # a panel the API did not send is not drawn, whatever the roles
    assert [p.title for p in role_panels(roles, sent[1:])] == ["Learning rate"]
