"""Run ids and messages from folder names print escaped in every table (issue 24.7): a folder named with ESC
colour codes, an OSC window title, a bell, a carriage return or a newline cannot restyle or retitle the
terminal, or fake a row (or a log line), through `collector ingest` (and its log), `runs`, `alerts`, `files` or
`check`."""

from __future__ import annotations

import json

from collector.core.printable import printable
from tests.collector.test_daemon_support import cli

HOSTILE = "red\x1b[31mrun\x1b]0;owned\x07\rcr\nfake-row\u202eevil"


def test_printable_escapes_controls_and_keeps_text():
    assert printable(HOSTILE) == "red\\e[31mrun\\e]0;owned\\x07\\rcr\\nfake-row\\u202eevil"
    assert printable("line one\nline two\x1b", newlines=True) == "line one\nline two\\e"
    assert printable("plain/run-1 é") == "plain/run-1 é"


def test_tables_print_hostile_run_ids_escaped(tmp_path):
    run = tmp_path / "runs" / HOSTILE
    run.mkdir(parents=True)
    lines = [{"step": s, "data": {"train/loss": 1.0 / s}} for s in range(1, 40)]
    lines.append({"step": 40, "data": {"train/loss": float("nan")}})  # a NaN: an alert naming the run
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (run / "notes.bin").write_bytes(b"\x00\x01\x02binary")  # a file not read: listed with the run
    db = tmp_path / "rw.duckdb"

    (run / "more.jsonl").write_text('{"step": 41, "data": {"x": 1.0}}\nnot json\n')  # a warning in the log
    ingest = cli(db, "ingest", str(tmp_path / "runs"))
    outputs = {"ingest": ingest.stdout, "ingest's log": ingest.stderr}
    assert "more.jsonl: line 2: invalid JSON" in ingest.stderr, ingest.stderr
    for command in ("runs", "alerts", "files"):
        outputs[command] = cli(db, command).stdout
    outputs["check"] = cli(db, "check", str(tmp_path / "runs"), check=False).stdout

    for command in ("runs", "alerts", "check"):
        assert "red\\e[31mrun" in outputs[command], (command, outputs[command])
    for command, out in outputs.items():
        for raw in ("\x1b", "\x07", "\r", "\u202e"):
            assert raw not in out, (command, raw, out)
        assert not any(line.startswith("fake-row") for line in out.splitlines()), (command, out)
