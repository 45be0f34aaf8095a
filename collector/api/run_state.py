"""The collector's health as `/api/health` states it: its version, database, and each watched root's reachability."""

from __future__ import annotations

from pathlib import Path

from collector.ingest.fs import root_state

VERSION = "0.1.0"  # the collector's, as /api/health and /openapi.json state it


def health_info(db: Path, roots: list, version: str) -> dict:
    """The database, the roots as given (a path or `ssh://host/path`) and `root_states`: each root's `state`
    ("local", or its host's "connected"/"connecting"/"disconnected"), `since`, `error`, and for a remote root
    its host's `read_bytes` and `listing_bytes` so far."""
    states = [root_state(r) for r in roots]
    roots_text = [s["root"] for s in states]
    return {"ok": True, "db": str(db), "roots": roots_text, "root_states": states, "version": version}
