"""The flat charts of many runs: one row per run, sorted by the measure, one facet per execution mode."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from dashboard.charts.style import _base_dict, plain
from dashboard.engine.model.formatting import format_count

# Bars lie flat whatever the number of runs (one style for 2 runs or 21: a newcomer met upright
# bars in run colours for 2-4 runs and flat ones for more): one row per run with its label beside
# it, sorted by the measure, in one facet per execution mode (eager / compiled / CUDA graphs) and
# in one colour, so 21 runs need no 21-colour legend. FEW_RUNS = 0: no count gets another style.
FEW_RUNS = 0
MODE_ORDER: tuple[str, ...] = ("eager", "compiled", "CUDA graphs")
ROW_PX = 24  # one flat bar
FACET_PX = 44  # a facet's title and gap
Modes = dict[str, str]  # run label -> execution mode (runs.mode_of)


def _flat(runs: list[str]) -> bool:
    return len(runs) > FEW_RUNS


def _facets(
    runs: list[str], modes: Modes | None, value: dict[str, float | None], descending: bool = False
) -> list[tuple[str, list[str]]]:
    """The runs in facets by execution mode (MODE_ORDER, then runs of no known mode under ''),
    each sorted by `value` (ascending, or descending), runs without a value last."""
    groups: dict[str, list[str]] = {}
    for run in runs:
        groups.setdefault((modes or {}).get(run, ""), []).append(run)
    rank = {m: i for i, m in enumerate(MODE_ORDER)}

    def key(run: str) -> tuple[bool, float]:
        v = value.get(run)
        missing = v is None or v != v
        return missing, 0.0 if missing else (-v if descending else v)

    return [(mode, sorted(groups[mode], key=key)) for mode in sorted(groups, key=lambda m: rank.get(m, len(rank)))]


def _facet_layout(facets: list[tuple[str, list[str]]], columns: tuple[str, ...] = ("",)) -> dict:
    """The layout of empty subplots, one row per facet (its height by its number of runs) and one
    column per entry of `columns` (titles), rows sharing their run axis and columns their value
    axis; facet titles name the mode. What plotly's make_subplots lays out for them (the same
    domains, to the last bit), written as a plain dict: make_subplots and the updates of its
    axes through plotly's object tree took 0.05-0.1 s a chart, a tab switch's worth for 21 runs."""
    runs = sum(len(members) for _, members in facets)
    rows, cols = len(facets), len(columns)
    spacing = min(0.3, FACET_PX / (70 + ROW_PX * runs + FACET_PX * rows))
    sizes = [max(len(m), 1) for _, m in facets]
    heights = [(1.0 - spacing * (rows - 1)) * (h / float(sum(sizes))) for h in sizes][::-1]  # bottom row first
    widths = [(1.0 - H_SPACING * (cols - 1)) / cols] * cols
    layout: dict = {"annotations": []}
    for row, (mode, members) in enumerate(facets):
        up = rows - 1 - row  # rows counted from the bottom, as plotly adds up the domains
        y0 = sum(heights[:up]) + up * spacing
        y_domain = [min(max(y0, 0.0), 1.0), min(max(y0 + heights[up], 0.0), 1.0)]
        for col, column in enumerate(columns):
            x_domain = [sum(widths[:col]) + col * H_SPACING, sum(widths[:col]) + col * H_SPACING + widths[col]]
            n = row * cols + col + 1
            x, y = _axis_names(n)
            xaxis = {"anchor": y, "domain": x_domain}
            yaxis = {"anchor": x, "domain": y_domain}
            if row < rows - 1:  # a column's value axis: the bottom row's, ticks drawn there only
                xaxis.update(matches=_axis_names((rows - 1) * cols + col + 1)[0], showticklabels=False)
            if col > 0:  # a row's run axis: the first column's, labels drawn there only
                yaxis.update(matches=_axis_names(row * cols + 1)[1], showticklabels=False)
            yaxis.update(categoryorder="array", categoryarray=members, autorange="reversed")
            layout["xaxis" + x[1:]], layout["yaxis" + y[1:]] = xaxis, yaxis
            title = " · ".join(t for t in (mode if rows > 1 or mode else "", column) if t)
            if title:  # at the left, above its row
                centre = sum(x_domain) / 2.0
                layout["annotations"].append(
                    {
                        "font": {"size": 13},
                        "showarrow": False,
                        "text": title,
                        "x": centre - 0.5 / cols + 0.005 if cols > 1 else 0.0,
                        "xanchor": "left",
                        "xref": "paper",
                        "y": y_domain[1],
                        "yanchor": "bottom",
                        "yref": "paper",
                    }
                )
    return layout


H_SPACING = 0.06  # between the columns of a faceted chart


def _axis_names(n: int) -> tuple[str, str]:
    """The x and y axis a trace in the n-th subplot (counted along the rows from 1) is drawn on."""
    return f"x{n if n > 1 else ''}", f"y{n if n > 1 else ''}"


def _cell(row: int, col: int, cols: int) -> dict:
    """A trace's axes in the subplot at `row`, `col` (from 1) of a grid `cols` wide."""
    x, y = _axis_names((row - 1) * cols + col)
    return {"xaxis": x, "yaxis": y}


def _value_axes(layout: dict, cols: int = 1, col: int | None = None) -> list[dict]:
    """The value (x) axes of a _facet_layout `cols` wide: all, or those of column `col` (from 1)."""
    axes = [(k, v) for k, v in layout.items() if k.startswith("xaxis")]
    return [v for k, v in axes if col is None or (int(k[5:] or 1) - 1) % cols == col - 1]


def _flat_figure(
    data: list[dict], layout: dict, title: str, axis: str, runs: int, facets: int, legend: bool = False
) -> go.Figure:
    """The figure of a flat (faceted) chart: _base_dict, its height from its rows, the value axis
    titled once at the bottom, a legend (when any) in one row under the plot."""
    entries = len({t["name"] for t in data if t.get("showlegend") is not False and t.get("name")}) if legend else 0
    below = 30 + 22 * -(-entries // 3) if legend else 0  # the legend's rows (about three entries a row in half a page)
    height = 70 + ROW_PX * runs + FACET_PX * facets + below
    _base_dict(data, layout, title, height=height)
    for ax in _value_axes(layout):
        ax.update(showgrid=True, gridcolor="#eee")
    cols = sum(1 for k in layout if k.startswith("xaxis")) // facets
    layout["xaxis" + _axis_names((facets - 1) * cols + 1)[0][1:]]["title"] = {"text": axis}
    layout.update(margin={"l": 10, "r": 70, "t": 60, "b": 10 + below}, bargap=0.25)
    if legend:  # under the plot, every entry shown: it never scrolls, hides an entry nor covers the title
        layout["legend"] = {
            "orientation": "h",
            "yref": "container",
            "yanchor": "bottom",
            "y": 0.0,
            "xanchor": "left",
            "x": 0,
            "traceorder": "normal",
        }
    return go.Figure(data=data, layout=layout)


def _flat_stacked(
    table: pl.DataFrame,
    runs: list[str],
    part: str,
    value: str,
    colors: dict[str, str],
    modes: Modes | None,
    title: str,
    axis: str,
    hover: str,
    fmt=None,
    order_by: str | None = None,
) -> go.Figure:
    """Flat bars stacked by `part` (family, copy class), one row per run sorted by its total of
    `order_by` (default: `value`), faceted by mode; the total written beside each bar; the legend
    in one row under the plot."""
    totals = table.group_by("run").agg(pl.col(value).sum(), pl.col(order_by or value).sum().alias("_order"))
    total = dict(zip(totals["run"].to_list(), totals[value].to_list()))
    facets = _facets(runs, modes, dict(zip(totals["run"].to_list(), totals["_order"].to_list())), descending=True)
    layout = _facet_layout(facets)
    values = {name: {} for name in colors}  # part -> run -> value, read in one pass over the table
    for run, name, v in zip(table["run"].to_list(), table[part].to_list(), table[value].to_list()):
        if name in values:
            values[name][run] = v
    fmt = fmt or format_count
    data: list[dict] = []
    for row, (_, members) in enumerate(facets, start=1):
        for name, color in colors.items():
            if not any(values[name].get(r) for r in members):
                continue
            data.append(
                {
                    "type": "bar",
                    "name": name,
                    "y": members,
                    "x": [values[name].get(r, 0.0) for r in members],
                    "orientation": "h",
                    "marker": {"color": color},
                    "legendgroup": name,
                    "showlegend": name not in {t.get("name") for t in data},
                    "hovertemplate": "%{y}<br>" + plain(name) + ": %{x:.4g} " + hover + "<extra></extra>",
                    **_cell(row, 1, 1),
                }
            )
        data.append(
            {
                "type": "scatter",
                "y": members,
                "x": [total.get(r, 0.0) for r in members],
                "mode": "text",
                "text": [" " + fmt(total.get(r, 0.0)) for r in members],
                "textposition": "middle right",
                "showlegend": False,
                "hoverinfo": "skip",
                "cliponaxis": False,
                **_cell(row, 1, 1),
            }
        )
    layout["barmode"] = "stack"
    return _flat_figure(data, layout, title, axis, len(runs), len(facets), legend=True)
