"""The tabs' charts built once per selection: a tab switch (a rerun of the whole script) draws the
figures the previous visit built instead of building them again.

A plotly figure of 21 runs takes 0.1-0.3 s to build (subplots, one trace per part and facet, the
layout's template copied in); its data comes from the selection's Comparison, which is itself kept
for the session while the runs, labels, baseline and options stay the same (runs.comparison_for).
So the figures are kept beside it, keyed by the chart and the choices it was drawn with, and
dropped as soon as the session has another Comparison. The coloured tables are kept the same way
(tables.show's `keep`: a pandas Styler of a few hundred rows takes 30-40 ms to render).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import streamlit as st

from dashboard.runs import Selection

FIGURES = "_figures"  # st.session_state: (the Comparison they were built from, {key: figure})


def once(sel: Selection | None, key: Hashable, build: Callable[[], Any], state: Any = None) -> Any:
    """The figure `build()` makes for `sel`, built the first time `key` is asked for with this
    selection's Comparison and kept for the next reruns. `key` names the chart and every choice
    (beside the selection) it depends on; the figure must be drawn as it is (never changed).
    Without a selection (a tab drawn on its own), built every time."""
    if sel is None:
        return build()
    state = st.session_state if state is None else state
    kept = state.get(FIGURES)
    if kept is None or kept[0] is not sel.comparison:
        kept = (sel.comparison, {})
        state[FIGURES] = kept
    figures = kept[1]
    if key not in figures:
        figures[key] = build()
    return figures[key]
