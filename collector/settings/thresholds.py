"""The thresholds of each run, resolved in one place and reloaded when a runwatch.toml changes.

Stable interface:

- `thresholds_for(db) -> Thresholds`: the one resolver of this process for a database; detection (the
  daemon) and advice (the API, the CLI) both ask it, so they judge a run with the same numbers.
- `Thresholds.for_run(run_path) -> DetectConfig`: the defaults, then `DB.runwatch.toml`, then
  `RUN_DIR/runwatch.toml` (`run_path` a run folder; a one-file run has no folder file). The files are read
  again only when one's modification time or size changed (a stat per file per call), so asking on every
  point batch and every request is cheap. A malformed file is logged once per change and the run keeps the
  thresholds it had (the defaults when it never had any).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path, PurePath

from collector.core.runtime import thresholds_path
from collector.settings.config import ConfigError, DetectConfig, load_config

log = logging.getLogger("collector.detect")  # (the logger detection's warnings have always used)

RUN_TOML = "runwatch.toml"

Signature = tuple[tuple[int, int] | None, tuple[int, int] | None]


def _stamp(path: Path | None) -> tuple[int, int] | None:
    """(mtime in ns, size) of a file, None when there is none."""
    if path is None:
        return None
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


class Thresholds:
    """Resolved `DetectConfig` per run folder, cached until a runwatch.toml changes. Thread-safe."""

    def __init__(self, db: Path) -> None:
        self.db_toml = thresholds_path(Path(db))
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[Signature, DetectConfig]] = {}

    def for_run(self, run_path: str | Path | None) -> DetectConfig:
        """The thresholds for the run at `run_path` (None: the database's only)."""
        run_toml = None
        # (a remote run's folder is a path object of its host: kept, so its runwatch.toml is read there)
        folder = run_path if isinstance(run_path, PurePath) or run_path is None else Path(run_path)
        if folder is not None and folder.is_dir():
            run_toml = folder / RUN_TOML
        key = str(run_path or "")
        signature = (_stamp(self.db_toml), _stamp(run_toml))
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None and cached[0] == signature:
                return cached[1]
            try:
                config = load_config(self.db_toml, run_toml)
            except ConfigError as e:
                config = cached[1] if cached is not None else DetectConfig()
                kept = (
                    "keeps its previous thresholds" if cached is not None else "uses the default thresholds"
                )
                log.warning("%s; run folder %s %s", e, run_path or "(none)", kept)
            self._cache[key] = (signature, config)
            return config


_RESOLVERS: dict[str, Thresholds] = {}
_RESOLVERS_LOCK = threading.Lock()


def thresholds_for(db: Path) -> Thresholds:
    """This process's resolver for database `db` (made on first use)."""
    key = str(Path(db).resolve())
    with _RESOLVERS_LOCK:
        found = _RESOLVERS.get(key)
        if found is None:
            found = _RESOLVERS[key] = Thresholds(Path(db))
        return found
