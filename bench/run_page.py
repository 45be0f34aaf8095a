"""Run page: opening a 1M-step run in Chromium until its charts are drawn, and a zoom until finer buckets show.

The run, the collector and the browser are those of tests/app/test_million_steps.py (its file writer, a real
`collector serve`, a real `streamlit run`, headless Chromium through Playwright). After the collector has
stored every step and judged the backlog (so the page does not compete with judging), the page is opened
`--opens` times: open-to-drawn each time (every chart drawn and Streamlit idle; the app asks the API once
for the first view, `GET .../view`), with the CPU seconds the collector, Streamlit and Chromium used for it. Then one chart is zoomed with the mouse (a drag
over 5% of its width) and the time from releasing the mouse until the chart shows the window at full
resolution is measured.

    .venv/bin/python bench/run_page.py [--opens 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen  # noqa: E402
import harness  # noqa: E402

sys.path.insert(0, str(gen.REPO))
from tests.app.browser_support import CHART, chromium_page, streamlit_app, wait_for_charts, wait_idle  # noqa: E402
from tests.app.conftest import start_collector, stop_process  # noqa: E402
from tests.app.test_million_steps import RUN, STEPS, write_million_step_run  # noqa: E402

NAME = "run_page"
TARGET_S = 2.0

# The grad-norm chart's drawn x values (its first trace), read from plotly's own figure on the div.
READ_GRAD = f"""() => {{
  const gd = Array.from(document.querySelectorAll('{CHART}'))
    .find(g => ((g.layout.title && g.layout.title.text) || '').includes('Gradient norm'));
  if (!gd) return null;
  const xs = Array.from(gd.data[0].x || []);
  return {{n: xs.length, lo: Math.min(...xs), hi: Math.max(...xs)}};
}}"""


GRAD_PLOT_BOX = f"""() => {{
  const gd = Array.from(document.querySelectorAll('{CHART}'))
    .find(g => ((g.layout.title && g.layout.title.text) || '').includes('Gradient norm'));
  gd.scrollIntoView({{block: 'center'}});  // below the fold in a 1000-px window: a drag must land on it
  const r = gd.querySelector('.nsewdrag').getBoundingClientRect();
  return {{x: r.x, y: r.y, width: r.width, height: r.height}};
}}"""


def tree_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds used so far by the live descendants of `pid` (collector, Streamlit, Chromium), by program
    name, from /proc: steadier than wall time on a machine other people load."""
    parent: dict[int, int] = {}
    used: dict[int, float] = {}
    names: dict[int, str] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(entry)] = int(fields[1])
        used[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [w.decode(errors="replace") for w in cmd if w]
        names[int(entry)] = next(
            (k for k in ("collector", "streamlit", "chrom") if any(k in w for w in words[:4])), "other"
        )
    total: dict[str, float] = {}
    for p, cpu in used.items():
        q = parent.get(p)
        while q and q != pid:
            q = parent.get(q)
        if q == pid:
            name = names.get(p, "other")
            total[name] = total.get(name, 0.0) + cpu
    return total


def open_page(page, url: str) -> tuple[float, dict[str, float]]:
    """Open the run page: (wall seconds until every chart is drawn, CPU seconds all our processes used)."""
    page.goto(url + "/")  # the app's start-up is not part of the run page's time
    page.wait_for_selector('[data-testid="stDataFrame"]')
    cpu0, started = tree_cpu_s(os.getpid()), time.monotonic()
    page.goto(f"{url}/run?run={RUN}")
    wait_for_charts(page, 3)
    wall, cpu1 = time.monotonic() - started, tree_cpu_s(os.getpid())
    return wall, {k: round(v - cpu0.get(k, 0.0), 3) for k, v in cpu1.items()}


def zoom_grad_chart(page) -> dict:
    """Drag over 5% of the grad-norm chart's plot area; seconds until it draws the window finely."""
    before = page.evaluate(READ_GRAD)
    # Opening /run directly shows Streamlit's "page not found" notice over the page (the app then shows the
    # run page); a user closes it before dragging on a chart.
    if page.locator('[data-testid="stDialog"]').count():
        page.keyboard.press("Escape")
        page.wait_for_selector('[data-testid="stDialog"]', state="detached", timeout=30_000)
    box = page.evaluate(GRAD_PLOT_BOX)
    x0, x1 = box["x"] + box["width"] * 0.40, box["x"] + box["width"] * 0.45
    y = box["y"] + box["height"] / 2
    page.mouse.move(x0, y)
    page.mouse.down()
    page.mouse.move(x1, y, steps=8)
    released = time.monotonic()
    page.mouse.up()
    page.wait_for_selector("text=Zoomed to steps", timeout=120_000)
    wait_idle(page)
    page.wait_for_function(
        f"() => ({READ_GRAD})() && ({READ_GRAD})().hi - ({READ_GRAD})().lo < {STEPS} * 0.2", timeout=120_000
    )
    seconds = time.monotonic() - released
    after = page.evaluate(READ_GRAD)
    return {"seconds": seconds, "before": before, "after": after}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--opens", type=int, default=3)
    ap.add_argument("--judge-cap-s", type=float, default=300.0)
    ap.add_argument("--no-zoom", action="store_true", help="open only (for a build without zoom)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-run-page-") as tmp_name:
        tmp = Path(tmp_name)
        root = tmp / "root"
        write_million_step_run(root / RUN / "metrics.jsonl")
        collector = start_collector(tmp / "big.duckdb", [root], tmp / "collector.log")
        try:
            client = collector.client()
            t0 = time.monotonic()
            while time.monotonic() - t0 < 900:
                runs = client.get("/api/runs")
                if any(r["id"] == RUN and r.get("last_step") == STEPS for r in runs):
                    break
                time.sleep(0.5)
            stored_s = time.monotonic() - t0
            # Judging the stored backlog is done when the collector goes idle (older builds say nothing else).
            harness.wait_idle(collector.proc.pid, cap_s=args.judge_cap_s)
            judged_s = time.monotonic() - t0
            print(f"stored after {stored_s:.1f} s, judged after {judged_s:.1f} s", flush=True)
            opens: list[float] = []
            cpus: list[float] = []
            with (
                streamlit_app(collector.db, [root], tmp / "home", tmp / "streamlit.log") as url,
                chromium_page() as page,
            ):
                for _ in range(args.opens):
                    wall, cpu = open_page(page, url)
                    opens.append(wall)
                    cpus.append(sum(cpu.values()))
                    print(f"open to drawn {wall:.2f} s (CPU s: {cpu})", flush=True)
                zoomed = None if args.no_zoom else zoom_grad_chart(page)
                if zoomed:
                    print(f"zoom to finer buckets {zoomed['seconds']:.2f} s: {zoomed}", flush=True)
        finally:
            stop_process(collector.proc)
    res = {
        "steps": STEPS,
        "opens_s": opens,
        "median_open_s": statistics.median(opens),
        "first_open_s": opens[0],
        "cpu_s_per_open": cpus,
        "median_cpu_s": statistics.median(cpus),
        "load_average": os.getloadavg(),
        "zoom": zoomed,
        "stored_s": stored_s,
        "judged_s": judged_s,
        "target_s": TARGET_S,
    }
    res["met"] = res["median_open_s"] < TARGET_S
    gen.print_table(
        f"Run page of a {STEPS:,}-step run in Chromium",
        ["figure", "ours", "target"],
        [
            ["open to drawn, median s", res["median_open_s"], f"< {TARGET_S:g}"],
            ["open to drawn, each s", ", ".join(f"{s:.2f}" for s in opens), ""],
            ["CPU s of collector + Streamlit + Chromium per open, median", res["median_cpu_s"], ""],
        ]
        + (
            [
                [
                    "zoom (5% of the run) to finer buckets s",
                    zoomed["seconds"],
                    f"points drawn: whole run {zoomed['before']['n']}, zoomed window {zoomed['after']['n']}",
                ]
            ]
            if zoomed
            else []
        ),
    )
    print(f"wrote {gen.write_json(NAME, res)}")
    print(json.dumps(res)[:400])


if __name__ == "__main__":
    main()
