"""The flat charts of many runs: one row per run, sorted by the measure, one facet per execution mode."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from dashboard.charts.style import _base_layout, plain
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


def _facet_figure(
    facets: list[tuple[str, list[str]]], columns: tuple[str, ...] = ("",), shared_x: bool = True
) -> go.Figure:
    """Empty subplots, one row per facet (its height by its number of runs) and one column per
    entry of `columns` (titles), rows sharing their run axis; facet titles name the mode."""
    runs = sum(len(members) for _, members in facets)
    height = 70 + ROW_PX * runs + FACET_PX * len(facets)
    titles = []
    for mode, _ in facets:
        for column in columns:
            titles.append(" · ".join(t for t in (mode if len(facets) > 1 or mode else "", column) if t))
    fig = make_subplots(
        rows=len(facets),
        cols=len(columns),
        shared_yaxes=True,
        shared_xaxes="columns" if shared_x else False,
        row_heights=[max(len(m), 1) for _, m in facets],
        vertical_spacing=min(0.3, FACET_PX / height),
        horizontal_spacing=0.06,
        subplot_titles=titles,
    )
    for row, (_, members) in enumerate(facets, start=1):
        for col in range(1, len(columns) + 1):
            fig.update_yaxes(categoryorder="array", categoryarray=members, autorange="reversed", row=row, col=col)
    for note in fig.layout.annotations or ():  # facet titles at the left, above their rows
        note.update(
            x=note.x - 0.5 / len(columns) + 0.005 if len(columns) > 1 else 0.0, xanchor="left", font={"size": 13}
        )
    fig.update_layout(height=height)
    return fig


def _flat_layout(fig: go.Figure, title: str, axis: str, runs: int, facets: int, legend: bool = False) -> go.Figure:
    """_base_layout for a flat (faceted) chart: its height from its rows, the value axis titled
    once at the bottom, a legend (when any) in one row above the plot."""
    entries = len({t.name for t in fig.data if t.showlegend is not False and t.name}) if legend else 0
    below = 30 + 22 * -(-entries // 3) if legend else 0  # the legend's rows (about three entries a row in half a page)
    height = 70 + ROW_PX * runs + FACET_PX * facets + below
    _base_layout(fig, title, height=height)
    fig.update_xaxes(showgrid=True, gridcolor="#eee")
    fig.update_xaxes(title_text=axis, row=facets, col=1)
    fig.update_layout(margin={"l": 10, "r": 70, "t": 60, "b": 10 + below}, bargap=0.25)
    if legend:  # under the plot, every entry shown: it never scrolls, hides an entry nor covers the title
        fig.update_layout(
            legend={
                "orientation": "h",
                "yref": "container",
                "yanchor": "bottom",
                "y": 0.0,
                "xanchor": "left",
                "x": 0,
                "traceorder": "normal",
            }
        )
    return fig


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
    in one row above the plot."""
    totals = table.group_by("run").agg(pl.col(value).sum(), pl.col(order_by or value).sum().alias("_order"))
    total = dict(zip(totals["run"].to_list(), totals[value].to_list()))
    facets = _facets(runs, modes, dict(zip(totals["run"].to_list(), totals["_order"].to_list())), descending=True)
    fig = _facet_figure(facets)
    parts = list(colors)
    fmt = fmt or format_count
    for row, (_, members) in enumerate(facets, start=1):
        for name in parts:
            mine = table.filter(pl.col(part) == name)
            values = dict(zip(mine["run"].to_list(), mine[value].to_list()))
            if not any(values.get(r) for r in members):
                continue
            fig.add_trace(
                go.Bar(
                    name=name,
                    y=members,
                    x=[values.get(r, 0.0) for r in members],
                    orientation="h",
                    marker_color=colors[name],
                    legendgroup=name,
                    showlegend=name not in {t.name for t in fig.data},
                    hovertemplate="%{y}<br>" + plain(name) + ": %{x:.4g} " + hover + "<extra></extra>",
                ),
                row=row,
                col=1,
            )
        fig.add_trace(
            go.Scatter(
                y=members,
                x=[total.get(r, 0.0) for r in members],
                mode="text",
                text=[" " + fmt(total.get(r, 0.0)) for r in members],
                textposition="middle right",
                showlegend=False,
                hoverinfo="skip",
                cliponaxis=False,
            ),
            row=row,
            col=1,
        )
    fig.update_layout(barmode="stack")
    return _flat_layout(fig, title, axis, len(runs), len(facets), legend=True)
