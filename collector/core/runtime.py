"""The collector's settings and the runtime files beside the database (marker, token, alert log, thresholds)."""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

# Team mode: a batch into the shared lake follows the ingest commit that stored new rows, at most one per
# PUBLISH_SOON_S from the last one's start (each is a catalog commit in Postgres); with nothing new, one every
# PUBLISH_INTERVAL_S (the stops and acks asked through the lake are read in it). bench/team.py.
PUBLISH_SOON_S = 0.5
PUBLISH_INTERVAL_S = 1.0
COMMIT_INTERVAL_S = 0.2  # the store commits at most this often while files change (batching, not per event)
RESCAN_INTERVAL_S = 5.0  # a full look at the roots, for events a filesystem did not deliver
POLL_INTERVAL_S = 0.25  # the polling observer's period (network filesystems)
# What bounds the daemon's memory (bench/memory_clients.py: five 1M-step backfills, 20 polling clients).
# DuckDB's buffer pool: its tables, the bulk readers' wide stage, every query's work (it spills to disk past
# this; 80 MB made concurrent chart queries fail).
MEMORY_MB = 160
# API requests answered at once (the rest wait their turn): each holds its query's memory while it runs, and
# Starlette's default of 40 let 20 dashboards add ~100 MB.
API_STOP_S = 60  # how long a stopping collector (or team reader) waits for the API's requests in flight
API_THREADS = 8
# glibc gives each thread its own malloc arena (up to 8 a core), each keeping what it freed: ~70 MB of the
# same benchmark's peak. Two arenas serve the ingest thread and the API threads.
MALLOC_ARENAS = 2
# How long a marker's collector has to prove itself before a command takes the marker for unanswered.
PROOF_TIMEOUT_S = 5.0


@dataclass
class Settings:
    """What `serve` runs with. Defaults are what a user gets without flags."""

    db: Path
    roots: list[Path] = field(default_factory=list)
    host: str = "127.0.0.1"
    port: int = 0  # 0 = a free port, written to the marker file
    polling: bool = False
    webhook: str | None = None
    commit_interval_s: float = COMMIT_INTERVAL_S
    rescan_interval_s: float = RESCAN_INTERVAL_S
    memory_mb: int = MEMORY_MB  # DuckDB's memory limit
    api_threads: int = API_THREADS  # API requests answered at once
    # Team mode (collector.store.lake): the shared lake, its data folder, this collector's name in it.
    store: str | None = None
    data_path: str | None = None
    collector_name: str | None = None
    publish_interval_s: float = PUBLISH_INTERVAL_S
    publish_soon_s: float = PUBLISH_SOON_S


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Cap glibc's malloc arenas for the threads this process starts from now on (see MALLOC_ARENAS); a
    `MALLOC_ARENA_MAX` in the environment stands instead. False where there is no glibc `mallopt`."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(-8, arenas))  # M_ARENA_MAX


# The database when none is named (the CLI's `--db`, the app's `--db`), from the folder it is started in.
DEFAULT_DB = Path(".runwatch") / "runwatch.duckdb"


def default_db() -> Path:
    """The database when none is named: `$RUNWATCH_DB`, else `.runwatch/runwatch.duckdb`."""
    return Path(os.environ.get("RUNWATCH_DB") or DEFAULT_DB)


def marker_path(db: Path) -> Path:
    """`DB.collector.json`: pid, host, port, started_at, roots of the running daemon."""
    return Path(f"{db}.collector.json")


def token_path(db: Path) -> Path:
    return Path(f"{db}.token")


def alerts_log_path(db: Path) -> Path:
    return Path(f"{db}.alerts.jsonl")


def thresholds_path(db: Path) -> Path:
    return Path(f"{db}.runwatch.toml")


def scratch_path(db: Path) -> Path:
    """`DB.ingest/`: each collector process's scratch folder (pieces of a backlog copied for DuckDB)."""
    return Path(f"{db}.ingest")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, someone else's
    return True


def command_of(pid: int) -> str | None:
    """The command line of a running process (from /proc), None when it cannot be read."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    words = [w.decode(errors="replace") for w in raw.split(b"\0") if w]
    if words:
        words[0] = os.path.basename(words[0])
    return " ".join(" ".join(words).split()) or None


def read_marker(db: Path, prove: bool = True) -> dict | None:
    """The live daemon's marker for `db`, or None when there is none, it is half-written, its pid is dead,
    or (with `prove`) what answers on its port cannot prove it holds the database's token: a stale marker
    whose pid and port were taken by other programs after a kill -9 (see `marker_state`)."""
    try:
        info = json.loads(marker_path(db).read_text())
    except (OSError, ValueError):
        return None
    pid = info.get("pid") if isinstance(info, dict) else None
    if not isinstance(pid, int) or not pid_alive(pid) or not info.get("port"):
        return None
    if prove and marker_state(db, info) != "proven":
        return None
    return info


def marker_state(db: Path, info: dict, timeout_s: float = PROOF_TIMEOUT_S) -> str:
    """Whether the collector a marker names is the one answering on its port, asked before any token is
    sent: `GET /api/identity?challenge=C` must answer the marker's pid and HMAC(token, C), which only a
    process that read `DB.token` can give. "proven"; "stale" when something else answers (another server,
    an old collector of another database) or nothing listens; "unanswered" when it accepts but does not
    answer in `timeout_s` (a busy collector, or a program that holds the port) or the token is unreadable."""
    import urllib.error
    import urllib.request

    token = read_token(db)
    if token is None:
        return "unanswered"
    challenge = secrets.token_hex(16)
    url = f"http://{info.get('host') or '127.0.0.1'}:{info['port']}/api/identity?challenge={challenge}"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never via a proxy
    try:
        with opener.open(url, timeout=timeout_s) as response:
            answer = json.loads(response.read(4096))
    except TimeoutError:
        return "unanswered"
    except urllib.error.URLError as e:
        return "unanswered" if isinstance(e.reason, TimeoutError) else "stale"
    except (OSError, ValueError):  # refused, reset, or an answer that is not our JSON
        return "stale"
    if not isinstance(answer, dict) or answer.get("pid") != info.get("pid"):
        return "stale"
    proof = str(answer.get("proof", ""))
    return "proven" if secrets.compare_digest(proof, identity_proof(token, challenge)) else "stale"


def identity_proof(token: str, challenge: str) -> str:
    """What `GET /api/identity` answers to `challenge`: proof of holding the token without sending it."""
    return hmac.new(token.encode(), f"runwatch-identity:{challenge}".encode(), hashlib.sha256).hexdigest()


# Set by the dashboard's launcher (`python -m app`) to its pid: a collector its dashboard starts records it in
# its marker as `dashboard_pid`, so that the launcher stops only that one when it stops.
DASHBOARD_ENV = "RUNWATCH_DASHBOARD_PID"


def write_marker(db: Path, info: dict) -> None:
    """Write the marker atomically (readers never see half a file); with `dashboard_pid` when a dashboard's
    launcher started this process (`DASHBOARD_ENV`)."""
    if (launcher := os.environ.get(DASHBOARD_ENV, "")).isdigit():
        info = info | {"dashboard_pid": int(launcher)}
    path = marker_path(db)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(info))
    os.replace(tmp, path)


def remove_marker(db: Path, pid: int) -> None:
    """Remove the marker if it is ours (a newer daemon's marker stays)."""
    path = marker_path(db)
    with contextlib.suppress(OSError, ValueError):
        if json.loads(path.read_text()).get("pid") == pid:
            path.unlink()


PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700


def keep_private(db: Path) -> None:
    """Make everything this process writes beside `db` readable by its owner only, whatever the umask.

    From here on new files are 0600 and new folders 0700 (the umask of this process becomes 0o077: DuckDB's
    file and WAL, the alert log, the marker, scratch pieces); files an older collector or a looser umask
    left readable by others are re-moded. A shared GPU node's other users then cannot read the runs.
    """
    os.umask(0o077)
    for path in (db, Path(f"{db}.wal"), token_path(db), marker_path(db), alerts_log_path(db)):
        with contextlib.suppress(FileNotFoundError):
            os.chmod(path, PRIVATE_FILE)
    scratch = scratch_path(db)
    if scratch.is_dir():
        os.chmod(scratch, PRIVATE_DIR)
        for child in scratch.iterdir():
            with contextlib.suppress(FileNotFoundError):
                os.chmod(child, PRIVATE_DIR if child.is_dir() else PRIVATE_FILE)


def read_token(db: Path) -> str | None:
    try:
        return token_path(db).read_text().strip() or None
    except OSError:
        return None


def ensure_token(db: Path) -> str:
    """The API token for `db`, created (mode 0600, only the owner can read it) when missing."""
    existing = read_token(db)
    if existing:
        os.chmod(token_path(db), 0o600)
        return existing
    token = secrets.token_urlsafe(32)
    fd = os.open(token_path(db), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token
