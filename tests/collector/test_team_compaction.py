"""Team mode's compaction kept apart from the collectors' writes (`store/lake_compaction.py`): DuckLake 0.3 merging
a table's files beside a transaction deleting rows of it can commit both, bringing the deleted rows back (measured:
at 4 x 250 live runs, 409 rows of `runs` twice after one compaction). A compaction waits for a write in flight,
and the rows it deleted stay deleted."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.collector.test_daemon_support import REPO
from tests.collector.test_team import TEAM_PYTHON
from tests.pg_support import PgServer, team_cluster


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    yield from team_cluster(TEAM_PYTHON)


# A writer deletes a row inside the lake's write lock and holds its transaction open for a while; a compaction
# asked meanwhile ends after the writer's commit, and the merged table lacks the deleted row.
WRITE_THEN_COMPACT = """
import json, sys, threading, time
from collector.store import lake_compaction
from collector.store.db import Store
from collector.store.lake import LAKE, LakePublisher, LakeSpec
pub = LakePublisher(Store(sys.argv[3]), LakeSpec.parse(sys.argv[1], sys.argv[2]), "probe")
pub._connect()
pub.cur.execute(f"CREATE TABLE {LAKE}.compact_probe(a INTEGER)")
for a in range(1, lake_compaction.MERGE_FROM_FILES + 2):  # a file each: enough to merge after a delete
    pub.cur.execute(f"INSERT INTO {LAKE}.compact_probe VALUES (?)", [a])
writer, events, holding = pub.cur.cursor(), [], threading.Event()
def write():
    with lake_compaction.lake_lock(writer, LAKE, exclusive=False):
        writer.execute("BEGIN TRANSACTION")
        writer.execute(f"DELETE FROM {LAKE}.compact_probe WHERE a = 2")
        holding.set()
        time.sleep(2.0)
        writer.execute("COMMIT")
        events.append("committed")
thread = threading.Thread(target=write)
thread.start()
holding.wait(60)
events.append("compacted" if pub.compact(0.0) else "passed")
thread.join()
rows = [a for (a,) in pub.cur.execute(f"SELECT a FROM {LAKE}.compact_probe ORDER BY a").fetchall()]
files = pub.cur.execute(f"SELECT count(*) FROM ducklake_list_files('{LAKE}', 'compact_probe')").fetchone()[0]
print(json.dumps([events, rows, files]))
"""


def probe(script: str, dsn: str, tmp_path: Path, *args: str) -> object:
    """What `script` prints (JSON), run in the team venv on the lake `dsn` (data under tmp_path/lake)."""
    done = subprocess.run(
        [str(TEAM_PYTHON), "-c", script, f"ducklake:postgres:{dsn}", str(tmp_path / "lake"),
         str(tmp_path / "p.duckdb"), *args],
        cwd=REPO, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_a_compaction_waits_for_a_write_in_flight_and_its_deleted_rows_stay_deleted(pg, tmp_path):
    events, rows, files = probe(WRITE_THEN_COMPACT, pg.new_database("compactlock"), tmp_path)
    assert events == [
        "committed",
        "compacted",
    ]  # without the lock the merge ended first, 2 s before the commit
    assert rows == [1, *range(3, 18)]
    assert files == 1  # merged: the inserts' files are one


# `collector forget` and a collector's start (claiming its name) delete rows too: each holds its transaction open
# for a while (after its live check), and a compaction asked meanwhile ends only after it committed.
FORGET_OR_CLAIM_THEN_COMPACT = """
import json, sys, threading, time
from collector.store import lake_forget, lake_names
from collector.store.db import Store
from collector.store.lake import LakePublisher, LakeSpec
spec, db = LakeSpec.parse(sys.argv[1], sys.argv[2]), sys.argv[3]
LakePublisher(Store(db + ".carol"), spec, "carol")  # registered: a row of team_names to forget
other = LakePublisher(Store(db), spec, "probe")
events, holding = [], threading.Event()
checked = lake_names.live_holder
def slow(*args):  # forget's and claim's live check, inside their lake transaction
    found = checked(*args)
    holding.set()
    time.sleep(2.0)
    return found
lake_names.live_holder = slow
def write():
    if sys.argv[4] == "forget":
        lake_forget.forget_collector(spec, "carol")
    else:
        LakePublisher(Store(db + ".dave"), spec, "dave")
    events.append("committed")
thread = threading.Thread(target=write)
thread.start()
holding.wait(60)
events.append("compacted" if other.compact(0.0) else "passed")
thread.join()
print(json.dumps(events))
"""


@pytest.mark.parametrize("writer", ["forget", "claim"])
def test_a_compaction_waits_for_a_forget_or_a_start_in_flight(pg, tmp_path, writer):
    events = probe(FORGET_OR_CLAIM_THEN_COMPACT, pg.new_database(f"compact{writer}"), tmp_path, writer)
    assert events == ["committed", "compacted"]  # without the lock the merge ended first
