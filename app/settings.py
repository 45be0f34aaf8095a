"""The dashboard's settings: database, watched roots, refresh interval.

Read from flags after `--` (`streamlit run app -- --db X --root Y --refresh 3`), else the environment
(`RUNWATCH_DB`, `RUNWATCH_ROOTS` separated by os.pathsep, `RUNWATCH_REFRESH`), else defaults that work from
the repository root (`.runwatch/runwatch.duckdb` (outside the watched root, so the collector never watches its own files), root `runs/`, 5 s).
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_DB = Path(".runwatch") / "runwatch.duckdb"
DEFAULT_ROOT = Path("runs")
DEFAULT_REFRESH_S = 5.0


class SettingsError(ValueError):
    """A setting that cannot be used; the message names the setting and its source."""


@dataclass(frozen=True)
class Settings:
    db: Path
    roots: tuple[Path | str, ...]  # a local folder, or `ssh://[user@]host[:port]/path` kept as written
    refresh_s: float
    # Whether the dashboard may start a collector for `db` when none runs: roots were named (flag or
    # environment), or nothing was (the quick start's defaults). A `--db` alone may be a team API's (`serve
    # --store` keeps no database file): a collector started there would watch `runs/` and take its marker.
    may_start: bool = True


def split_roots(text: str) -> list[str]:
    """RUNWATCH_ROOTS's roots: separated by `os.pathsep`; an `ssh://host[:port]/path` root keeps its colons."""
    sep = re.escape(os.pathsep)
    return re.findall(rf"ssh://[^/]+/[^{sep}]*|[^{sep}]+", text)


def _refresh(text: str, source: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SettingsError(f"{source}={text!r} is not a number of seconds") from None
    if value <= 0:
        raise SettingsError(f"{source}={text!r} must be more than 0 seconds")
    return value


def read_settings(argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> Settings:
    """Settings from `argv` (flags win), then `env`, then defaults; relative paths are resolved against `cwd`.

    Unknown arguments are ignored: under `streamlit.testing` the script sees the test runner's argv.
    """
    parser = argparse.ArgumentParser(prog="streamlit run app --", add_help=False, allow_abbrev=False)
    parser.add_argument("--db")
    parser.add_argument("--root", action="append")
    parser.add_argument("--refresh")
    flags, _ = parser.parse_known_args(list(argv))

    db_text = flags.db or env.get("RUNWATCH_DB") or str(DEFAULT_DB)
    if flags.root:
        roots_text = list(flags.root)
    elif env.get("RUNWATCH_ROOTS"):
        roots_text = split_roots(env["RUNWATCH_ROOTS"])
    else:
        roots_text = [str(DEFAULT_ROOT)]
    if flags.refresh is not None:
        refresh = _refresh(flags.refresh, "--refresh")
    elif env.get("RUNWATCH_REFRESH"):
        refresh = _refresh(env["RUNWATCH_REFRESH"], "RUNWATCH_REFRESH")
    else:
        refresh = DEFAULT_REFRESH_S

    def absolute(text: str) -> Path:
        path = Path(text).expanduser()
        return path if path.is_absolute() else (cwd / path)

    return Settings(
        db=absolute(db_text).resolve(),
        roots=tuple(r if r.startswith("ssh://") else absolute(r).resolve() for r in roots_text),
        refresh_s=refresh,
        may_start=bool(flags.root or env.get("RUNWATCH_ROOTS")) or not (flags.db or env.get("RUNWATCH_DB")),
    )
