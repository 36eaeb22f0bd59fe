"""The tabs, each drawn once and kept: a switch shows a tab the page already holds.

A tab switch that runs the tab again costs the browser the whole tab: with the 21 bundled H200
runs a switch back to Kernels kept the page's main thread busy about 1.1 s (plotly's charts, the
grids, React, layout), the server's part 0.06-0.2 s of it (docs/speed.md). So the tabs are a
stateless `st.tabs` whose panels all stay in the page, and a switch runs nothing of them:

- a page's run draws the open tab (the URL's `tab`) and, in a browser, a small waiting component
  (`FILL`) that asks for the tabs' fragment's run (app.open_tab) once the page is quiet (no run
  going, the Overview's figures asked for) and idle, or as soon as it is quiet after a tab is
  clicked; that run draws every tab. One run for the seven: each run, a fragment's too, redraws the
  page's elements in the browser, so seven runs of one tab each took longer to settle;
- each tab is a fragment of its own inside it, so a choice made in a tab (Kernels' step, Speedups'
  price) runs that tab alone;
- the URL keeps the open tab for a shared link: the address bar changes at the click, and a small
  component (`WATCH`) tells the server which tab is open once the reader has stayed on it
  SAY_AFTER_MS (its own fragment writes it to st.query_params, for a saved view and the next page's
  run): a run at each click would cost every switch the redraw above.

Without a browser (Streamlit's AppTest: nothing would ever ask) only the URL's tab is drawn.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import streamlit as st

from dashboard import prepare, runs
from dashboard.views import painted

KEY = "tab"  # the tabs' key (class st-key-tab) and the link's parameter
FILL_KEY = "tab_fill"  # the waiting component's key: its trigger asks for every tab

WATCH_JS = """
export default function (component) {
  // The tab selected, wherever the tab bar is redrawn (the observer is the document's, once). The
  // link in the address bar changes at once; the server hears of it once the reader has stayed on
  // the tab for SAY_AFTER_MS with no run going: any run redraws the page's elements, every tab's,
  // (0.2-0.4 s of the page's main thread with the 21 runs), so a switch itself runs nothing.
  const { data } = component;
  window.__attnscopeTabSay = component.setStateValue;
  if (window.__attnscopeTabWatch) return;
  window.__attnscopeTabWatch = true;
  let timer = null;
  const running = () => {
    const app = document.querySelector('[data-testid=stApp]');
    return app && app.getAttribute('data-test-script-state') !== 'notRunning';
  };
  const say = (label) => {
    const asked = performance.now() - (window.__attnscopeAskedAt || -1e9) < 50;  // a tab's request: not in its batch
    if (running() || asked) { timer = setTimeout(() => say(label), 100); return; }
    timer = null;
    window.__attnscopeTabPending = false;
    window.__attnscopeSaidAt = performance.now();
    window.__attnscopeTabSay('tab', label);
  };
  const opened = (label) => {
    const url = new URL(window.location.href);
    if (url.searchParams.get('tab') === label && !window.__attnscopeTabPending) return;  // (a redraw of the bar)
    if (url.searchParams.get('tab') !== label) {
      url.searchParams.set('tab', label);
      window.history.replaceState(window.history.state, '', url.toString());
    }
    if (timer !== null) clearTimeout(timer);
    window.__attnscopeTabPending = true;
    timer = setTimeout(() => say(label), data.say_after_ms);
  };
  // a tab selected by a click or by the keyboard (the arrow keys move the selection along the bar)
  new MutationObserver((records) => {
    for (const r of records) {
      const tab = r.target;
      if (tab.getAttribute('role') === 'tab' && tab.getAttribute('aria-selected') === 'true' && tab.closest('.st-key-tab')) {
        opened(tab.innerText.trim());
      }
    }
  }).observe(document.documentElement, { attributes: true, subtree: true, attributeFilter: ['aria-selected'] });
}
"""

FILL_JS = """
export default function (component) {
  // Ask for the other tabs once the page is quiet (no run going, the Overview's figures asked for:
  // views/painted.py) and idle, or as soon as it is quiet after a tab is clicked (the tab is empty).
  const { setTriggerValue, parentElement } = component;
  const host = parentElement.host || parentElement;
  const app = () => document.querySelector('[data-testid=stApp]');
  const quiet = () => {
    const state = app() && app().getAttribute('data-test-script-state');
    const figures = document.querySelector('.st-key-overview_painted') && !window.__attnscopePainted;
    const said = performance.now() - (window.__attnscopeSaidAt || -1e9) < 50;  // the watcher's, just sent: not with it
    return state === 'notRunning' && !figures && !said;
  };
  let clicked = false, idle = false, idleAsked = false;
  const click = (event) => { if (event.target.closest && event.target.closest('.st-key-tab [role=tab]')) clicked = true; };
  document.addEventListener('click', click, true);
  const tick = () => {
    if (!host.isConnected) { document.removeEventListener('click', click, true); return; }
    if (quiet() && (clicked || idle)) {
      document.removeEventListener('click', click, true);
      window.__attnscopeAskedAt = performance.now();
      setTriggerValue('fill', true);
      return;
    }
    if (!quiet()) idle = false;
    else if (!idleAsked) {
      idleAsked = true;
      (window.requestIdleCallback || ((f) => setTimeout(f, 0)))(() => { idle = true; idleAsked = false; }, { timeout: 1000 });
    }
    requestAnimationFrame(tick);
  };
  requestAnimationFrame(tick);
}
"""

WATCH = st.components.v2.component("attnscope_tab_watch", js=WATCH_JS)
FILL = st.components.v2.component("attnscope_tab_fill", js=FILL_JS)
SAY_AFTER_MS = 800  # a reader on a tab this long: the server is told which (the link's `tab` for its runs)


_DRAWING = threading.local()  # the tab this session's script thread is drawing (sessions run side by side)


def keyed(base: str) -> str:
    """An element key unique to the tab being drawn: a piece every tab draws (the relation block)
    is drawn once per tab in one run now, and Streamlit refuses a key twice in a run ('relation'
    in the Overview: relation-overview; outside a tab: `base`)."""
    name = getattr(_DRAWING, "name", None)
    return key_in(base, name) if name else base


def key_in(base: str, tab: str) -> str:
    """The key `keyed(base)` gives while tab `tab` is drawn."""
    return f"{base}-{tab.lower().replace(' ', '-')}"


def open_name(names: list[str]) -> str:
    """The open tab, as the link names it (the first tab when it names none of them)."""
    name = st.query_params.get(KEY)
    return name if name in names else names[0]


def draw(tabs: dict[str, Callable[[runs.Selection], None]], selection: runs.Selection, draw_one) -> None:
    """The tabs (a fragment's run: app.open_tab): in a page's run the open one, and in a browser the
    others in the run the waiting component asks for (module docstring). draw_one(name, render,
    selection) draws one tab's content."""
    names = list(tabs)
    shown = open_name(names)
    containers = st.tabs(names, key=KEY, default=shown)
    browser = painted.in_browser()
    if browser:
        _watch(names)
    asked = st.session_state.get(FILL_KEY)
    every = browser and bool(asked and asked.get("fill"))  # (read before it is drawn: this run draws the tabs instead)
    for container, (name, render) in zip(containers, tabs.items()):
        if name == shown or every:
            with container:
                _tab(name, render, selection, draw_one)
    if browser and not every:
        FILL(key=FILL_KEY, data=None, on_fill_change=lambda: None)


@st.fragment
def _watch(names: list[str]) -> None:
    """The chosen tab written to the link: a fragment, so telling the server runs this and no tab."""
    said = WATCH(key="tab_watch", data={"say_after_ms": SAY_AFTER_MS}, on_tab_change=lambda: None)
    if said.tab in names and st.query_params.get(KEY) != said.tab:
        st.query_params[KEY] = said.tab


@st.fragment
def _tab(name: str, render, selection: runs.Selection, draw_one) -> None:
    """One tab's content: a fragment, so a choice made in it runs this tab alone."""
    with prepare.AHEAD.page_run():  # (a fragment's run is a page's run to the analyses computed ahead)
        _DRAWING.name = name
        try:
            draw_one(name, render, selection)
        finally:
            _DRAWING.name = None
