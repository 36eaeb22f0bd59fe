"""The dashboard in a real browser: `streamlit run` on a loopback port, driven by Debian's
chromium through Playwright. A user uploads a trace, sees its row appear, and opens every tab;
each tab is saved as a screenshot in test-artifacts/ for a person to look at.

Without a browser the test skips with the reason; with CI set, a missing browser is a failure.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = REPO / "test-artifacts"
UPLOAD = REPO / "tests" / "data" / "tracelens_h100_bert_sdpa_flash.json.gz"
UPLOADED_LABEL = "tracelens_h100_bert_sdpa_flash"
CHROMIUM = os.environ.get("ATTNSCOPE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
# The keyed element each tab draws once its content is there.
TABS = {
    "Overview": "tbl_overview",
    "Kernels": "tbl_kernels",
    "Copies": "tbl_copy_groups",
    "Timeline diff": "chart_timeline",
    "Speedups": "tbl_speed",
    "Backends": "tbl_backends",
}
WIDTH = 1600


def _browser_or_reason() -> str | None:
    """None when the browser test can run here, else why not."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright Python package is not installed (pip install -e '.[test]')"
    if not (Path(CHROMIUM).is_file() or shutil.which(CHROMIUM)):
        return f"no chromium at {CHROMIUM} (apt-get install -y chromium)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(port: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"streamlit did not answer on port {port} within {timeout:.0f} s")


@pytest.fixture
def browser_ready() -> None:
    """Skip (or, with CI set, fail) before anything starts when no browser can run."""
    reason = _browser_or_reason()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the browser test, but {reason}")
        pytest.skip(reason)


@pytest.fixture
def server(browser_ready, tmp_path):
    """A dashboard server on a free loopback port; always terminated."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "ATTNSCOPE_TRACES"}
    log = (tmp_path / "streamlit.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(REPO / "dashboard" / "app.py"), "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        _wait_healthy(port, proc)
        yield f"http://127.0.0.1:{port}/"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        log.close()


def _settle(page) -> None:
    """Wait until the app has finished its run (the 'Running...' widget is gone)."""
    page.wait_for_timeout(300)
    page.locator("[data-testid='stStatusWidget']").wait_for(state="hidden", timeout=60_000)
    page.wait_for_timeout(500)


def _screenshot(page, path: Path) -> None:
    """The whole main column: the viewport grows to the content's height for the shot."""
    height = page.evaluate("() => document.querySelector('[data-testid=stMainBlockContainer]').scrollHeight")
    page.set_viewport_size({"width": WIDTH, "height": min(max(int(height) + 80, 900), 8000)})
    page.wait_for_timeout(800)
    page.screenshot(path=str(path))
    page.set_viewport_size({"width": WIDTH, "height": 1000})


def test_upload_a_trace_and_open_every_tab_in_a_real_browser(server):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": 1000})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(server)
            page.locator(".st-key-tbl_overview").wait_for(timeout=90_000)

            page.set_input_files("input[type=file]", str(UPLOAD))
            # the overview grid's accessible rows carry the cell text
            page.locator(".st-key-tbl_overview [role=row]", has_text=UPLOADED_LABEL).wait_for(state="attached", timeout=60_000)
            _settle(page)
            assert "upload%2F" + UPLOAD.name in page.url  # the uploaded run is in the link

            for i, (tab, key) in enumerate(TABS.items(), start=1):
                page.get_by_role("tab", name=tab).click()
                page.locator(f".st-key-{key}").wait_for(timeout=60_000)
                _settle(page)
                assert page.locator("[data-testid='stException']").count() == 0, f"{tab}: the app raised"
                assert page.get_by_text("tab could not be drawn").count() == 0, f"{tab}: the tab failed to draw"
                if tab != "Overview":
                    assert "tab=" + tab.replace(" ", "+") in page.url or "tab=" + tab.replace(" ", "%20") in page.url
                _screenshot(page, ARTIFACTS / f"{i}-{tab.lower().replace(' ', '-')}.png")
            assert page.get_by_role("tab", name="Backends").get_attribute("aria-selected") == "true"
            assert not errors, errors
        finally:
            browser.close()
