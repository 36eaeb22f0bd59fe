"""Figures drawn once the browser has drawn the page: a session's first page shows its tables
first, and its plotly figures a moment later.

The first plotly figure a page draws loads plotly's code into the page (about 0.7 s of the page's
main thread in headless Chromium on the 2-core machine, measured with a CPU profile of the first
draw), and the Overview table drawn beside it waited for that. So on a session's first draw the
Overview's figures are left to a fragment that draws them once a small component in the browser
says the table's rows are drawn and the page is idle (the fragment's own rerun, not the page's): the
page's first idle moment came before the table's rows in 2 of 3 first draws on a warm store, the
table's grid still loading; from then on,
and wherever no browser runs the page (Streamlit's AppTest: nothing would ever say so), they are
drawn at once, in the page's run.
"""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

MOST_MS = 3000  # the longest the figures wait for what must show first (a table that never draws its rows)
PAINTED = "_painted"  # st.session_state: this session's browser has drawn a page (and loaded plotly's code)

JS = """
export default function (component) {
  const { data, setTriggerValue } = component;
  const started = performance.now();
  const fire = () => { window.__attnscopePainted = true; setTriggerValue('painted', true); };
  const idle = () => (window.requestIdleCallback ? requestIdleCallback(fire, { timeout: 1000 }) : setTimeout(fire, 0));
  // each frame: once what must show first is drawn (or after data.most_ms), when the page is idle
  const wait = () => {
    if (!data.after || document.querySelector(data.after) || performance.now() - started > data.most_ms) idle();
    else requestAnimationFrame(wait);
  };
  requestAnimationFrame(wait);
}
"""

COMPONENT = st.components.v2.component("attnscope_painted", js=JS)


def in_browser() -> bool:
    """Whether a browser runs this page: its connection's headers are there (Streamlit's AppTest
    has none, and a stand-in for the server's Runtime, so Runtime.exists() does not tell)."""
    return bool(st.context.headers)


def after_paint(draw: Callable[[], None], key: str, after: str | None = None) -> None:
    """draw() now when this session's browser has drawn a page before (or no browser runs the
    page), else in a fragment that calls it once the browser says the page is drawn: `after` (a
    CSS selector) found in it, at most MOST_MS after the waiting component was drawn, and the page
    idle. `key` names the waiting component (one per place that waits)."""
    if st.session_state.get(PAINTED) or not in_browser():
        draw()
    else:
        _when_painted(draw, key, after)


@st.fragment
def _when_painted(draw: Callable[[], None], key: str, after: str | None) -> None:
    """The fragment: the waiting component until the browser has drawn the page, then draw()."""
    if not st.session_state.get(PAINTED):
        said = COMPONENT(key=key, data={"after": after, "most_ms": MOST_MS}, on_painted_change=lambda: None)
        if not said.painted:
            return
        st.session_state[PAINTED] = True
    draw()
