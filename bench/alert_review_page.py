"""The alert review page in Chromium: a real `collector serve` (this checkout's, or with `--before PATH` another
checkout's, in turns) over `--root`, this checkout's dashboard, and `/alerts` opened and then reloaded `--opens`
times: each time from asking for the page until the chosen incident's evidence is shown and Streamlit is idle.
What changes between the checkouts is the collector's side (the incidents and alerts with their actions the page
asks for on every render); the page itself is this checkout's.

    .venv/bin/python bench/alert_review_page.py --root ROOT [--opens 6] [--turns 1] [--before PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen  # noqa: E402
import harness  # noqa: E402

sys.path.insert(0, str(gen.REPO))
from tests.app.browser_support import chromium_page, streamlit_app, wait_idle  # noqa: E402
from tests.app.conftest import stop_process  # noqa: E402
from tests.waiting import wait_for  # noqa: E402

START_LIMIT_S = 600  # the collector reads and judges every run of the root first


def collector_of(tree: Path, db: Path, root: Path, log: Path) -> subprocess.Popen:
    """`tree`'s `collector serve` over `root`, once every run is listed and judged."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "collector", "serve", "--db", str(db), str(root), "--port", "0"],
            cwd=tree,
            env={**os.environ, "PYTHONPATH": str(tree)},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    from collector.api.client import Client

    def judged() -> bool:
        client = Client.for_db(db)
        if client is None:
            return False
        try:
            runs = client.get("/api/runs")
            return bool(runs) and all(r.get("judged_to") is None for r in runs)
        finally:
            client.close()

    try:
        wait_for(judged, f"the collector of {tree} to judge {root}", START_LIMIT_S, proc=proc, log=log)
    except BaseException:
        stop_process(proc)
        raise
    return proc


def opens(url: str, count: int) -> list[float | None]:
    """Seconds from asking for /alerts until the chosen incident's evidence shows and the page is idle: the
    first open, then `count` reloads (None for one that did not show it within two minutes: what the page
    showed instead is printed)."""
    from playwright.sync_api import TimeoutError as PageTimeout

    out: list[float | None] = []
    with chromium_page() as page:
        for i in range(count + 1):
            started = time.monotonic()
            try:
                page.goto(f"{url}/alerts") if i == 0 else page.reload()
                page.wait_for_selector("text=Evidence:")  # its charts, or its alerts for a run-level incident
                wait_idle(page)
            except PageTimeout:
                print(
                    f"open {i}: no evidence shown; the page said: {page.inner_text('body')[:300]!r}",
                    flush=True,
                )
                out.append(None)
                continue
            out.append(time.monotonic() - started)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, required=True, help="the runs the collectors serve")
    ap.add_argument("--opens", type=int, default=6, help="reloads after the first open (default 6)")
    harness.turn_arguments(ap, turns=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-alert-review-page-") as tmp_name:
        tmp = Path(tmp_name)
        for turn in range(args.turns):
            for name, tree in harness.checkouts(args.before).items():
                db = tmp / f"{name}-{turn}.duckdb"
                proc = collector_of(tree, db, args.root.resolve(), tmp / f"{name}-{turn}.log")
                try:
                    app = streamlit_app(
                        db, [args.root], tmp / f"home-{name}", tmp / f"st-{name}.log", refresh=3600
                    )
                    with app as url:
                        seconds = opens(url, args.opens)
                finally:
                    stop_process(proc)
                again = [s for s in seconds[1:] if s is not None]
                first = f"{seconds[0]:.2f} s" if seconds[0] is not None else "failed"
                print(
                    f"{name:6} turn {turn}: first open {first}, reloads median "
                    f"{statistics.median(again):.2f} s (min {min(again):.2f}, max {max(again):.2f}, "
                    f"{len(again)} of {len(seconds) - 1}); load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
