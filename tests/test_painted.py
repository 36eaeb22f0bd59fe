"""The Overview's figures on a session's first page wait until the browser has drawn it
(dashboard/views/painted.py): the table first, the figures once the page says it is drawn; a later
run, and a run without a browser, draws them in the page's own run, the same figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from dashboard.views import painted
from test_dashboard_browser import CHROMIUM, CHROMIUM_ARGS, WIDTH, _module_server, browser_ready, server  # noqa: F401

REPO = Path(__file__).resolve().parent.parent
APP = REPO / "dashboard" / "app.py"
CHARTS = ("chart_overview_work", "chart_overview_time")


def keyed(at: AppTest) -> set[str]:
    """The keys of the page's keyed blocks and elements, anywhere in its tree."""
    found: set[str] = set()

    def walk(node) -> None:
        if isinstance(getattr(node, "key", None), str):
            found.add(node.key)
        for child in (getattr(node, "children", None) or {}).values():
            walk(child)

    walk(at._tree)
    return found


def figure(at: AppTest, key: str) -> dict:
    (chart,) = list(at.get_by_key(key).children.values())
    return json.loads(chart.proto.spec)


def test_without_a_browser_the_figures_are_drawn_in_the_pages_run():
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.run()
    assert not at.exception
    assert set(CHARTS) <= keyed(at)


def test_a_sessions_first_page_in_a_browser_waits_for_it_then_draws_the_same_figures(monkeypatch):
    plain = AppTest.from_file(str(APP), default_timeout=120)
    plain.run()
    monkeypatch.setattr(painted, "in_browser", lambda: True)
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.run()
    assert not at.exception
    shown = keyed(at)
    assert "tbl_overview" in shown and "overview_painted" in shown  # the table, and what waits for the browser
    assert not set(CHARTS) & shown
    at.session_state[painted.PAINTED] = True  # what the fragment notes once the browser says the page is drawn
    at.run()
    shown = keyed(at)
    assert set(CHARTS) <= shown and "overview_painted" not in shown
    for key in CHARTS:
        assert figure(at, key) == figure(plain, key)


def test_in_the_browser_the_table_shows_then_the_figures_without_a_click(server):  # noqa: F811
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": 1000})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(server)
            page.locator(".st-key-tbl_overview [role=row]").nth(1).wait_for(state="attached", timeout=90_000)
            for key in CHARTS:
                page.locator(f".st-key-{key} .main-svg").first.wait_for(state="attached", timeout=60_000)
            assert errors == []
        finally:
            browser.close()


@pytest.fixture(autouse=True)
def _no_extra_traces(monkeypatch):
    monkeypatch.delenv("ATTNSCOPE_TRACES", raising=False)
