"""A command's own peak RSS, measured from a small forking interpreter (shared by the benchmarks and the
memory tests; no import beyond the standard library).

On Linux a child's ru_maxrss starts from the high-water mark of the process that forked it, so forking the
measured command from a large process (a benchmark, a test suite's pytest) inflates it; `wrapped(cmd,
result)` forks it from a fresh small interpreter instead, which writes "exit_code wall_s peak_rss_kib" to
`result`, and `read_result(result)` reads that back.
"""

from __future__ import annotations

import sys
from pathlib import Path

_WRAPPER = """
import os, sys, time
out, cmd = sys.argv[1], sys.argv[2:]
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.execvp(cmd[0], cmd)
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
wall = time.perf_counter() - t0
with open(out, "w") as f:
    f.write("%d %r %d" % (os.waitstatus_to_exitcode(status), wall, usage.ru_maxrss))
"""


def wrapped(cmd: list[str], result: Path) -> list[str]:
    """`cmd` run under the small forking interpreter, which writes "exit_code wall_s peak_rss_kib" of it
    to `result` (see `_WRAPPER`): for a caller that handles the output itself."""
    return [sys.executable, "-S", "-c", _WRAPPER, str(result), *cmd]


def read_result(result: Path) -> tuple[int, float, float] | None:
    """(exit code, wall seconds, peak RSS in MB) that `wrapped` wrote, or None if it wrote nothing."""
    fields = result.read_text().split() if result.exists() else []
    if len(fields) != 3:
        return None
    return int(fields[0]), float(fields[1]), int(fields[2]) / 1024
