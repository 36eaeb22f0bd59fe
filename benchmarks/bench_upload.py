"""One large upload in the dashboard: how soon its first table shows, how fast the tabs switch
with it open, and how much memory the server holds for it. Issue 10's dashboard targets: a 1 GB
upload shows its first table within 10 s, a tab switch with it open answers within 2 s, and the
upload is not held in memory twice.

    python benchmarks/bench_upload.py [--write] [--bound 600] [TRACE ...]

With no traces: benchmarks/out/large.json and benchmarks/out/large1g.json when they exist (make
them with `python benchmarks/make_large_trace.py [--target-mb 1000 --out benchmarks/out/large1g.json]`).
Each trace gets a fresh server (tests/browser_server.py, with server.maxUploadSize raised to fit
it, an empty store folder and no file watcher: an edit to the sources mid-run would otherwise
leave a "Source file changed" prompt up) and a fresh headless Chromium, which opens the app,
uploads the trace through the sidebar's uploader (a raw PUT to the upload route) and clicks through every tab, then back to
Overview.

Prints the machine's facts (benchmarks/bench_load.py), then one row per trace: JSON MB; seconds
from the start of the upload to the end of its HTTP transfer (browser -> server), to the
"Parsing ..." progress bar (the app's run has the bytes and their hash), and to the first table
(the overview grid's row for the upload drawn); the tab switch times (from the click as the page
took it to the page drawn with the run it caused finished, no stale element left and the tab's
table or chart attached, by the page's own clock: in_page.py), median and max, and the slowest tab; the server's RSS (with its worker processes,
sampled every 0.1 s) before the upload, its peak from the upload until the last tab switch,
that peak over the JSON size, its RSS once settled with the trace open, and after the browser
closed (past the disconnected-session TTL). A second line gives each tab's time and the peaks
of the upload+open and of the tab switches apart; then any problems seen (exception boxes, a
run that never finished, errors in the server's log). Needs chromium and playwright, as
tests/test_dashboard_browser.py. The machine is shared: note the load average printed first.

`--write` also puts the rows as a Markdown table (goals of issue 10 in brackets) in
docs/generated/speed-upload.md, which docs/speed.md includes: the published numbers are the
benchmark's, never typed. For the docs, the 910 MB trace as .json.gz and plain:

    gzip -6 -k benchmarks/out/large1g.json
    python benchmarks/bench_upload.py --write benchmarks/out/large1g.json.gz benchmarks/out/large1g.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

import in_page  # noqa: E402
from bench_load import facts, json_size  # noqa: E402
from browser_server import Server, rss_bytes, settled_rss  # noqa: E402
from test_dashboard_browser import (  # noqa: E402
    CHROMIUM,
    CHROMIUM_ARGS,
    TABS,
    TOLD_JS,
    WIDTH,
    _browser_or_reason,
    _settle,
)

from dashboard.catalog import trace_stem  # noqa: E402

MB = 1e6
MIB = 1024 * 1024
GENERATED = HERE.parent / "docs" / "generated" / "speed-upload.md"
# Issue 10's dashboard targets: the first table within 10 s, a tab switch within 2 s, the upload
# not held in memory twice (the server's peak RSS, workers included, under twice the JSON).
GOAL_FIRST_TABLE_S, GOAL_SWITCH_S, GOAL_PEAK_RATIO = 10, 2, 2
TTL_S = 2  # server.disconnectedSessionTTL: how long a closed session's uploads outlive it
OVERVIEW_ROWS = "[class*='st-key-tbl_overview'] [role=row]"
# Notes in the page the moment the progress bar first says "Parsing" (Date.now(), ms).
WATCH_PARSING = """() => {
  window.__benchParsing = null;
  const seen = () => {
    for (const bar of document.querySelectorAll("[data-testid=stProgress]")) {
      if (bar.textContent.includes("Parsing")) { window.__benchParsing = Date.now(); return true; }
    }
    return false;
  };
  if (seen()) return;
  const watch = new MutationObserver(() => { if (seen()) watch.disconnect(); });
  watch.observe(document.body, {childList: true, subtree: true, characterData: true});
}"""


class Peak:
    """The highest rss_bytes(pid) read every 0.1 s while running; mark() starts a new phase."""

    def __init__(self, pid: int) -> None:
        self.pid, self.phases, self.done = pid, {}, threading.Event()
        self.phase = "start"
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self.done.is_set():
            try:
                value = rss_bytes(self.pid)
            except Exception:  # noqa: BLE001 - a slice worker that just ended
                value = 0
            self.phases[self.phase] = max(self.phases.get(self.phase, 0), value)
            self.done.wait(0.1)

    def mark(self, phase: str) -> None:
        self.phase = phase

    def __enter__(self) -> "Peak":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()


def is_script_finished(payload) -> bool:
    """Whether a websocket frame from the server is the ForwardMsg that ends a script run."""
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    if not isinstance(payload, bytes):
        return False
    try:
        return ForwardMsg.FromString(payload).WhichOneof("type") == "script_finished"
    except Exception:  # noqa: BLE001 - not a ForwardMsg
        return False


def drive(browser, server: Server, path: Path, bound_s: float) -> dict:
    """Open the app, upload `path`, wait for its overview row, switch through every tab."""
    bound_ms = bound_s * 1000
    label = trace_stem(path.name)
    page = browser.new_page(viewport={"width": WIDTH, "height": 1000})
    problems: list[str] = []
    finished: list[float] = []  # time.monotonic() of each script_finished the page received
    transfer: dict[str, float] = {}

    _watch(page, problems, finished, transfer)
    in_page.install(page)
    page.goto(server.url)
    page.locator(".st-key-tbl_overview").first.wait_for(timeout=bound_ms)
    _settle(page)
    result: dict = {"rss_before": rss_bytes(server.pid), "problems": problems, "switches": {}}
    page.evaluate(WATCH_PARSING)

    with Peak(server.pid) as peak:
        peak.mark("open")
        wall0, start = time.time(), time.monotonic()
        page.set_input_files("[data-testid=stSidebar] input[type=file]", str(path))
        page.locator(OVERVIEW_ROWS, has_text=label).first.wait_for(state="attached", timeout=bound_ms)
        result["first_table"] = time.monotonic() - start
        _settle(page)
        parsing = page.evaluate("() => window.__benchParsing")
        result["parsing"] = parsing / 1000 - wall0 if parsing else None
        result["transfer"] = transfer["end"] - wall0 if "end" in transfer else None
        if (
            page.locator("[data-testid='stException']").count()
            or page.locator("[data-testid=stSidebar] [data-testid=stAlert]").count()
        ):
            problems.append(
                "after the upload: "
                + " | ".join(
                    page.locator(
                        "[data-testid=stException], [data-testid=stSidebar] [data-testid=stAlert]"
                    ).all_inner_texts()
                )
            )

        peak.mark("tabs")
        result["switches"] = _switch_tabs(page, finished, problems, bound_s)
        result["rss_open"] = settled_rss(server.pid, 1.0)
    result["peak_open"], result["peak_tabs"] = peak.phases.get("open", 0), peak.phases.get("tabs", 0)
    page.close()
    return result


def _watch(page, problems: list[str], finished: list[float], transfer: dict[str, float]) -> None:
    """Listen on the page: its errors and failed uploads into `problems`, each script_finished
    frame's time into `finished`, the upload's end (by the request's own timing) into `transfer`."""

    def on_request_finished(request) -> None:
        if "/api/upload" in request.url and request.method in ("PUT", "POST"):
            transfer["end"] = time.time()
            timing = request.timing
            if timing.get("startTime", -1) > 0 and timing.get("responseEnd", -1) >= 0:
                transfer["end"] = (timing["startTime"] + timing["responseEnd"]) / 1000

    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.on(
        "websocket",
        lambda ws: ws.on(
            "framereceived", lambda payload: finished.append(time.monotonic()) if is_script_finished(payload) else None
        ),
    )
    page.on("requestfinished", on_request_finished)
    page.on(
        "requestfailed",
        lambda r: problems.append(f"upload request failed: {r.failure}") if "/api/upload" in r.url else None,
    )


# what shows a tab is drawn: its keyed element (the tests' TABS), and for the two tabs they leave out
SHOWN = {tab: f".st-key-{key}" for tab, key in TABS.items()} | {
    "Ranks": ".st-key-ranks_none, .st-key-ranks_single, .st-key-ranks_other, [class*='st-key-chart_ranks_']",
    "Sweep": ".st-key-sweep_folder, .st-key-chart_sweep_time",
}


BUSY_WITHIN_S = 0.7  # a switch's own work: before the run that tells the server the tab (0.8 s on)


def _switch_tabs(
    page,
    finished: list[float],
    problems: list[str],
    bound_s: float,
    seen: dict[str, float] | None = None,
    busy: dict[str, float] | None = None,
) -> dict[str, float]:
    """Click through every tab (from Overview through the rest and back): tab -> seconds from the
    click until the tab is shown, by the page's clock (in_page.py: the page must have
    in_page.install() before it opened); the same as this process saw them (from before the click
    to its Playwright wait for the tab's element shown) into `seen`; until the page's main thread was
    free again (the last long task begun within BUSY_WITHIN_S of the click) into `busy`; what went
    wrong into `problems`. The page keeps every tab drawn (dashboard/views/tab_set.py): a switch shows one and
    runs nothing; the run that tells the server the open tab follows once the reader stays on it,
    and _settle waits for it before the next click."""
    bound_ms = bound_s * 1000
    switches: dict[str, float] = {}
    names = [t.strip() for t in page.get_by_role("tab").all_inner_texts()]
    for tab in names[1:] + names[:1]:  # from Overview through the rest and back: each click a switch
        before = len(finished)
        in_page.arm(page, SHOWN.get(tab), run=False)
        start = time.monotonic()
        page.get_by_role("tab", name=tab, exact=True).click()
        if tab in SHOWN:
            page.locator(SHOWN[tab]).first.wait_for(state="visible", timeout=bound_ms)
        drawn = time.monotonic()
        page.wait_for_function(TOLD_JS, timeout=bound_ms)  # a reader on the tab: the server is told which
        _settle(page)
        if len(finished) == before:
            problems.append(f"{tab}: the open tab was not told to the server (no script run after the click)")
        if seen is not None:
            seen[tab] = drawn - start
        switches[tab] = in_page.done(page, bound_s)
        if busy is not None:
            busy[tab] = in_page.busy_after(page, BUSY_WITHIN_S)
        if page.locator("[data-testid='stException']").count() or page.get_by_text("tab could not be drawn").count():
            problems.append(
                f"{tab}: "
                + " | ".join(page.locator("[data-testid=stException], [data-testid=stAlert]").all_inner_texts())[:300]
            )
    return switches


def measure(path: Path, bound_s: float) -> dict:
    """One trace on a fresh server with an empty store."""
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="attnscope-bench-upload-") as tmp:
        folder = Path(tmp)
        options = [
            "--server.maxUploadSize",
            str(path.stat().st_size // MIB + 64),
            "--server.disconnectedSessionTTL",
            str(TTL_S),
            "--server.fileWatcherType",
            "none",
        ]
        with Server(folder / "store", folder / "streamlit.log", options=options) as server:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                try:
                    result = drive(browser, server, path, bound_s)
                finally:
                    browser.close()
            result["rss_closed"] = settled_rss(server.pid, TTL_S + 3)
            result["log"] = server.log()
    return result


def row(path: Path, size: int, r: dict) -> dict:
    """What the docs' table shows of one measure() result, in MB and seconds."""
    errors = [line for line in r["log"].splitlines() if "Error" in line or "Traceback" in line]
    return {
        "trace": path.name,
        "gz": path.name.endswith(".gz"),
        "file_mb": path.stat().st_size / MB,
        "json_mb": size / MB,
        "transfer": r["transfer"],
        "first_table": r["first_table"],
        "switches": dict(r["switches"]),
        "rss_before": r["rss_before"] / MB,
        "peak": max(r["peak_open"], r["peak_tabs"]) / MB,
        "rss_open": r["rss_open"] / MB,
        "rss_closed": r["rss_closed"] / MB,
        "problems": len(r["problems"]) + len(errors),
    }


def table(rows: list[dict], when: str, cores: int | None, load: float | None = None) -> str:
    """The Markdown of docs/generated/speed-upload.md: one row per upload (row()), each ratio
    computed here from the row's measurements."""
    busy = f", load average {load:.1f} before the run" if load is not None else ""
    lines = [
        f"Measured by `benchmarks/bench_upload.py` on {when}: {cores} cores{busy}. Each file uploaded by "
        "headless Chromium on the same machine through the sidebar's uploader to a fresh server (an empty "
        "store), then every tab clicked and back to Overview; the server's RSS includes its worker "
        "processes, sampled every 0.1 s. Goals (issue 10) in brackets.",
        "",
        f"| trace | upload | file MB | JSON MB | transfer s | first table s [< {GOAL_FIRST_TABLE_S}] | "
        f"tab switch median s | slowest tab switch s [< {GOAL_SWITCH_S}] | slowest tab | server RSS before MB | "
        f"server peak RSS MB | peak / JSON [< {GOAL_PEAK_RATIO}] | RSS open MB | RSS after close MB | problems |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        switches = r["switches"]
        slowest = max(switches, key=switches.get)
        transfer = "?" if r["transfer"] is None else f"{r['transfer']:.1f}"
        lines.append(
            f"| {r['trace']} | {'as .json.gz' if r['gz'] else 'plain JSON'} | {r['file_mb']:.0f} | {r['json_mb']:.0f} | "
            f"{transfer} | {r['first_table']:.1f} | {statistics.median(switches.values()):.2f} | "
            f"{switches[slowest]:.2f} | {slowest} | {r['rss_before']:.0f} | {r['peak']:.0f} | "
            f"{r['peak'] / r['json_mb']:.2f} | {r['rss_open']:.0f} | {r['rss_closed']:.0f} | {r['problems']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bound", type=float, default=600, help="seconds to wait for any one thing before giving up")
    parser.add_argument(
        "--write", action="store_true", help="also write docs/generated/speed-upload.md (docs/speed.md includes it)"
    )
    parser.add_argument("traces", nargs="*", type=Path)
    args = parser.parse_args(argv)
    reason = _browser_or_reason()
    if reason:
        sys.exit(f"bench_upload: {reason}")
    paths = args.traces or [p for p in (HERE / "out" / "large.json", HERE / "out" / "large1g.json") if p.exists()]
    if not paths:
        sys.exit("bench_upload: no traces; make one with python benchmarks/make_large_trace.py")
    load = os.getloadavg()[0]
    when = dt.datetime.now(dt.timezone.utc).strftime("%d %B %Y, %H:%M UTC")
    print(facts())
    print(
        f"{'trace':<24} {'JSON MB':>8} {'transfer s':>11} {'parsing s':>10} {'first table s':>14} {'switch median s':>16} "
        f"{'switch max s':>13} {'slowest tab':>14} {'RSS before MB':>14} {'peak RSS MB':>12} {'peak/JSON':>10} "
        f"{'RSS open MB':>12} {'RSS closed MB':>14}"
    )

    def secs(value: float | None) -> str:
        return "?" if value is None else f"{value:.1f}"

    rows = []
    for path in paths:
        size = json_size(path) if path.name.endswith(".gz") else path.stat().st_size
        r = measure(path, args.bound)
        rows.append(row(path, size, r))
        switches = r["switches"]
        slowest = max(switches, key=switches.get)
        peak = max(r["peak_open"], r["peak_tabs"])
        print(
            f"{path.name:<24} {size / MB:>8.0f} {secs(r['transfer']):>11} {secs(r['parsing']):>10} {r['first_table']:>14.1f} "
            f"{statistics.median(switches.values()):>16.2f} {switches[slowest]:>13.2f} {slowest:>14} {r['rss_before'] / MB:>14.0f} "
            f"{peak / MB:>12.0f} {peak / size:>10.2f} {r['rss_open'] / MB:>12.0f} {r['rss_closed'] / MB:>14.0f}"
        )
        print(
            f"{'':<24} tab switches s: "
            + ", ".join(f"{t} {s:.2f}" for t, s in switches.items())
            + f"; peak RSS MB upload+open {r['peak_open'] / MB:.0f}, tabs {r['peak_tabs'] / MB:.0f}"
        )
        for problem in r["problems"]:
            print(f"{'':<24} problem: {problem}")
        errors = [line for line in r["log"].splitlines() if "Error" in line or "Traceback" in line]
        for line in errors[:5]:
            print(f"{'':<24} server log: {line.strip()[:200]}")
    if args.write:
        GENERATED.parent.mkdir(parents=True, exist_ok=True)
        GENERATED.write_text(table(rows, when, os.cpu_count(), load), encoding="utf-8")
        print(f"wrote {GENERATED}")


if __name__ == "__main__":
    main(sys.argv[1:])
