"""The charts' one style: the palette (kernel families, runs, the verdicts' colours), the escaping
of trace and user text for plotly (plain), and the layout every figure ends with (_base_layout)."""

from __future__ import annotations

import html

import plotly.graph_objects as go
import plotly.io as pio
import polars as pl

# One colour per kernel family, everywhere. Copies are red so they stand out; fused attention green.
FAMILY_COLORS: dict[str, str] = {
    "fused attention": "#2ca02c",
    "gemm": "#1f77b4",
    "softmax": "#9467bd",
    "elementwise": "#ff7f0e",
    "copy": "#d62728",
    "memset": "#e377c2",
    "reduction": "#8c564b",
    "communication": "#17becf",
    "convolution": "#bcbd22",
    "embedding": "#7f7f7f",
    "sort/scan": "#393b79",
    "other": "#b0b0b0",
}
FAMILY_ORDER: tuple[str, ...] = tuple(FAMILY_COLORS)
# Twenty distinguishable run colours: a run keeps its colour (its place among all loaded runs), so
# the palette must outlast a bundled collection plus a few uploads before it repeats.
RUN_COLORS: tuple[str, ...] = (
    "#4c78a8",
    "#f58518",
    "#54a24b",
    "#e45756",
    "#72b7b2",
    "#b279a2",
    "#eeca3b",
    "#9d755d",
    "#ff9da6",
    "#79706e",
    "#1f3a93",
    "#c05a00",
    "#2f6b2f",
    "#a4161a",
    "#2a9d8f",
    "#6a3d9a",
    "#9acd32",  # not a second yellow beside #eeca3b
    "#5c4033",
    "#d6336c",
    "#495057",
)
Colors = dict[str, str]  # run label -> colour
HIDDEN_COLOR = "#d62728"
REQUESTED_COLOR = "#9ecae1"
FASTER_COLOR = "#2ca02c"
BASELINE_COLOR = "#9e9e9e"
SLOWER_COLOR = "#d62728"
FLAT_COLOR = "#4c78a8"  # the one colour of the flat bars of many runs (charts.facets)

NO_BAR_COLOR = "#8a6d00"  # the words in a speedup slot that holds no bar

COPY_CLASS_COLORS: dict[str, tuple[str, str]] = {  # copy class -> (legend name, colour); hidden first, in red
    "hidden": ("hidden (made inside another op)", HIDDEN_COLOR),
    "requested": ("requested (copy_/to/clone...)", REQUESTED_COLOR),
    "autograd": ("autograd (gradient work)", "#c7a4d6"),
    "communication": ("communication (collectives)", "#17becf"),
    "unattributed": ("unattributed (no op holds it)", "#c8c8c8"),
}


NAME_CHARS = 90  # hover shows kernel names up to this length
ROOF_COLORS: tuple[str, ...] = ("#444444", "#8c6d31", "#7b4173", "#3182bd")  # one per device roof


def family_color(family: str) -> str:
    return FAMILY_COLORS.get(family, FAMILY_COLORS["other"])


def run_color(i: int) -> str:
    return RUN_COLORS[i % len(RUN_COLORS)]


def run_colors(runs: list[str], colors: Colors | None = None) -> list[str]:
    """Each run's colour: from `colors` (label -> colour, as the dashboard assigns them, stable
    whatever else is selected), else by position."""
    return [(colors or {}).get(run) or run_color(i) for i, run in enumerate(runs)]


def _family_rank(family: str) -> int:
    return FAMILY_ORDER.index(family) if family in FAMILY_ORDER else len(FAMILY_ORDER)


def plain(text: object) -> str:
    """A string from a trace or a user (run label, kernel, op, device name) for plotly text: plotly
    reads <b>, <i>, <br>, <sub>, <span style>, <a href=...> (a live link) and entities in every tick
    label, legend entry, annotation and hover, and %{...} in a hovertemplate. Escaped as entities
    (&lt; &gt; &amp; and &#123; for the brace after %) that plotly draws as the characters
    themselves, so the string shows literally; plain names are unchanged."""
    return html.escape(str(text), quote=False).replace("%{", "%&#123;")


def plain_expr(text: pl.Expr) -> pl.Expr:
    """plain() on every value of a text column, in polars (html.escape's order: & first)."""
    for raw, entity in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("%{", "%&#123;")):
        text = text.str.replace_all(raw, entity, literal=True)
    return text


def _plain_data(value):
    """plain() on every string of a trace's data (lists, tuples, nested customdata); numbers and
    numpy arrays untouched (numeric, or text that went through plain_expr: the timeline's hovers)."""
    if isinstance(value, str):
        return plain(value)
    if isinstance(value, (list, tuple)):
        return [_plain_data(v) for v in value]
    return value


def _literal(fig: go.Figure) -> None:
    """Every string a figure's traces and axes carry shown literally (see plain()). Hovertemplates
    are built with plain() around the labels they quote, and so are not touched here."""
    for trace in fig.data:
        for attr in ("x", "y", "text", "customdata"):
            value = getattr(trace, attr, None)
            if isinstance(value, (str, list, tuple)):
                setattr(trace, attr, _plain_data(value))
        if isinstance(getattr(trace, "name", None), str):
            trace.name = plain(trace.name)
    for axes in (fig.for_each_xaxis, fig.for_each_yaxis):
        # tick labels, and the category order (it names the categories as the data, plain, does)
        axes(lambda ax: ax.update(ticktext=_plain_data(ax.ticktext)) if ax.ticktext is not None else None)
        axes(
            lambda ax: ax.update(categoryarray=_plain_data(ax.categoryarray)) if ax.categoryarray is not None else None
        )
    for note in fig.layout.annotations or ():  # subplot titles (they quote run labels)
        if isinstance(note.text, str):
            note.text = plain(note.text)


def _base_layout(fig: go.Figure, title: str, height: int = 360) -> go.Figure:
    _literal(fig)
    fig.update_traces(textfont=BAR_TEXT, selector={"type": "bar"})
    fig.update_layout(**_base_keys(title, height))
    return fig


BAR_TEXT = {"size": 12, "color": "#333"}  # the values written on or beside bars


def _base_keys(title: str, height: int) -> dict:
    """The layout every figure ends with: its title at the left, its height, margins, the legend
    right of the plot, the template."""
    return {
        "title": {"text": plain(title), "x": 0, "xanchor": "left"},
        "height": height,
        "margin": {"l": 10, "r": 10, "t": 50, "b": 10},
        "legend": {"orientation": "v", "yanchor": "top", "y": 1.0, "xanchor": "left", "x": 1.01},
        "template": TEMPLATE,
    }


def _template(name: str = "plotly_white") -> dict:
    """Plotly's `name` template less what none of our charts draws: its defaults for the trace
    types we never make (heatmaps, pies, 3-D, maps... all but bar, scatter and scattergl) and its
    polar, ternary, 3-D scene, map and colour-scale blocks. Every figure carries its template to
    the browser, and plotly.js walks all of it on each draw: 7 KB of the whole, 1.5 KB of this."""
    full = pio.templates[name].to_plotly_json()
    unused = {"geo", "mapbox", "map", "polar", "scene", "ternary", "coloraxis", "colorscale"}
    return {
        "data": {kind: full["data"][kind] for kind in ("bar", "scatter", "scattergl")},
        "layout": {k: v for k, v in full["layout"].items() if k not in unused},
    }


TEMPLATE = _template()


def _base_dict(data: list[dict], layout: dict, title: str, height: int = 360) -> None:
    """_base_layout on a figure still in plain dicts (traces `data`, `layout`), in place: the
    strings shown literally as _literal shows them, the bars' text style, the base layout."""
    for trace in data:
        for attr in ("x", "y", "text", "customdata"):
            if isinstance(trace.get(attr), (str, list, tuple)):
                trace[attr] = _plain_data(trace[attr])
        if isinstance(trace.get("name"), str):
            trace["name"] = plain(trace["name"])
        if trace.get("type") == "bar":
            trace["textfont"] = {**trace.get("textfont", {}), **BAR_TEXT}
    for key, axis in layout.items():
        if key.startswith(("xaxis", "yaxis")):
            for attr in ("ticktext", "categoryarray"):
                if axis.get(attr) is not None:
                    axis[attr] = _plain_data(axis[attr])
    for note in layout.get("annotations", ()):
        if isinstance(note.get("text"), str):
            note["text"] = plain(note["text"])
    layout.update(_base_keys(title, height))
