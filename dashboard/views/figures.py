"""The tabs' charts built once per selection: a tab switch (a run of the tabs' fragment) draws the
figures the previous visit built instead of building them again.

A plotly figure of 21 runs takes 0.1-0.3 s to build (subplots, one trace per part and facet, the
layout's template copied in); its data comes from the selection's Comparison, which is itself kept
for the session while the runs, labels, baseline and options stay the same (runs.comparison_for).
So the figures are kept beside it, keyed by the chart and the choices it was drawn with, and
dropped as soon as the session has another Comparison. The coloured tables are kept the same way
(tables.show's `keep`: a pandas Styler of a few hundred rows takes 30-40 ms to render).
"""

from __future__ import annotations

import html
from collections.abc import Callable, Hashable
from typing import Any

import plotly.graph_objects as go
import streamlit as st

from dashboard.runs import Selection
from dashboard.views.font import text_px

FIGURES = "_figures"  # st.session_state: (the Comparison they were built from, {key: figure})


def once(sel: Selection | None, key: Hashable, build: Callable[[], Any], state: Any = None) -> Any:
    """The figure `build()` makes for `sel`, built the first time `key` is asked for with this
    selection's Comparison and kept for the next reruns. `key` names the chart and every choice
    (beside the selection) it depends on; the figure must be drawn as it is (never changed; a
    plotly figure is given its labels' room once, when built: label_room).
    Without a selection (a tab drawn on its own), built every time."""
    if sel is None:
        return _drawn(build())
    state = st.session_state if state is None else state
    kept = state.get(FIGURES)
    if kept is None or kept[0] is not sel.comparison:
        kept = (sel.comparison, {})
        state[FIGURES] = kept
    figures = kept[1]
    if key not in figures:
        figures[key] = _drawn(build())
    return figures[key]


def _drawn(built: Any) -> Any:
    """A figure as the dashboard draws it (label_room); anything else as it is."""
    return label_room(built) if isinstance(built, go.Figure) else built


TICK_PX = 12  # Streamlit's plotly theme writes tick labels in the app's font at 12 px
LABEL_GAP_PX = 14  # from a tick label's end to the plot: the theme's 8 px pad and the tick's own gap, and a little over
LABEL_MOST_PX = 360  # the most room the labels take (a longer label is cut at the chart's left edge)


def label_room(fig: go.Figure) -> go.Figure:
    """The chart's category labels on its y axes (a flat chart's run labels) given their room at the
    left from their width in the app's font (views/font.py), and plotly's automatic margin turned off
    for those axes, in place. With it on, plotly draws the chart, measures the labels and draws it
    again: Plotly.newPlot of Kernels' two charts with the 21 H200 runs took 57-61 ms each in a plain
    page, 32-38 ms with the room given. A chart with a y axis title, or
    without category labels, is left as it is. The HTML report's figures are not drawn through here:
    its page, in whatever font the reader's machine has, keeps plotly's measure."""
    axes = list(fig.select_yaxes())
    labelled = [a for a in axes if a.categoryarray is not None and a.showticklabels is not False]
    if not labelled or any(a.title.text for a in axes):
        return fig
    widest = max(text_px(html.unescape(str(c)), TICK_PX) for a in labelled for c in a.categoryarray)
    for axis in axes:
        axis.automargin = False
    fig.layout.margin.l = min(LABEL_MOST_PX, round(widest) + LABEL_GAP_PX)
    return fig
