"""A dashboard server the browser tests can stop and start again: `streamlit run dashboard/app.py`
on a free loopback port with a store folder and extra trace paths of the test's choosing.

The waiting, the port and the browser's arguments come from tests/test_dashboard_browser.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

from test_dashboard_browser import REPO, SERVER_QUIET, _free_port, _wait_healthy


class Server:
    """One `streamlit run` process. start() may be called again after stop() (same port, same
    store): a restart."""

    def __init__(self, store: Path, log: Path, paths: Sequence[Path] = (), options: Sequence[str] = ()) -> None:
        self.store, self.log_path, self.paths, self.options = Path(store), Path(log), list(paths), list(options)
        self.port = _free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 90) -> "Server":
        env = {k: v for k, v in os.environ.items() if k not in ("ATTNSCOPE_TRACES", "ATTNSCOPE_NO_STORE")}
        env["ATTNSCOPE_STORE"] = str(self.store)
        cmd = [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            str(REPO / "dashboard" / "app.py"),
            "--server.headless",
            "true",
            "--server.port",
            str(self.port),
            "--server.address",
            "127.0.0.1",
            "--browser.gatherUsageStats",
            "false",
            *SERVER_QUIET,
            *self.options,
        ]
        if self.paths:
            cmd += ["--", *map(str, self.paths)]
        log = self.log_path.open("a")
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()  # the child holds its own copy
        try:
            _wait_healthy(self.port, self.proc, timeout=timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        self.proc = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# Streamlit's own WebSocket endpoint, closing a connection the browser had already dropped (a
# context closed as the session ended), logs this chain from its own code alone (Streamlit 1.67 on
# Starlette; seen once in CI's four-session round, 7 December). It is not a failure of the app.
_TEARDOWN_RACE = ("streamlit/web/server/starlette/starlette_websocket.py", "starlette.websockets.WebSocketDisconnected")


def tracebacks(log: str) -> list[str]:
    """The server log's tracebacks (each chain of "During handling..." joined into one), except
    Streamlit's WebSocket teardown race above: a chain whose every frame is an installed package's,
    that passes through Streamlit's WebSocket endpoint and ends in Starlette's WebSocketDisconnected.
    Any frame of this project's code, or any other exception, is reported."""
    chains: list[list[str]] = []
    lines = log.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("Traceback (most recent call last):"):
            i += 1
            continue
        chain: list[str] = []
        while i < len(lines) and lines[i].startswith("Traceback (most recent call last):"):
            chain.append(lines[i])
            i += 1
            while i < len(lines) and (lines[i].startswith(" ") or not lines[i].strip()):
                chain.append(lines[i])
                i += 1
            if i < len(lines):
                chain.append(lines[i])  # the exception's own line
                i += 1
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith(("During handling", "The above"))):
                chain.append(lines[i])
                i += 1
        chains.append(chain)
    reported = []
    for chain in chains:
        files = [line.split('"')[1] for line in chain if line.lstrip().startswith('File "')]
        last = [
            line for line in chain if line.strip() and not line.startswith((" ", "Traceback", "During", "The above"))
        ]
        race = (
            all("site-packages" in f for f in files)
            and any(f.endswith(_TEARDOWN_RACE[0]) for f in files)
            and bool(last)
            and all(line.startswith(_TEARDOWN_RACE[1]) for line in last)
        )
        if not race:
            reported.append("\n".join(chain))
    return reported


def rss_bytes(pid: int) -> int:
    """Resident memory of a process and its children (the loader's slice workers), in bytes:
    psutil when installed, else /proc/PID/status VmRSS (the process alone)."""
    try:
        import psutil
    except ImportError:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError(f"no VmRSS for process {pid}")
    proc = psutil.Process(pid)
    total = proc.memory_info().rss
    for child in proc.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def settled_rss(pid: int, wait_s: float = 5.0, bound_s: float = 60.0) -> int:
    """The server's RSS once closed sessions are gone: read every 0.25 s; once `wait_s` has passed
    (longer than the server's disconnected-session TTL) and the last 2 s of readings stayed
    within 1 MiB of each other (nothing more is being freed), the lowest reading since the TTL.
    After `bound_s` without settling, the lowest reading taken."""
    start = time.monotonic()
    readings: list[tuple[float, int]] = []
    while True:
        now = time.monotonic() - start
        readings.append((now, rss_bytes(pid)))
        since_ttl = [r for t, r in readings if t >= wait_s]
        recent = [r for t, r in readings if t >= max(wait_s, now - 2.0)]
        if now >= wait_s + 2.0 and len(recent) >= 5 and max(recent) - min(recent) <= 1024 * 1024:
            return min(since_ttl)
        if now >= bound_s:
            return min(since_ttl or [r for _, r in readings])
        time.sleep(0.25)  # the next reading (a poll, not a wait for a guessed time)


# --- several browser sessions at once (tests/test_browser_load.py, benchmarks/bench_sessions.py) ---

SESSION_SOURCE = REPO / "tests" / "data" / "tracelens_h100_bert_sdpa_flash.json.gz"


def session_traces(folder: Path, n: int) -> list[Path]:
    """`n` different small traces (the H100 BERT trace with its kernels renamed per session, so
    each file has its own bytes, hash and name): folder/session-<i>.json.gz."""
    import gzip
    import json

    doc = json.loads(gzip.decompress(SESSION_SOURCE.read_bytes()))
    out = []
    for i in range(n):
        mine = dict(doc)
        mine["traceEvents"] = [
            dict(e, name=f"{e['name']} s{i}") if e.get("cat") == "kernel" and isinstance(e.get("name"), str) else e
            for e in doc["traceEvents"]
        ]
        path = Path(folder) / f"session-{i}.json.gz"
        path.write_bytes(gzip.compress(json.dumps(mine).encode(), mtime=0))
        out.append(path)
    return out


async def _settle_async(page, bound_s: float) -> None:
    """test_dashboard_browser._settle for the async API: the app's run over and the page quiet."""
    from test_dashboard_browser import QUIET_JS

    await page.evaluate("() => { window.__attnscopeQuiet = null; }")
    await page.wait_for_function(QUIET_JS, arg=300, timeout=bound_s * 1000, polling="raf")


async def _overview_runs_async(page) -> list[str]:
    cells = await page.locator(
        "[class*='st-key-tbl_overview'] [role=row] [role=gridcell]:first-child"
    ).all_text_contents()
    return [c.strip() for c in cells if c.strip()]


async def _compare_offers(page, typed: str) -> list[str]:
    """The runs the sidebar's Compare box holds (its chips) and offers for `typed` (its list,
    filtered by what is typed: the list shows only so many at once)."""
    from test_dashboard_browser import QUIET_JS

    box = page.locator("[data-testid=stSidebar] .st-key-sel_runs")
    chips = [await t.get_attribute("aria-label") or "" for t in await box.locator("[data-tag]").all()]
    field = box.locator("input[role=combobox]")
    await field.click()
    await field.fill(typed)
    # the list is filtered as the text is typed: read it once it shows options and stays still
    try:
        await page.locator("[role=option]").first.wait_for(state="attached", timeout=30_000)
    except Exception:  # noqa: BLE001 - none offered: the caller reports what was (not) offered
        pass
    await page.wait_for_function(QUIET_JS, arg=200, timeout=30_000, polling="raf")
    options = [t.strip() for t in await page.locator("[role=option]").all_inner_texts()]
    await field.fill("")
    await page.keyboard.press("Escape")
    return chips + options


async def one_session(
    browser, url: str, upload: Path, others: list[str], tabs: dict[str, str], bound_s: float = 90.0
) -> dict:
    """One user: a fresh context opens the app, uploads `upload`, switches through every tab and
    closes. Returns the seconds per tab switch, what went wrong (exception boxes, page errors,
    runs of `others` seen), and the runs the session had."""
    import time
    from urllib.parse import parse_qs, urlparse

    label = upload.name.removesuffix(".json.gz")
    context = await browser.new_context(viewport={"width": 1600, "height": 1000})
    problems: list[str] = []
    switches: dict[str, float] = {}
    try:
        page = await context.new_page()
        page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
        await page.goto(url)
        await page.locator(".st-key-tbl_overview").first.wait_for(timeout=bound_s * 1000)
        await _settle_async(page, bound_s)
        # its upload alone: an upload joins the runs on screen, so the user clears them first
        await page.locator("[data-testid=stSidebar] .st-key-sel_runs [aria-label='Clear all']").click()
        await page.get_by_text("Choose at least one run").wait_for(timeout=bound_s * 1000)
        await _settle_async(page, bound_s)
        await page.set_input_files("input[type=file]", str(upload))
        await page.locator(".st-key-tbl_overview [role=row]", has_text=label).wait_for(
            state="attached", timeout=bound_s * 1000
        )
        await _settle_async(page, bound_s)
        names = [t.strip() for t in await page.get_by_role("tab").all_inner_texts()]
        for tab in names:
            start = time.monotonic()
            await page.get_by_role("tab", name=tab, exact=True).click()
            if tab in tabs:
                await page.locator(f".st-key-{tabs[tab]}").first.wait_for(timeout=bound_s * 1000)
            await _settle_async(page, bound_s)
            switches[tab] = time.monotonic() - start
            if await page.locator("[data-testid='stException']").count():
                problems.append(f"{tab}: exception box")
            if await page.get_by_text("tab could not be drawn").count():
                problems.append(f"{tab}: tab could not be drawn")
        await page.get_by_role("tab", name="Overview", exact=True).click()
        await page.locator(".st-key-tbl_overview").first.wait_for(timeout=bound_s * 1000)
        await _settle_async(page, bound_s)
        try:  # the grid's rows are drawn a moment after the table
            await page.locator(".st-key-tbl_overview [role=row]", has_text=label).wait_for(
                state="attached", timeout=30_000
            )
        except Exception:  # noqa: BLE001 - then the runs read below say what is shown instead
            problems.append("its own upload is not in the overview table")
        runs = await _overview_runs_async(page)
        offered = await _compare_offers(page, typed=label.rstrip("0123456789"))  # 'session-': every session's upload
        linked = parse_qs(urlparse(page.url).query).get("run", [])
        if label not in offered:
            problems.append(f"its own upload is not in the Compare box: {offered}")  # (the reading works)
        seen = [o for o in others if o in offered or o in runs or f"upload/{o}.json.gz" in linked]
        if seen:
            problems.append(f"sees another session's uploads: {seen}")
        return {"label": label, "runs": runs, "linked": linked, "switches": switches, "problems": problems}
    finally:
        await context.close()


def run_sessions(url: str, uploads: list[Path], tabs: dict[str, str], rss_of=None, bound_s: float = 90.0) -> dict:
    """len(uploads) sessions at once in one browser process (one context each); the server's RSS
    sampled every 0.1 s while they run when `rss_of` (a callable) is given. Returns each session's
    result, the wall time and the peak RSS."""
    import asyncio
    import threading
    import time

    from playwright.async_api import async_playwright

    from test_dashboard_browser import CHROMIUM, CHROMIUM_ARGS

    peak = [rss_of() if rss_of else 0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            try:
                peak[0] = max(peak[0], rss_of())
            except Exception:  # noqa: BLE001 - a slice worker that just ended
                pass
            done.wait(0.1)

    async def main() -> list[dict]:
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                labels = [u.name.removesuffix(".json.gz") for u in uploads]
                return await asyncio.gather(
                    *[
                        one_session(browser, url, u, [lab for lab in labels if lab != labels[i]], tabs, bound_s)
                        for i, u in enumerate(uploads)
                    ]
                )
            finally:
                await browser.close()

    sampler = threading.Thread(target=sample, daemon=True) if rss_of else None
    if sampler:
        sampler.start()
    start = time.monotonic()
    try:
        results = asyncio.run(main())
    finally:
        done.set()
        if sampler:
            sampler.join()
    return {"sessions": results, "wall_s": time.monotonic() - start, "peak_rss": peak[0]}
