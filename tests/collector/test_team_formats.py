"""Team mode reads the formats whose files are protobuf records: a team collector (the team venv's interpreter)
on a root with a W&B offline run and a TensorBoard file publishes both runs' points. Before the team venv had
tensorboard and wandb (requirements-team.txt), the collector died at the first such file (No module named
'google' / 'wandb'). A throwaway PostgreSQL, a real collector and a real reader `serve --store`."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.collector.test_daemon_support import wait_for
from tests.collector.test_live_hf_first_checkpoint import LIFE, tensorboard
from tests.collector.test_parsers_wandb_offline import WRITER
from tests.collector.test_team import TEAM_PYTHON, TeamDaemon, lake_args
from tests.collector.test_team_first_checkpoint import lake_points
from tests.pg_support import PgServer, team_cluster


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    yield from team_cluster(TEAM_PYTHON)


def test_a_team_collector_publishes_wandb_offline_and_tensorboard_runs(pg, tmp_path):
    dsn, data = pg.new_database("protobuf_formats"), tmp_path / "lake"
    root = tmp_path / "root"
    env = os.environ | {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    subprocess.run([sys.executable, "-c", WRITER, str(root / "wb"), "0"], env=env, check=True, timeout=120)
    (wandb_file,) = root.glob("wb/wandb/offline-run-*/run-*.wandb")
    tensorboard(root / "tb")
    ann = TeamDaemon(tmp_path / "ann.duckdb", [root], *lake_args(dsn, data, "ann"))
    reader = TeamDaemon(tmp_path / "reader.duckdb", [], *lake_args(dsn, data))
    try:
        ann.start()
        reader.start()
        client = reader.client()
        wb = f"ann/wb/wandb/{wandb_file.parent.name}"
        runs = {wb, f"ann/tb/runs/{LIFE}"}
        wait_for(lambda: {r["id"] for r in client.get("/api/runs")} == runs, "both runs listed", log=ann.log)
        wait_for(
            lambda: ["train/loss", 40, 40] in lake_points(dsn, data, wb),
            "the W&B run's 40 losses",
            log=ann.log,
        )
        wait_for(lambda: lake_points(dsn, data, f"ann/tb/runs/{LIFE}"), "the TensorBoard run's points")
        assert ann.proc.poll() is None, ann.log.read_text()[-3000:]
    finally:
        assert reader.stop() == 0
        assert ann.stop() == 0
