"""A parser that cannot run (its module missing from the environment, as tensorboard's protobuf was from the
team venv) fails its own files, named with why, and never the discovery of the others: it took the whole
`ingest` (and a `serve`) down from the peek that asks whether a file holds points."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO, SHARED

# Runs `collector ingest` in an interpreter where protobuf and tensorboard cannot be imported (a real import
# failure: a None in sys.modules makes Python's import raise ModuleNotFoundError).
WITHOUT_PROTOBUF = """
import sys
sys.modules["google"] = None
sys.modules["tensorboard"] = None
from collector.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_format_whose_module_is_missing_fails_its_file_not_the_other_runs(tmp_path):
    events = sorted((SHARED / "real-runs-wild" / "files").glob("*tfevents*"))[0]
    tb, hf = tmp_path / "root" / "tb", tmp_path / "root" / "hf"
    tb.mkdir(parents=True)
    hf.mkdir(parents=True)
    (tb / events.name).write_bytes(events.read_bytes())
    (tb / "train.log").write_text("step 1 loss 2.0\n")  # a console beside it: discovery peeks at the events
    state = {
        "global_step": 20,
        "max_steps": 20,
        "log_history": [{"step": 10, "loss": 2.0}, {"step": 20, "loss": 1.5}],
    }
    (hf / "trainer_state.json").write_text(json.dumps(state))
    db = tmp_path / "db.duckdb"
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_PROTOBUF, "ingest", "--db", str(db), "--json", str(tmp_path / "root")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert sorted(said["runs"]) == ["hf", "tb"] and said["points"] == 2  # the other run's points are stored
    failed = [f for f in said["not_read"]["tb"] if f["path"].endswith(events.name)]
    assert failed and "ModuleNotFoundError" in failed[0]["reason"], said["not_read"]
    assert events.name in done.stderr  # the log names the file and the error
