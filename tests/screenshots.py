"""The README's screenshots: the Overview, Kernels and Speedups tabs of the bundled H200 collection
at 1500 px wide, as the dashboard opens (the article's path, eager), written to docs/img/.

`python tests/screenshots.py [OUT_DIR] [--query 'run=...&baseline=...']` writes them by hand;
`python -m pytest tests/screenshots.py -m slow` regenerates docs/img/ as a (slow) test. Each shot
is the whole main column, taken once the page is quiet (tests/test_dashboard_browser._settle).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from test_dashboard_browser import CHROMIUM, CHROMIUM_ARGS, REPO, _browser_or_reason, _settle  # noqa: E402

WIDTH = 1500
SHOTS = {"Overview": "overview.png", "Kernels": "kernels.png", "Speedups": "speedups.png"}
OUT = REPO / "docs" / "img"


def shoot(url: str, out: Path, query: str = "", shots: dict[str, str] = SHOTS, width: int = WIDTH) -> list[Path]:
    """Open each tab of the dashboard at `url` (with `query`, the link's parameters) and save the
    main column as a PNG under `out`; the paths written."""
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
                page.locator("[data-testid=stMainBlockContainer]").wait_for(timeout=120_000)
                _settle(page, bound_s=180, quiet_ms=1500)
                height = page.evaluate("() => document.querySelector('[data-testid=stMainBlockContainer]').scrollHeight")
                page.set_viewport_size({"width": width, "height": min(max(int(height) + 80, 900), 12000)})
                _settle(page, bound_s=120, quiet_ms=1500)
                path = out / name
                page.screenshot(path=str(path), full_page=True)
                page.set_viewport_size({"width": width, "height": 1000})
                written.append(path)
        finally:
            browser.close()
    return written


@pytest.mark.slow
def test_the_readmes_screenshots_are_regenerated(tmp_path):
    """docs/img/overview.png, kernels.png and speedups.png: the dashboard as it opens, 1500 px wide."""
    reason = _browser_or_reason()
    if reason:
        pytest.skip(reason)
    from browser_server import Server

    with Server(tmp_path / "store", tmp_path / "streamlit.log") as server:
        written = shoot(server.url, OUT)
    assert [p.name for p in written] == list(SHOTS.values())
    assert all(p.stat().st_size > 10_000 for p in written)


if __name__ == "__main__":
    import argparse
    import tempfile

    from browser_server import Server

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default=str(OUT))
    parser.add_argument("--query", default="", help="link parameters, e.g. 'run=h200/naive&run=h200/sdpa'")
    parser.add_argument("--tabs", default=",".join(SHOTS), help="comma-separated tab names")
    args = parser.parse_args()
    tabs = {t: t.lower().replace(" ", "_") + ".png" for t in args.tabs.split(",")}
    with tempfile.TemporaryDirectory() as tmp:
        with Server(Path(tmp) / "store", Path(tmp) / "streamlit.log") as server:
            for path in shoot(server.url, Path(args.out), args.query, tabs):
                print(path)
