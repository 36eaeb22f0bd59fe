"""A collapsed section whose content is drawn only once it is opened.

Streamlit draws a collapsed expander's content all the same: the page builds its grids, charts and
Markdown out of sight on every visit to the tab. With the 21 bundled H200 runs the Kernels tab's
collapsed per-run readings were most of its 77 ms of Markdown on a switch back (a CPU profile of
the page), and the Sweep tab drew the points' table and the dispatch map's cell table nobody had
opened. An expander with `on_change="rerun"` reports whether it is open (Streamlit 1.67): closed,
nothing of its content is sent or drawn. It sits in a fragment of its own, so opening it runs and
draws that section alone, not the tab around it. Its key keeps it open across the tab's reruns.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import streamlit as st


@st.fragment
def folded(label: str, key: str, draw: Callable[[], None], **options: Any) -> None:
    """An expander, closed at first (st.expander's `options`, as its icon), that calls draw()
    inside it while it is open."""
    box = st.expander(label, key=key, on_change="rerun", **options)
    with box:
        if box.open:
            draw()
