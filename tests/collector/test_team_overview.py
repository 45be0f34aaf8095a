"""A team reader's overview (`GET /api/runs`) kept across the lake's commits: after each change that real
collectors publish (new points, a new alert, an ack and a resolve asked on the reader, a new run, another
collector's run, a compaction, a stop) and a run's thresholds edited, the overview the reader keeps, built again
only for the runs that changed, is byte for byte the one built whole from the lake at that snapshot."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.collector.test_daemon_support import REPO, wait_for
from tests.collector.test_team import TEAM_PYTHON, TeamDaemon, lake_args, write_steps
from tests.pg_support import PgServer, team_cluster


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    yield from team_cluster(TEAM_PYTHON)


class Reader:
    """`team_overview_support` under the team venv: one reader's kept overview, asked over a pipe."""

    def __init__(self, dsn: str, data: Path, log: Path) -> None:
        self.log = log.open("wb")
        self.proc = subprocess.Popen(
            [str(TEAM_PYTHON), "-m", "tests.collector.team_overview_support", f"ducklake:postgres:{dsn}", str(data)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )  # fmt: skip

    def ask(self, op: str, **args) -> object:
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the reader exited: {self.proc.wait()}"
        return json.loads(line)

    def row(self, run: str) -> dict | None:
        return next((r for r in self.ask("overview") if r["id"] == run), None)

    def check(self, what: str, built: set[str] | None) -> dict:
        """The kept overview equals the one built whole; it built again the rows of the runs of `built` (and
        not of all: a collector may publish a run's later facts, e.g. its backlog judged, in between), or, with
        None, all of them."""
        out = self.ask("check")
        assert out["equal"], f"after {what}: the kept overview differs from the whole one: {out['differs']}"
        if built is None:
            assert out["built"] is None, f"after {what}: {out}"
        else:
            assert out["built"] is not None and built <= set(out["built"]), f"after {what}: {out}"
            assert len(out["built"]) < out["runs"], f"after {what}: {out}"
        return out

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        self.log.close()


def eval_steps(path: Path, steps: range, loss: float = 0.5) -> None:
    with path.open("a") as f:
        for s in steps:
            f.write(json.dumps({"step": s, "data": {"eval/loss": loss + 1.0 / s}}) + "\n")


def checkpoint(run: Path, step: int) -> None:
    """A complete HF checkpoint folder (a config, whole safetensors weights)."""
    folder = run / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    header = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 4)


def test_the_kept_overview_equals_the_whole_one_after_every_change(pg, tmp_path):
    dsn, data = pg.new_database("overview"), tmp_path / "lake"
    a1, a2, b1 = (
        (tmp_path / "alice" / "exp" / "a1"),
        (tmp_path / "alice" / "exp" / "a2"),
        (tmp_path / "bob" / "b1"),
    )
    for run, last in ((a1, 200), (a2, 100), (b1, 150)):
        write_steps(run / "metrics.jsonl", 1, last)
    eval_steps(a1 / "metrics.jsonl", range(50, 201, 50))
    checkpoint(a1, 100)
    checkpoint(a1, 200)
    daemons = [
        TeamDaemon(tmp_path / "alice.duckdb", [tmp_path / "alice"], *lake_args(dsn, data, "alice")),
        TeamDaemon(tmp_path / "bob.duckdb", [tmp_path / "bob"], *lake_args(dsn, data, "bob")),
    ]
    reader = None
    try:
        for d in daemons:
            d.start()
        reader = Reader(dsn, data, tmp_path / "reader.log")
        wait_for(lambda: len(reader.ask("overview")) == 3, "three runs in the lake")
        wait_for(lambda: (reader.row("alice/exp/a1") or {}).get("recommended_step"), "a1's recommended step")
        reader.check("the first call", None)
        assert reader.check("no commit", set())["runs"] == 3

        write_steps(a2 / "metrics.jsonl", 101, 130)
        wait_for(lambda: reader.row("alice/exp/a2")["last_step"] == 130, "a2's new points in the lake")
        reader.check("new points on one run", {"alice/exp/a2"})

        with (b1 / "metrics.jsonl").open("a") as f:
            f.write('{"step": 151, "data": {"train/loss": NaN, "train/lr": 0.0002}}\n')
        wait_for(lambda: reader.row("bob/b1")["anomaly_detected"], "bob's NaN alert in the lake")
        reader.check("a new alert", {"bob/b1"})
        [alert] = [a for a in reader.ask("alerts", run="bob/b1") if a["rule"] == "nonfinite"]

        reader.ask("ack", alert=alert["id"])
        wait_for(lambda: reader.ask("alert", alert=alert["id"])["state"] == "acked", "the ack applied by bob")
        reader.check("an ack asked on the reader", {"bob/b1"})

        write_steps(tmp_path / "alice" / "exp" / "a3" / "metrics.jsonl", 1, 40)
        wait_for(lambda: reader.row("alice/exp/a3"), "a new run of alice's in the lake")
        reader.check("a new run", {"alice/exp/a3"})

        carol = TeamDaemon(tmp_path / "carol.duckdb", [tmp_path / "carol"], *lake_args(dsn, data, "carol"))
        write_steps(tmp_path / "carol" / "c1" / "metrics.jsonl", 1, 60)
        daemons.append(carol)
        carol.start()
        wait_for(lambda: reader.row("carol/c1"), "carol's run in the lake")
        reader.check("a run from another collector", {"carol/c1"})

        # A compaction between two calls: DuckLake's change feed (`ducklake_table_changes`) loses the inserts
        # it merged, here all of a new run's rows.
        write_steps(a1 / "metrics.jsonl", 201, 250)
        eval_steps(a1 / "metrics.jsonl", [250], loss=0.1)
        write_steps(tmp_path / "alice" / "exp" / "a4" / "metrics.jsonl", 1, 30)
        wait_for(lambda: reader.row("alice/exp/a1")["last_step"] == 250, "a1's new points in the lake")
        wait_for(lambda: reader.row("alice/exp/a4"), "a new run a4 in the lake")
        reader.ask("compact")
        write_steps(a2 / "metrics.jsonl", 131, 140)
        wait_for(lambda: reader.row("alice/exp/a2")["last_step"] == 140, "a2's points after the compaction")
        reader.check(
            "a compaction between new points and a new run", {"alice/exp/a1", "alice/exp/a2", "alice/exp/a4"}
        )

        # A row deleted and none inserted: a checkpoint folder removed leaves its run's index.
        shutil.rmtree(a1 / "checkpoint-200")
        wait_for(lambda: reader.row("alice/exp/a1")["recommended_step"] == 100, "a1's checkpoint-200 gone")
        reader.check("a checkpoint removed", {"alice/exp/a1"})

        reader.ask("resolve", alert=alert["id"])
        wait_for(lambda: not reader.row("bob/b1")["anomaly_detected"], "the resolve applied by bob")
        reader.check("a resolve asked on the reader", {"bob/b1"})

        # No commit: a run's own thresholds edited are read again, and its row is built again.
        (a1 / "runwatch.toml").write_text("[rules.val_loss_rise]\npatience = 5\n")
        reader.check("a1's thresholds edited", {"alice/exp/a1"})

        reader.ask("stop", run="carol/c1")
        wait_for(lambda: (tmp_path / "carol" / "c1" / "runwatch.stop").exists(), "carol's stop file")
        reader.check("a stop", set())

        # Answered with the kept overview (a caller that allows its age): the one kept, saying its snapshot,
        # while a build in the background brings it up to date: equal to the whole one at its snapshot.
        write_steps(a2 / "metrics.jsonl", 141, 145)
        wait_for(lambda: reader.row("alice/exp/a2")["last_step"] == 145, "a2's points")
        out = reader.ask("served")
        assert out["kept"] and out["equal"] and out["newer"], out

        # Where most runs change at every commit, asking what changed costs more than building whole: past the
        # share, built whole, and the next calls build whole without asking (api_runs.WHOLE_FOR_S).
        reader.ask("whole_from", share=0.0, min_runs=1)
        write_steps(a2 / "metrics.jsonl", 146, 150)
        wait_for(lambda: reader.row("alice/exp/a2")["last_step"] == 150, "a2's points")
        reader.check("most runs changed (here: any)", None)
        write_steps(b1 / "metrics.jsonl", 301, 310)
        wait_for(lambda: reader.row("bob/b1")["last_step"] == 310, "b1's points")
        reader.check("within WHOLE_FOR_S of it", None)
    finally:
        if reader is not None:
            reader.close()
        for d in daemons:
            d.stop()
