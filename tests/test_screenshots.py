"""The docs' screenshots: every tab of the dashboard at 1500 px wide, written to docs/img/ and shown
on its page under docs/tabs/ (the Overview also in the README). The bundled H200 collection as the
dashboard opens (the article's path, eager) for the Overview, Kernels, Copies, Timeline diff,
Speedups and Backends tabs; the Sweep tab on the bundled sample_traces/article-cpu (the only
bundled folder of the article's measurements); the Ranks tab on two jobs of four ranks written for
the shot (no bundled collection has several ranks): tests/test_ranks.py's baseline and candidate,
derived from HTA's real rank-0 V100 trace, named at start as `streamlit run dashboard/app.py --
baseline candidate` would.

`python tests/test_screenshots.py [OUT_DIR] [--tabs Sweep,Ranks] [--query 'run=...&baseline=...']` writes
them by hand; `python -m pytest tests/test_screenshots.py -m slow` regenerates docs/img/ as a (slow)
test. Each shot is the top of the main column (CROP: the part its page talks about, no sidebar), taken
once what the tab shows is drawn (its keyed tables have
cells, every plotly chart its SVG, the timeline its canvas: DRAWN) and the page is quiet
(tests/test_dashboard_browser._settle); it fails on an exception box or a tab that could not be
drawn. The PNGs are reduced to 256 colours (text and charts stay sharp; a third of the bytes).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from test_dashboard_browser import CHROMIUM, CHROMIUM_ARGS, REPO, _browser_or_reason, _settle  # noqa: E402

WIDTH = 1500
# tab -> its PNG under docs/img/, shown on docs/tabs/<stem>.md
SHOTS = {
    "Overview": "overview.png",
    "Kernels": "kernels.png",
    "Copies": "copies.png",
    "Timeline diff": "timeline.png",
    "Speedups": "speedups.png",
    "Backends": "backends.png",
    "Ranks": "ranks.png",
    "Sweep": "sweep.png",
}
RANKED = ("Ranks",)  # tabs shot on the server opened on the rank jobs
# How much of the main column (px from its top) each shot keeps: the part its docs page talks about,
# not the sidebar or the whole page shrunk into the text column.
CROP = {
    "Overview": 1650,
    "Kernels": 1500,
    "Copies": 1300,
    "Timeline diff": 1400,
    "Speedups": 1500,
    "Backends": 1200,
    "Ranks": 1300,
    "Sweep": 1500,
}
OUT = REPO / "docs" / "img"
CELLS = " [role=gridcell]"  # a table is drawn once its grid has cells
PLOT = " .main-svg"  # a plotly chart once plotly laid out its SVG
# What each tab shows, every selector of which must match inside the main column before its shot:
# the tab's tables and charts down to the last one it draws.
DRAWN = {
    "Overview": [
        ".st-key-tbl_overview" + CELLS,
        "[class*=st-key-chart_overview_work]" + PLOT,
        "[class*=st-key-chart_overview_time]" + PLOT,
    ],
    "Kernels": [
        "[class*=st-key-chart_kernels_time]" + PLOT,
        ".st-key-tbl_kernels" + CELLS,
        ".st-key-kernels_readings",
        "[class*=st-key-tbl_kernels_delta]" + CELLS,
        "[class*=st-key-tbl_ops_delta]" + CELLS,
    ],
    "Copies": [
        ".st-key-copies_alarms",
        ".st-key-chart_copies" + PLOT,
        ".st-key-tbl_copy_groups" + CELLS,
        ".st-key-tbl_copies" + CELLS,
    ],
    "Timeline diff": [
        ".st-key-chart_timeline",
        ".st-key-tbl_sequence" + CELLS,
        ".st-key-chart_timeline_family" + PLOT,
        ".st-key-tbl_family_diff" + CELLS,
    ],
    "Speedups": [
        ".st-key-tbl_speed" + CELLS,
        ".st-key-chart_roofline" + PLOT,
        ".st-key-tbl_attention_efficiency" + CELLS,
        "[class*=st-key-chart_speedup]" + PLOT,
        ".st-key-chart_throughput" + PLOT,
    ],
    "Backends": [".st-key-tbl_backends" + CELLS, ".st-key-tbl_attention_kernels" + CELLS],
    "Ranks": [
        ".st-key-ranks_about_0",
        ".st-key-chart_ranks_0" + PLOT,
        ".st-key-tbl_ranks_steps_0" + CELLS,
        ".st-key-chart_ranks_1" + PLOT,
        ".st-key-tbl_ranks_steps_1" + CELLS,
        ".st-key-tbl_ranks_slowest" + CELLS,
        ".st-key-tbl_ranks_by_rank" + CELLS,
    ],
    "Sweep": [
        ".st-key-sweep_crossovers",
        ".st-key-chart_sweep_time" + PLOT,
        ".st-key-chart_sweep_memory" + PLOT,
        ".st-key-tbl_dispatch_map" + CELLS,
        ".st-key-chart_e2e" + PLOT,
        ".st-key-tbl_serve" + CELLS,
    ],
}
# Drawn: each selector matches, every plotly chart of the page has its SVG, the timeline's canvas
# was painted (it sets __attnscope once it drew), no spinner or skeleton is left.
DRAWN_JS = """(selectors) => {
  const main = document.querySelector('[data-testid=stMainBlockContainer]');
  if (!main || !selectors.every((s) => main.querySelector(s))) return false;
  if (![...main.querySelectorAll('[data-testid=stPlotlyChart]')].every((c) => c.querySelector('.main-svg'))) return false;
  const deep = (root) => [...root.querySelectorAll('canvas'), ...[...root.querySelectorAll('*')].filter((e) => e.shadowRoot)
    .flatMap((e) => deep(e.shadowRoot))];  // the timeline component may draw in a shadow root
  for (const chart of main.querySelectorAll('.st-key-chart_timeline')) {
    const canvases = deep(chart);
    if (!canvases.length || !canvases.every((c) => c.__attnscope)) return false;
  }
  return !main.querySelector('[data-testid=stSpinner], [data-testid=stSkeleton]');
}"""
# what a broken tab shows: an exception box, or app.draw_tab's one red line (the alarms are red boxes too, so by their text)
BROKEN = "[data-testid=stException], [data-testid=stAlertContentError]:has-text('could not be drawn')"
# the rank jobs of the Ranks shot: tests/test_ranks.py's plans, one folder per run
RANK_JOBS = ("baseline", "candidate")


def _drawn(page, tab: str, bound_s: float) -> None:
    """Wait until what `tab` shows is drawn (DRAWN), then until the page is quiet."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(DRAWN_JS, arg=DRAWN.get(tab, []), timeout=bound_s * 1000, polling="raf")
    except PlaywrightTimeout as exc:
        missing = page.evaluate("(s) => s.filter((x) => !document.querySelector(x))", DRAWN.get(tab, []))
        raise AssertionError(f"the {tab} tab was not drawn within {bound_s:.0f} s; missing: {missing}") from exc
    _settle(page, bound_s=bound_s, quiet_ms=1500)


def small_png(data: bytes) -> bytes:
    """A screenshot reduced to a 256-colour palette, undithered (flat UI colours and text stay
    exact), zlib at its best: about a third of Chromium's bytes."""
    import io

    from PIL import Image

    image = (
        Image.open(io.BytesIO(data))
        .convert("RGB")
        .quantize(colors=256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
    )
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


def shoot(
    url: str, out: Path, query: str = "", shots: dict[str, str] = SHOTS, width: int = WIDTH, bound_s: float = 180
) -> list[Path]:
    """Open each tab of the dashboard at `url` (with `query`, the link's parameters) and save the top
    of its main column (CROP), once the tab is drawn, as a PNG under `out`; the paths written."""
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    written = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": 1000})
            for tab, name in shots.items():
                sep = "&" if query else ""
                page.goto(f"{url}?{query}{sep}tab={tab.replace(' ', '+')}", wait_until="domcontentloaded")
                _drawn(page, tab, bound_s)
                # as tall as the page, so every row of a table and every chart is drawn (the grids draw only what is in view)
                height = page.evaluate(
                    "() => Math.max(document.querySelector('[data-testid=stMainBlockContainer]').scrollHeight,"
                    " document.querySelector('[data-testid=stSidebarContent]')?.scrollHeight || 0)"
                )
                page.set_viewport_size({"width": width, "height": min(max(int(height) + 80, 900), 12000)})
                _drawn(page, tab, bound_s)
                broken = page.locator(BROKEN)
                if broken.count():
                    raise AssertionError(f"the {tab} tab shows an error: {broken.first.inner_text()[:300]}")
                path = out / name
                box = page.locator("[data-testid=stMainBlockContainer]").bounding_box()
                clip = {
                    "x": box["x"],
                    "y": box["y"],
                    "width": box["width"],
                    "height": min(box["height"], CROP.get(tab, box["height"])),
                }
                path.write_bytes(small_png(page.screenshot(full_page=True, clip=clip)))
                page.set_viewport_size({"width": width, "height": 1000})
                written.append(path)
        finally:
            browser.close()
    return written


def rank_jobs(folder: Path) -> list[Path]:
    """The two jobs of four ranks the Ranks shot opens (tests/test_ranks.py writes them from HTA's
    rank-0 V100 trace): folder/baseline and folder/candidate."""
    from test_ranks import BASELINE, CANDIDATE, write_job

    return [write_job(folder / name, plan) for name, plan in zip(RANK_JOBS, (BASELINE, CANDIDATE))]


def regenerate(out: Path, tmp: Path, tabs: dict[str, str] = SHOTS, query: str = "") -> list[Path]:
    """Shoot `tabs` into `out`: the Ranks tab on a server opened on the rank jobs, the others on
    one opened as a user opens it (the bundled collections); each server with its own store under `tmp`."""
    from browser_server import Server

    written = []
    plain = {t: n for t, n in tabs.items() if t not in RANKED}
    ranked = {t: n for t, n in tabs.items() if t in RANKED}
    if plain:
        with Server(tmp / "store", tmp / "streamlit.log") as server:
            written += shoot(server.url, out, query, plain)
    if ranked:
        with Server(tmp / "store-ranks", tmp / "streamlit-ranks.log", paths=rank_jobs(tmp / "jobs")) as server:
            written += shoot(server.url, out, "", ranked)  # the jobs opened at start, whatever `query` names
    return sorted(written, key=lambda p: [n for n in tabs.values()].index(p.name))


@pytest.mark.slow
def test_the_docs_screenshots_are_regenerated(tmp_path):
    """docs/img/<tab>.png for every tab, 1500 px wide, each shown on its page and under 300 KB."""
    reason = _browser_or_reason()
    if reason:
        pytest.skip(reason)
    written = regenerate(OUT, tmp_path)
    assert [p.name for p in written] == list(SHOTS.values())
    for path in written:
        assert 10_000 < path.stat().st_size < 300_000, (path.name, path.stat().st_size)
        page = REPO / "docs" / "tabs" / path.name.replace(".png", ".md")
        assert f"](../img/{path.name})" in page.read_text(), f"{page} does not show {path.name}"


if __name__ == "__main__":
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default=str(OUT))
    parser.add_argument(
        "--query", default="", help="link parameters for the tabs but Ranks, e.g. 'run=h200/naive&run=h200/sdpa'"
    )
    parser.add_argument("--tabs", default=",".join(SHOTS), help="comma-separated tab names")
    args = parser.parse_args()
    unknown = [t for t in args.tabs.split(",") if t not in SHOTS]
    if unknown:
        parser.error(f"no tab {unknown}; the tabs: {', '.join(SHOTS)}")
    with tempfile.TemporaryDirectory() as tmp:
        for path in regenerate(Path(args.out), Path(tmp), {t: SHOTS[t] for t in args.tabs.split(",")}, args.query):
            print(path)
