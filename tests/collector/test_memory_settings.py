"""What bounds the collector's memory is a setting with a default, and the daemon runs with it: DuckDB's memory
limit (`--memory-mb`, RUNWATCH_MEMORY_MB), the API requests answered at once (`--api-threads`,
RUNWATCH_API_THREADS), glibc's malloc arenas. A real daemon subprocess reports both settings in force in
`/api/health` (DuckDB's own setting, the thread pool's own size); peak memory itself is measured by
bench/memory_clients.py, not here."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from collector.core.runtime import API_THREADS, MEMORY_MB
from collector.store import read as store_read
from collector.store.db import Store
from tests.collector.test_daemon_support import REPO, Daemon, cli


def mib(mb: int) -> str:
    """How DuckDB states a limit of `mb` MB (in MiB, cut to one decimal)."""
    return f"{math.floor(mb * 1e6 / 2**20 * 10) / 10:.1f} MiB"


def test_the_store_holds_duckdb_to_its_memory_limit(tmp_path):
    assert store_read.memory_limit(Store(tmp_path / "a.duckdb")) == mib(MEMORY_MB)
    assert store_read.memory_limit(Store(tmp_path / "b.duckdb", memory_mb=200)) == mib(200)


@pytest.mark.parametrize(
    ("flags", "env", "memory_mb", "api_threads"),
    [
        ((), {}, MEMORY_MB, API_THREADS),
        (("--memory-mb", "200", "--api-threads", "3"), {}, 200, 3),
        ((), {"RUNWATCH_MEMORY_MB": "120", "RUNWATCH_API_THREADS": "2"}, 120, 2),
    ],
)
def test_the_daemon_runs_with_its_memory_settings(tmp_path, monkeypatch, flags, env, memory_mb, api_threads):
    (tmp_path / "root").mkdir()
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    d = Daemon(tmp_path / "rw.duckdb", [tmp_path / "root"], *flags)
    try:
        d.start()
        health = d.client().get("/api/health")
        assert (health["memory_limit"], health["api_threads"]) == (mib(memory_mb), api_threads)
    finally:
        d.ensure_stopped()


def test_a_setting_out_of_range_is_refused_with_its_name(tmp_path):
    (tmp_path / "root").mkdir()
    out = cli(tmp_path / "rw.duckdb", "serve", str(tmp_path / "root"), "--api-threads", "0", check=False)
    assert out.returncode == 1 and "--api-threads" in out.stderr


def test_malloc_arenas_are_capped_unless_the_environment_says_otherwise():
    code = "from collector.core.runtime import limit_malloc_arenas; print(limit_malloc_arenas())"
    run = [sys.executable, "-c", code]
    capped = subprocess.run(run, cwd=REPO, capture_output=True, text=True, env={"PATH": "/usr/bin"})
    assert capped.stdout.strip() == "True", capped.stderr  # glibc (the machines runwatch runs on)
    kept = subprocess.run(run, cwd=REPO, capture_output=True, text=True, env={"MALLOC_ARENA_MAX": "4"})
    assert kept.stdout.strip() == "False", kept.stderr
