"""The benchmarks' in-page clock (benchmarks/in_page.py): a switch is timed from the click to the
page's frames showing what it waited for, however busy the page's main thread is in between, and a
first draw from before the page was asked for."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from test_dashboard_browser import CHROMIUM, CHROMIUM_ARGS, _browser_or_reason

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import in_page  # noqa: E402

pytestmark = pytest.mark.skipif(_browser_or_reason() is not None, reason=str(_browser_or_reason()))

BUSY_MS = 300
PAGE = f"""<!doctype html><button id=go>go</button><div id=out></div><script>
document.getElementById('go').addEventListener('click', () => {{
  const until = performance.now() + {BUSY_MS};
  while (performance.now() < until) {{}}  // the main thread busy: no frame, no Playwright answer
  document.getElementById('out').innerHTML = '<p class=late>1</p><p class=late>2</p>';
  setTimeout(() => {{  // a task of its own, before the next frame: attached, but not drawn until it ends
    const spin = performance.now() + {BUSY_MS};
    while (performance.now() < spin) {{}}
  }}, 0);
}});
</script>"""


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def test_a_switch_is_timed_from_the_click_to_the_frame_that_shows_it(browser, tmp_path):
    page = browser.new_page()
    try:
        in_page.install(page)
        (tmp_path / "page.html").write_text(PAGE)
        page.goto((tmp_path / "page.html").as_uri())
        in_page.arm(page, ".late", count=2, run=False)
        page.click("#go")
        took = in_page.done(page, 30)
        want = page.evaluate("window.__attnscopeWant")
        # both busy spells count: the elements attached after the first, drawn after the second
        assert took >= 2 * BUSY_MS / 1000
        assert want["metAt"] - want["startAt"] >= BUSY_MS  # met once attached: after the first spell
        assert want["doneAt"] - want["metAt"] >= BUSY_MS  # shown by a frame: after the second
        assert took < 5
    finally:
        page.close()


def test_a_first_draw_is_timed_from_before_the_page_was_asked_for(browser, tmp_path):
    (tmp_path / "late.html").write_text(
        "<!doctype html><div id=out></div><script>setTimeout(() => {"
        "document.getElementById('out').innerHTML = '<p class=row>a</p><p class=row>b</p>'; }, 400);</script>"
    )
    page = browser.new_page()
    try:
        in_page.install(page)
        before = time.time()
        took = in_page.open_and_arm(page, (tmp_path / "late.html").as_uri(), ".row", 2, 30)
        after = time.time()
        assert 0.4 <= took <= after - before
    finally:
        page.close()


HIDDEN = """<!doctype html><button id=go>go</button>
<div id=panel style="display: none"><p class=kept>drawn long ago, in a closed tab</p></div><script>
document.getElementById('go').addEventListener('click', () => {
  setTimeout(() => {  // the tab opened 250 ms after the click, by a style change no observed mutation marks
    document.getElementById('panel').style.display = 'block';
    const until = performance.now() + 120;  // then a long task: the page busy after showing it
    while (performance.now() < until) {}
  }, 250);
});
</script>"""


def test_a_kept_element_counts_once_shown_and_the_busy_spell_after_it_is_read(browser, tmp_path):
    """A tab the page keeps drawn but hidden is there before the click: the switch ends when it is
    shown (a style change: the page's frames are polled for it), not when it is found."""
    page = browser.new_page()
    try:
        in_page.install(page)
        (tmp_path / "hidden.html").write_text(HIDDEN)
        page.goto((tmp_path / "hidden.html").as_uri())
        in_page.arm(page, ".kept", run=False)
        page.click("#go")
        took = in_page.done(page, 30)
        assert 0.25 <= took < 5
        busy = in_page.busy_after(page, 0.7)  # the 120 ms task begun at 0.25 s: free again at 0.37 s on
        assert 0.25 + 0.12 <= busy < 5
        assert in_page.busy_after(page, 0.1) == 0  # no long task begun within 0.1 s of the click
    finally:
        page.close()
