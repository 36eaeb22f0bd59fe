"""When the page itself shows a thing: the first draw's table row, a tab switch done, timed by the
page's own clock rather than by when the benchmark's Python side notices.

A Playwright wait (a locator's wait_for, the WebSocket frame events) is answered by the page, then
by Playwright's driver process, then by this Python process. On the 2-core machine, with the
server and the browser busy, that relay lags: on five first draws with a warm store the Overview's
first data row was attached to the page (a MutationObserver's record) at 2.01-2.32 s, and the wait
returned at 2.12-3.17 s, a second late whenever the page went on to load plotly's code for the
Overview's charts right after (7 December). So the benchmarks read the times the page records:

- the start: a switch's click as the page received it (the pointerdown event's timeStamp: the
  input's own time, so a main thread too busy to take the click counts against the switch), or, for
  a first draw, the benchmark's clock just before it asks the browser to open the page;
- the end: the second animation frame after what is waited for is all there (the first frame
  after it has drawn it): for a switch, a script run started and finished since the click (the app's
  data-test-script-state), no element left stale, and the tab's keyed element, when it has one,
  shown (the page keeps every tab drawn: dashboard/views/tab_set.py); for a first draw, the Overview table's first data row.

install() before the page opens, arm() before a click and done() after it; open_and_arm() for a
first draw.
"""

from __future__ import annotations

import json
import time

INIT_JS = """(() => {
  const now = () => performance.timeOrigin + performance.now();
  window.__attnscopeLong = [];  // the main thread's long tasks (over 50 ms): [start, end] by the same clock
  try {
    new PerformanceObserver((list) => {
      for (const e of list.getEntries()) window.__attnscopeLong.push([performance.timeOrigin + e.startTime, performance.timeOrigin + e.startTime + e.duration]);
    }).observe({ type: 'longtask', buffered: true });
  } catch (e) {}
  const check = (records) => {
    const w = window.__attnscopeWant;
    if (!w || w.startAt === null || w.metAt !== null) return;
    if (records && records.some((r) => r.type === 'attributes' && r.attributeName === 'data-test-script-state')) w.ran = true;
    if (w.needRun) {
      const app = document.querySelector('[data-testid=stApp]');
      if (!w.ran || !app || app.getAttribute('data-test-script-state') !== 'notRunning') return;
      if (document.querySelector('[data-stale=true]')) return;
    }
    if (w.sel && [...document.querySelectorAll(w.sel)].filter((e) => !w.shown || e.checkVisibility()).length < w.count) return;
    w.metAt = now();
    requestAnimationFrame(() => requestAnimationFrame(() => { w.doneAt = now(); }));
  };
  const watch = () => new MutationObserver(check).observe(document.documentElement, {
    childList: true, subtree: true, attributes: true, attributeFilter: ['data-test-script-state', 'data-stale'],
  });
  if (document.documentElement) watch(); else document.addEventListener('readystatechange', watch, {once: true});
  document.addEventListener('pointerdown', (e) => {
    const w = window.__attnscopeWant;
    if (w && w.startAt === null) {
      w.startAt = performance.timeOrigin + e.timeStamp;
      w.ran = false;
      // and each frame: a change no observed mutation marks (a kept tab's panel shown) is seen too
      const poll = () => { check(null); if (w.metAt === null && now() - w.startAt < 120000) requestAnimationFrame(poll); };
      requestAnimationFrame(poll);
    }
  }, true);
})()"""

ARM_JS = """([sel, count, needRun, startAt, shown]) => {
  window.__attnscopeWant = {sel, count, needRun, startAt, shown, ran: false, metAt: null, doneAt: null};
}"""


def install(page) -> None:
    """Before the page opens (a page's init script runs in every document it loads)."""
    page.add_init_script(INIT_JS)


def arm(page, selector: str | None, count: int = 1, run: bool = True, shown: bool = True) -> None:
    """Wait for `count` elements matching `selector` (None: none), shown (`shown`: not in a closed
    tab, which the page keeps drawn, nor otherwise hidden) or merely attached, after a script run
    started and finished (`run`), from the next click."""
    page.evaluate(ARM_JS, [selector, count, run, None, shown])


def open_and_arm(page, url: str, selector: str, count: int, bound_s: float) -> float:
    """Open `url` and return seconds from just before the browser was asked to open it until the
    page showed `count` elements matching `selector` (the second animation frame after they were
    all attached)."""
    start_ms = time.time() * 1000
    page.add_init_script(
        f"({ARM_JS})({json.dumps([selector, count, False, start_ms, False])})"
    )  # armed in the new page
    page.goto(url)
    page.wait_for_function("() => window.__attnscopeWant && window.__attnscopeWant.doneAt", timeout=bound_s * 1000)
    return (page.evaluate("window.__attnscopeWant.doneAt") - start_ms) / 1000


def busy_after(page, within_s: float) -> float:
    """Seconds from the armed start (the click) until the page's main thread was free again: the end
    of the last long task (over 50 ms) that began within `within_s` of the click (0: none did)."""
    return page.evaluate(
        """(within) => {
          const w = window.__attnscopeWant;
          const ends = window.__attnscopeLong.filter(([s, e]) => e > w.startAt && s < w.startAt + within * 1000).map(([s, e]) => e);
          return ends.length ? (Math.max(...ends) - w.startAt) / 1000 : 0;
        }""",
        within_s,
    )


def done(page, bound_s: float) -> float:
    """Seconds from the armed start (the click) to the page showing what was waited for."""
    page.wait_for_function(
        "() => window.__attnscopeWant && window.__attnscopeWant.doneAt !== null", timeout=bound_s * 1000
    )
    want = page.evaluate("window.__attnscopeWant")
    return (want["doneAt"] - want["startAt"]) / 1000
