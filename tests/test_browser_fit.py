"""Nothing cut off on a 1500 px screen (issue 40 items 4 and 8), in a real browser: the dashboard's
tables with the bundled samples and two uploads, and the offline HTML report.

A table fits when its grid has nothing to scroll sideways; a wider one must keep its run column
pinned (it is still drawn once the grid is scrolled to its right end). Each run's name must fit its
column: the browser's own measure of the name in the grid's font, bold, against the width the
table gave the column. Screenshots of each tab go to test-artifacts/fit-*.png.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from browser_server import Server
from test_dashboard_browser import (
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    REPO,
    QUIET_JS,
    _settle,
    browser_ready,  # noqa: F401 - the fixture that skips (or fails on CI) without a browser
)

from dashboard.views import tables

pytestmark = pytest.mark.slow

VIEWPORT = {"width": 1500, "height": 1000}
UPLOADS = [
    REPO / "tests" / "data" / "tracelens_h100_bert_sdpa_flash.json.gz",
    REPO / "tests" / "data" / "hta_a100_control.json.gz",
]
# each tab and the keyed element it draws once its content is there
TABS = {
    "Overview": "tbl_overview",
    "Kernels": "tbl_kernels",
    "Copies": "tbl_copy_groups",
    "Speedups": "tbl_speed",
    "Backends": "tbl_backends",
}

# Every chart the tab shows with category labels on its y axes (a flat chart's run labels): where
# its widest label starts and the labels' right end, from the chart's left edge, and where its plot
# starts (the room the dashboard gave the labels up front: views/figures.label_room).
CHARTS_JS = """() => [...document.querySelectorAll('[data-testid=stPlotlyChart]')].map((chart) => {
  const svg = chart.querySelector('svg.main-svg');
  const labels = [...chart.querySelectorAll('.yaxislayer-above text')].filter((t) => t.textContent.trim());
  if (!svg || !labels.length || !isNaN(Number(labels[0].textContent.replace(/[,\u2212]/g, '')))) return null;
  const left = svg.getBoundingClientRect().left;
  const boxes = labels.map((t) => t.getBoundingClientRect());
  const drag = [...chart.querySelectorAll('.nsewdrag')].map((d) => d.getBoundingClientRect().left);
  if (!drag.length) return null;
  const holder = chart.closest('[class*=st-key-]');
  return {
    key: holder ? [...holder.classList].find((c) => c.startsWith('st-key-')) : '?',
    start: Math.min(...boxes.map((b) => b.left)) - left,
    end: Math.max(...boxes.map((b) => b.right)) - left,
    plot: Math.min(...drag) - left,
    widest: labels[boxes.findIndex((b) => b.width === Math.max(...boxes.map((x) => x.width)))].textContent,
  };
}).filter((c) => c !== null)"""

# Every table the tab shows (a grid inside an element keyed tbl_...): its key, its header texts,
# whether it scrolls sideways, and its right edge against the window's.
GRIDS_JS = """() => [...document.querySelectorAll('[class*=st-key-tbl_] [data-testid=stDataFrame]')].map((df) => {
  const holder = df.closest('[class*=st-key-tbl_]');
  const key = [...holder.classList].find((c) => c.startsWith('st-key-tbl_')).slice('st-key-'.length);
  const scroller = df.querySelector('.dvn-scroller');
  return {key, scrolls: !!scroller && scroller.scrollWidth > scroller.clientWidth + 1,
          right: df.getBoundingClientRect().right, window: window.innerWidth,
          first: (df.querySelector('[role=columnheader][aria-colindex="1"]') || {}).textContent || null};
})"""

# Scroll one grid to its right end and say which column headers it still draws.
SCROLLED_JS = """(key) => {
  const df = document.querySelector('.st-key-' + key + ' [data-testid=stDataFrame]');
  const scroller = df.querySelector('.dvn-scroller');
  scroller.scrollLeft = scroller.scrollWidth;
  scroller.dispatchEvent(new Event('scroll'));
  return new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(() => setTimeout(() =>
    done([...df.querySelectorAll('[role=columnheader]')].map((h) => [h.getAttribute('aria-colindex'), h.textContent])), 300))));
}"""

# px of each text, bold, in the grid's font (the page's own font stack, at the grid's 14 px)
MEASURE_JS = """async (names) => {
  await document.fonts.ready;
  const family = getComputedStyle(document.querySelector('[data-testid=stDataFrame]') || document.body).fontFamily;
  const ctx = document.createElement('canvas').getContext('2d');
  ctx.font = '600 14px ' + family;
  return names.map((n) => ctx.measureText(n).width);
}"""


def _shoot(page, path: Path) -> None:
    """The whole main column at 1500 px: the viewport grows to the content's height for the shot."""
    height = page.evaluate("() => document.querySelector('[data-testid=stMainBlockContainer]').scrollHeight")
    page.set_viewport_size({"width": VIEWPORT["width"], "height": min(int(height) + 80, 8000)})
    _settle(page)
    page.screenshot(path=str(path))
    page.set_viewport_size(VIEWPORT)
    _settle(page)


def _run_names(page) -> list[str]:
    """Every compared run's label: the sidebar's Compare box's chips (a long table draws only the
    rows in view, so its grid cannot tell)."""
    chips = page.locator("[data-testid=stSidebar] .st-key-sel_runs [data-tag]").all()
    return [(chip.get_attribute("aria-label") or chip.inner_text()).strip() for chip in chips]


def _problems_on_tab(page, tab: str) -> list[str]:
    """What is cut off on the tab shown: a table that scrolls sideways without its run column
    pinned, or that reaches past the window."""
    problems = []
    grids = page.evaluate(GRIDS_JS)
    assert grids, f"{tab}: no table found"
    for grid in grids:
        if grid["right"] > grid["window"] + 1:
            problems.append(f"{tab} {grid['key']}: ends at {grid['right']:.0f} px, past the window")
        if not grid["scrolls"]:
            continue
        if grid["first"] != "run":
            problems.append(f"{tab} {grid['key']}: scrolls sideways and has no run column first ({grid['first']})")
            continue
        headers = page.evaluate(SCROLLED_JS, grid["key"])
        if ["1", "run"] not in headers:
            problems.append(f"{tab} {grid['key']}: scrolled to its end, the run column is gone ({headers})")
    return problems


def _labels_cut(page, tab: str) -> list[str]:
    """A chart's run label cut at its left edge, or running into the plot, or room given to the
    labels far beyond what the widest needs (over 40 px left of it)."""
    problems = []
    for chart in page.evaluate(CHARTS_JS):
        where = f"{tab} {chart['key']}"
        if chart["start"] < -0.5:
            problems.append(
                f"{where}: the label {chart['widest']!r} is cut at the chart's left edge ({chart['start']:.1f} px)"
            )
        if chart["end"] > chart["plot"] + 0.5:
            problems.append(
                f"{where}: the labels end at {chart['end']:.0f} px, in the plot (from {chart['plot']:.0f} px)"
            )
        if chart["start"] > 40:
            problems.append(
                f"{where}: {chart['start']:.0f} px of empty room left of the widest label {chart['widest']!r}"
            )
    return problems


def test_at_1500_px_every_table_shows_its_columns_or_keeps_its_run_column_and_every_run_name_fits(
    browser_ready,  # noqa: F811 - the fixture
    tmp_path,
):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with Server(tmp_path / "store", tmp_path / "streamlit.log") as server, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport=VIEWPORT)
            page.goto(server.url)
            page.locator(".st-key-tbl_overview").first.wait_for(timeout=90_000)
            _settle(page)
            # the README's first screen, its compiled and CUDA-graph runs too, and two uploads
            page.get_by_text("Compiled and CUDA-graph runs too").click()
            _settle(page)
            page.set_input_files("input[type=file]", [str(u) for u in UPLOADS])
            labels = [u.name.removesuffix(".json.gz") for u in UPLOADS]
            page.wait_for_function(
                """(labels) => { const chips = [...document.querySelectorAll('[data-testid=stSidebar] .st-key-sel_runs [data-tag]')]
                  .map((c) => (c.getAttribute('aria-label') || c.textContent).trim());
                  return labels.every((l) => chips.includes(l)); }""",
                arg=labels,
                timeout=90_000,
            )
            _settle(page)
            names = _run_names(page)
            assert len(names) > 20 and "tracelens_h100_bert_sdpa_flash" in names

            problems: list[str] = []
            for i, (tab, key) in enumerate(TABS.items()):
                page.get_by_role("tab", name=tab, exact=True).click()
                page.locator(f".st-key-{key}").first.wait_for(timeout=60_000)
                _settle(page)
                page.wait_for_function(QUIET_JS, arg=300, timeout=30_000, polling="raf")
                _shoot(page, ARTIFACTS / f"fit-{i}-{tab.lower()}.png")
                problems += _problems_on_tab(page, tab)
                problems += _labels_cut(page, tab)

            assert not problems, "\n".join(problems)
            # each name, bold in the grid's font, inside the width the tables give a run column of these names
            given = tables.text_width(names, "run")
            measured = dict(zip(names, page.evaluate(MEASURE_JS, names)))
            cut = {n: round(px) for n, px in measured.items() if px + 2 * 8 > given}
            assert not cut, f"run names wider than their column's {given} px: {cut}"
        finally:
            browser.close()


def _long_named_copy(folder: Path) -> Path:
    """The H100 BERT trace with one kernel renamed to a 150-character name with no space in it
    (a templated kernel's mangled name is one such word)."""
    doc = json.loads(gzip.decompress(UPLOADS[0].read_bytes()))
    long = "void_" + "cutlass_kernel_sm90_tma_warpspecialized_cooperative_" * 3
    for event in doc["traceEvents"]:
        if event.get("cat") == "kernel":
            event["name"] = long[:150]
            break
    path = folder / "long_kernel_name.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode(), mtime=0))
    return path


def test_the_html_report_fits_a_1500_px_screen(browser_ready, tmp_path):  # noqa: F811 - the fixture
    from playwright.sync_api import sync_playwright

    pairs = {
        "uploads": UPLOADS,
        "h200": [REPO / "sample_traces" / "h200" / "naive.json.gz", REPO / "sample_traces" / "h200" / "sdpa.json.gz"],
        "long-name": [UPLOADS[0], _long_named_copy(tmp_path)],
    }
    pages = {}
    for name, (base, other) in pairs.items():
        out = tmp_path / f"{name}.html"
        subprocess.run(
            [sys.executable, "-m", "dashboard", "compare", str(base), str(other), "--html", str(out), "--no-store"],
            cwd=REPO,
            check=True,
            capture_output=True,
        )
        pages[name] = out
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport=VIEWPORT)
            wide = {}
            for name, path in pages.items():
                page.goto(path.as_uri())
                page.wait_for_function(QUIET_JS, arg=500, timeout=60_000, polling="raf")  # the figures drawn
                width = page.evaluate("() => document.documentElement.scrollWidth")
                if width > VIEWPORT["width"]:
                    wide[name] = width
                    page.screenshot(path=str(ARTIFACTS / f"fit-report-{name}.png"), full_page=True)
            assert not wide, f"reports wider than the {VIEWPORT['width']} px window: {wide}"
        finally:
            browser.close()
