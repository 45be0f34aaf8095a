"""`scripts.label_eval --extra DIR`: the extra labelled set (public logs ../shared lacks) is judged from local
copies checked by sha256, through the real collector, as a row of its own."""

from __future__ import annotations

import hashlib
import json
import re
import tomllib

from scripts.label_eval import EXTRA_LABELS, evaluate_extra, load_labels

HEX40 = re.compile(r"[0-9a-f]{40}")
HEX64 = re.compile(r"[0-9a-f]{64}")


def test_every_extra_label_names_its_file_by_repository_path_commit_and_digest() -> None:
    labels = load_labels(EXTRA_LABELS)
    assert len(labels) >= 7
    for name, label in labels.items():
        owner, repo = label["repo"].split("/")
        assert name.startswith(f"{owner}__{repo}__"), name
        assert label["path"] and not label["path"].startswith("/"), name
        assert HEX40.fullmatch(label["commit"]) and HEX64.fullmatch(label["sha256"]), name
        assert isinstance(label["healthy"], bool) and label["numbers"] and label["format"], name


def _metrics(steps: int) -> bytes:
    """A small healthy run: a loss falling smoothly, one JSON line per step."""
    return b"".join(
        json.dumps({"step": s, "loss": 2.0 / (1 + 0.1 * s)}).encode() + b"\n" for s in range(1, steps + 1)
    )


def test_fetched_files_are_judged_missing_and_changed_ones_are_listed_not_judged(tmp_path) -> None:
    fetched, labels_path = tmp_path / "fetched", tmp_path / "extra.toml"
    fetched.mkdir()
    good, changed = _metrics(40), _metrics(30)
    (fetched / "a__one__metrics.jsonl").write_bytes(good)
    (fetched / "b__two__metrics.jsonl").write_bytes(changed + b"\n")  # not the bytes the label names
    entries = {
        "a__one__metrics.jsonl": good,
        "b__two__metrics.jsonl": changed,
        "c__three__metrics.jsonl": good,  # never fetched
    }
    text = ""
    for name, data in entries.items():
        owner, repo = name.split("__")[:2]
        text += (
            f'["{name}"]\nrepo = "{owner}/{repo}"\npath = "logs/metrics.jsonl"\ncommit = "{"0" * 40}"\n'
            f'sha256 = "{hashlib.sha256(data).hexdigest()}"\nformat = "jsonl"\nhealthy = true\n'
            f'numbers = "loss 2.0 -> 0.4 smooth"\nforbid = [{{ rule = "loss_plateau" }}]\n\n'
        )
    labels_path.write_text(text)
    assert len(tomllib.loads(text)) == 3

    report = evaluate_extra(fetched, labels_path)

    assert report["not_fetched"] == ["c__three__metrics.jsonl"]
    assert len(report["mismatched"]) == 1 and report["mismatched"][0].startswith("b__two__metrics.jsonl")
    (row,) = report["files"]
    assert row["file"] == "a__one__metrics.jsonl" and row["read"] == "ok" and row["corpus"] == "extra"
    assert row["last_step"] == 40 and row["logged_steps"] == 40
    assert row["false_alarms"] == [] and report["summary"]["files"] == 1
