"""Plotly figure builders: engine frames in, figures out. No streamlit here, so the offline HTML
reports draw the very same figures as the dashboard.

Every builder takes polars frames exactly as dashboard.engine returns them (or review's frames)
plus display labels; units follow the frame (µs for `*_us`, ns for `*_ns`, shown as µs).
"""

from __future__ import annotations

import html
import re

import numpy as np
import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from dashboard.engine.compare.fingerprint import CROSS_DEVICE
from dashboard.engine.compare.speed import NO_SPEEDUP

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
    "#b8860b",
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

# Above this many events in one timeline, events narrower than a screen pixel are merged per lane.
TIMELINE_MAX_EVENTS = 20_000
TIMELINE_PIXELS = 2_000
LANE_PX = 18
LABEL_PX = 14  # the least height a lane label needs; denser lanes show every n-th label
TIMELINE_MAX_HEIGHT = 4000
NAME_CHARS = 90  # hover shows kernel names up to this length
CPU_LANE = re.compile(r"^CPU (\S+) depth (\d+)$")
GPU_LANE = re.compile(r"^GPU (\S+) stream (\S+)$")


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
    fig.for_each_xaxis(lambda ax: ax.update(ticktext=_plain_data(ax.ticktext)) if ax.ticktext is not None else None)
    fig.for_each_yaxis(lambda ax: ax.update(ticktext=_plain_data(ax.ticktext)) if ax.ticktext is not None else None)
    for note in fig.layout.annotations or ():  # subplot titles (they quote run labels)
        if isinstance(note.text, str):
            note.text = plain(note.text)


def _base_layout(fig: go.Figure, title: str, height: int = 360) -> go.Figure:
    _literal(fig)
    fig.update_traces(textfont={"size": 12, "color": "#333"}, selector={"type": "bar"})
    fig.update_layout(
        title={"text": plain(title), "x": 0, "xanchor": "left"},
        height=height,
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
        legend={"orientation": "v", "yanchor": "top", "y": 1.0, "xanchor": "left", "x": 1.01},
        template="plotly_white",
    )
    return fig


# Up to FEW_RUNS runs, bars stand upright in the selection's order, one colour per run. More lie
# flat, one row per run with its label beside it, sorted by the measure, in one facet per execution
# mode (eager / compiled / CUDA graphs) and in one colour, so 21 runs need no 21-colour legend.
FEW_RUNS = 4
MODE_ORDER: tuple[str, ...] = ("eager", "compiled", "CUDA graphs")
ROW_PX = 24  # one flat bar
FACET_PX = 44  # a facet's title and gap
FLAT_COLOR = "#4c78a8"
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
) -> go.Figure:
    """Flat bars stacked by `part` (family, copy class), one row per run sorted by its total,
    faceted by mode; the total written beside each bar; the legend in one row above the plot."""
    totals = table.group_by("run").agg(pl.col(value).sum())
    total = dict(zip(totals["run"].to_list(), totals[value].to_list()))
    facets = _facets(runs, modes, total, descending=True)
    fig = _facet_figure(facets)
    parts = list(colors)
    fmt = fmt or _format_count
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


def work_by_family_stacked(families: pl.DataFrame, runs: list[str], unit: str, modes: Modes | None = None) -> go.Figure:
    """Device work per step, one stacked bar per run, coloured by kernel family.
    `families`: run, family, count_per_step (review.families). `unit` names what was counted.
    More than FEW_RUNS runs: flat bars sorted by total, faceted by `modes` (run -> mode)."""
    if _flat(runs):
        present = sorted(set(families["family"].to_list()), key=_family_rank)
        return _flat_stacked(
            families,
            runs,
            "family",
            "count_per_step",
            {f: family_color(f) for f in present},
            modes,
            f"Device work per step ({unit}), by kernel family",
            f"{unit} per step",
            "per step",
        )
    fig = go.Figure()
    present = sorted(set(families["family"].to_list()), key=_family_rank)
    for family in present:
        part = families.filter(pl.col("family") == family)
        values = dict(zip(part["run"].to_list(), part["count_per_step"].to_list()))
        fig.add_trace(
            go.Bar(
                name=family,
                x=runs,
                y=[values.get(r, 0.0) for r in runs],
                marker_color=family_color(family),
                hovertemplate="%{x}<br>" + plain(family) + ": %{y:.3g} per step<extra></extra>",
            )
        )
    totals = families.group_by("run").agg(pl.col("count_per_step").sum())
    total = dict(zip(totals["run"].to_list(), totals["count_per_step"].to_list()))
    fig.add_trace(
        go.Scatter(
            x=runs,
            y=[total.get(r, 0.0) for r in runs],
            mode="text",
            text=[_format_count(total.get(r, 0.0)) for r in runs],
            textposition="top center",
            showlegend=False,
            hoverinfo="skip",
        )
    )
    fig.update_layout(barmode="stack")
    fig.update_yaxes(title_text=f"{unit} per step")
    return _base_layout(fig, f"Device work per step ({unit}), by kernel family")


def family_grouped(
    families: pl.DataFrame, runs: list[str], value: str, colors: Colors | None = None, modes: Modes | None = None
) -> go.Figure:
    """Per kernel family, one bar per run. value: 'count' (count_per_step) or 'time' (us_per_step).
    `colors`: run label -> colour (see run_colors). More than FEW_RUNS runs: one flat bar per run
    stacked by family (family colours), sorted by total, faceted by `modes`."""
    column, axis, title = (
        ("count_per_step", "count per step", "Count per step by kernel family")
        if value == "count"
        else ("us_per_step", "µs per step", "Time per step by kernel family (µs)")
    )
    present = sorted(set(families["family"].to_list()), key=_family_rank)
    if _flat(runs):
        return _flat_stacked(
            families,
            runs,
            "family",
            column,
            {f: family_color(f) for f in present},
            modes,
            title,
            axis,
            axis,
            fmt=_format_count if value == "count" else (lambda v: format_us(v)),
        )
    fig = go.Figure()
    for run, color in zip(runs, run_colors(runs, colors)):
        part = families.filter(pl.col("run") == run)
        values = dict(zip(part["family"].to_list(), part[column].to_list()))
        fig.add_trace(
            go.Bar(
                name=run,
                x=present,
                y=[values.get(f, 0.0) for f in present],
                marker_color=color,
                hovertemplate=plain(run) + "<br>%{x}: %{y:.4g} " + axis + "<extra></extra>",
            )
        )
    fig.update_layout(barmode="group")
    fig.update_yaxes(title_text=axis)
    return _base_layout(fig, title)


def step_time_bars(
    speed: pl.DataFrame,
    log: bool = False,
    colors: Colors | None = None,
    title: str = "",
    modes: Modes | None = None,
    baseline: str | None = None,
) -> go.Figure:
    """Median time per step with its p10-p90 spread as error bars; each bar's value is written
    above its whisker, so the two never cover each other. `speed`: speed.speed_table. `log`:
    logarithmic y axis, for runs that differ by orders of magnitude. `colors`: run -> colour.
    More than FEW_RUNS runs: flat bars, fastest first, faceted by `modes`, the `baseline` hatched
    and named."""
    runs = speed["run"].to_list()
    other = _other_work(speed)
    if other:
        title = (title or "Median time per step, with spread") + f" ({OTHER_WORK_KEY})"
    if _flat(runs):
        return _flat_step_time(speed, log, title, modes, baseline)
    median = speed["median_us"].to_list()
    p90 = speed["p90_us"].to_list()
    low = [m - p for m, p in zip(median, speed["p10_us"].to_list())]
    high = [p - m for m, p in zip(median, p90)]
    fig = go.Figure(
        go.Bar(
            x=runs,
            y=median,
            marker_color=run_colors(runs, colors),
            marker_pattern_shape=["x" if r in other else "" for r in runs],
            showlegend=False,
            error_y={"type": "data", "symmetric": False, "array": high, "arrayminus": low, "color": "#444"},
            customdata=list(zip(speed["p10_us"].to_list(), p90, speed["time_source"].to_list())),
            hovertemplate="%{x}<br>median %{y:.4g} µs<br>p10 %{customdata[0]:.4g} µs, p90 %{customdata[1]:.4g} µs<br>%{customdata[2]}<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=runs,
            y=[max(m, p) if p == p else m for m, p in zip(median, p90)],
            mode="text",
            text=[format_us(m) + (f" · {OTHER_WORK}" if r in other else "") for r, m in zip(runs, median)],
            textposition="top center",
            cliponaxis=False,
            showlegend=False,
            hoverinfo="skip",
        )
    )
    fig.update_yaxes(
        title_text="µs per step (median; whiskers: p10 to p90)",
        type="log" if log else "linear",
        rangemode="normal" if log else "tozero",
    )
    tops = [max(m, p) if p == p else m for m, p in zip(median, p90) if m == m]
    if tops and not log:  # head room, so the labels above the tallest whisker stay inside the plot
        fig.update_yaxes(range=[0, max(tops) * 1.18 or 1.0])
    return _base_layout(fig, title or "Median time per step, with spread")


def _flat_step_time(speed: pl.DataFrame, log: bool, title: str, modes: Modes | None, baseline: str | None) -> go.Figure:
    rows = {r["run"]: r for r in speed.iter_rows(named=True)}
    other = _other_work(speed)
    facets = _facets(list(rows), modes, {r: rows[r]["median_us"] for r in rows})
    fig = _facet_figure(facets)
    for row, (_, members) in enumerate(facets, start=1):
        median = [rows[r]["median_us"] for r in members]
        p10 = [rows[r]["p10_us"] for r in members]
        p90 = [rows[r]["p90_us"] for r in members]
        fig.add_trace(
            go.Bar(
                y=members,
                x=median,
                orientation="h",
                showlegend=False,
                marker={
                    "color": [BASELINE_COLOR if r == baseline else FLAT_COLOR for r in members],
                    "pattern": {"shape": ["/" if r == baseline else "x" if r in other else "" for r in members]},
                },
                error_x={
                    "type": "data",
                    "symmetric": False,
                    "array": [(b - m) if b == b and m == m else 0 for m, b in zip(median, p90)],
                    "arrayminus": [(m - a) if a == a and m == m else 0 for m, a in zip(median, p10)],
                    "color": "#444",
                },
                customdata=[[a, b, rows[r]["time_source"]] for r, a, b in zip(members, p10, p90)],
                hovertemplate="%{y}<br>median %{x:.4g} µs<br>p10 %{customdata[0]:.4g} µs, p90 %{customdata[1]:.4g} µs<br>%{customdata[2]}<extra></extra>",
            ),
            row=row,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                y=members,
                x=[max(m, b) if b == b else m for m, b in zip(median, p90)],
                mode="text",
                cliponaxis=False,
                text=[
                    " " + format_us(m) + (" · baseline" if r == baseline else f" · {OTHER_WORK}" if r in other else "")
                    for r, m in zip(members, median)
                ],
                textposition="middle right",
                showlegend=False,
                hoverinfo="skip",
            ),
            row=row,
            col=1,
        )
    fig.update_xaxes(type="log" if log else "linear", rangemode="normal" if log else "tozero")
    return _flat_layout(
        fig,
        title or "Median time per step, with spread (fastest first)",
        "µs per step (median; whiskers: p10 to p90)",
        len(rows),
        len(facets),
    )


def speedup_bars(speed: pl.DataFrame, baseline: str, log: bool = False, modes: Modes | None = None) -> go.Figure:
    """Speedup against the baseline (> 1 is faster), with a dashed line at 1; the baseline's own
    bar is labelled 'baseline' (no floating label to collide with the bars'). `speed`: the rows
    of one device group of speed.speed_table; `log`: logarithmic y axis."""
    runs = speed["run"].to_list()
    values = speed["speedup"].to_list()
    related = speed["relation"].to_list() if "relation" in speed.columns else [None] * len(runs)
    colors = [
        BASELINE_COLOR if r == baseline else (FASTER_COLOR if (v or 0) >= 1 else SLOWER_COLOR)
        for r, v in zip(runs, values)
    ]
    text = _speedup_text(runs, values, related, baseline)
    if _flat(runs):
        return _flat_speedup(runs, values, text, colors, baseline, log, modes)
    fig = go.Figure(
        go.Bar(
            x=runs,
            y=values,
            marker_color=colors,
            text=text,
            textposition="outside",
            cliponaxis=False,
            hovertemplate="%{x}: %{y:.3g}× the baseline's speed<extra></extra>",
        )
    )
    fig.add_hline(y=1.0, line_dash="dash", line_color="#444")
    fig.update_yaxes(
        title_text="speedup (baseline time / run time)",
        type="log" if log else "linear",
        rangemode="normal" if log else "tozero",
    )
    _base_layout(fig, f"Speedup against {baseline} (above 1 = faster)")
    for run, value, words in zip(runs, values, text):
        if run != baseline and (value is None or value != value or value <= 0):  # no bar: its slot says why
            fig.add_annotation(
                x=plain(run),  # the axis holds the runs as _literal wrote them
                y=0,  # 0 on a linear axis, 10^0 = 1 on a log one
                text=_wrapped(words),
                showarrow=False,
                yanchor="bottom",
                font={"size": 12, "color": NO_BAR_COLOR},
            )
    return fig


def _flat_speedup(
    runs: list[str], values: list, text: list[str], colors: list[str], baseline: str, log: bool, modes: Modes | None
) -> go.Figure:
    by = {r: (v, t, c) for r, v, t, c in zip(runs, values, text, colors)}
    facets = _facets(runs, modes, {r: v for r, v in zip(runs, values)}, descending=True)
    fig = _facet_figure(facets)
    for row, (_, members) in enumerate(facets, start=1):
        fig.add_trace(
            go.Bar(
                y=members,
                x=[by[r][0] for r in members],
                orientation="h",
                marker_color=[by[r][2] for r in members],
                marker_pattern_shape=["/" if r == baseline else "" for r in members],
                text=[by[r][1] for r in members],
                textposition="outside",
                cliponaxis=False,
                showlegend=False,
                hovertemplate="%{y}: %{x:.3g}× the baseline's speed<extra></extra>",
            ),
            row=row,
            col=1,
        )
        fig.add_vline(x=1.0, line_dash="dash", line_color="#444", row=row, col=1)
    fig.update_xaxes(type="log" if log else "linear", rangemode="normal" if log else "tozero")
    top = max((v for v in values if v is not None and v == v), default=1.0)
    if not log:  # room for the labels beside the longest bar
        fig.update_xaxes(range=[0, top * 1.35])
    _flat_layout(
        fig,
        f"Speedup against {baseline} (right of 1 = faster)",
        "speedup (baseline time / run time)",
        len(runs),
        len(facets),
    )
    for row, (_, members) in enumerate(facets, start=1):
        for run in members:
            value, words, _ = by[run]
            if run != baseline and (value is None or value != value or value <= 0):  # no bar: its slot says why
                fig.add_annotation(
                    x=0,
                    y=plain(run),
                    text=plain(words),
                    showarrow=False,
                    xanchor="left",
                    font={"size": 12, "color": NO_BAR_COLOR},
                    row=row,
                    col=1,
                )
    return fig


NO_BAR_COLOR = "#8a6d00"  # the words in a speedup slot that holds no bar
OTHER_WORK = "other work"  # a step-time bar of a run that does other work than its baseline
OTHER_WORK_KEY = "hatched ×: other work"  # the step-time chart's title, when it has such bars


def _other_work(speed: pl.DataFrame) -> set[str]:
    """The runs of a speed.speed_table that do other work than their baseline (no speedup)."""
    if "relation" not in speed.columns:
        return set()
    return set(speed.filter(pl.col("relation") == NO_SPEEDUP)["run"].to_list())


def _wrapped(words: str) -> str:
    """A slot's words for a narrow bar slot: plain(), broken after the colon ('different workload:<br>no speedup')."""
    return "<br>".join(plain(part.strip()) for part in words.split(":", 1)) if ":" in words else plain(words)


def _speedup_text(runs: list[str], values: list, related: list, baseline: str) -> list[str]:
    """Each speedup bar's label: 'baseline', the relation when there is no speedup, else 'N× faster/slower'."""
    return [
        "baseline"
        if r == baseline
        else (
            (rel or "no speedup")
            if v is None or v <= 0
            else (f"{v:.2f}× faster" if v >= 1 else f"{1 / v:.2f}× slower")
            + (" (cross-device)" if rel == CROSS_DEVICE else "")
        )
        for r, v, rel in zip(runs, values, related)
    ]


def throughput_bars(speed: pl.DataFrame, colors: Colors | None = None, modes: Modes | None = None) -> go.Figure:
    """Tokens per second (left) and dollars per million tokens (right), runs with tokens only.
    `colors`: run -> colour. More than FEW_RUNS runs: flat bars, highest throughput first,
    faceted by `modes`."""
    known = speed.filter(pl.col("tokens_per_s").is_not_null())
    priced = known["usd_per_mtok"].is_not_null().any()
    titles = ("tokens / s (higher is better)", "$ per million tokens (lower is better)")
    if _flat(known["run"].to_list()):
        return _flat_throughput(known, priced, titles, modes)
    fig = make_subplots(rows=1, cols=2 if priced else 1, subplot_titles=titles if priced else titles[:1])
    runs = known["run"].to_list()
    every = speed["run"].to_list()
    palette = dict(zip(every, run_colors(every, colors)))
    colors = [palette[r] for r in runs]
    fig.add_trace(
        go.Bar(
            x=runs,
            y=known["tokens_per_s"].to_list(),
            marker_color=colors,
            showlegend=False,
            text=[f"{v:,.0f}" for v in known["tokens_per_s"].to_list()],
            textposition="outside",
            cliponaxis=False,
            hovertemplate="%{x}: %{y:,.0f} tokens/s<extra></extra>",
        ),
        row=1,
        col=1,
    )
    cost = known["usd_per_mtok"].to_list()
    if not priced:  # no price for these runs: no empty cost panel
        return _base_layout(fig, "Throughput")
    fig.add_trace(
        go.Bar(
            x=runs,
            y=cost,
            marker_color=colors,
            showlegend=False,
            text=["" if v is None else format_usd(v) for v in cost],
            textposition="outside",
            cliponaxis=False,
            hovertemplate="%{x}: $%{y:.4g} per million tokens<extra></extra>",
        ),
        row=1,
        col=2,
    )
    fig.update_yaxes(tickprefix="$", tickformat=".3~r", row=1, col=2)
    return _base_layout(fig, "Throughput and cost")


def format_usd(value: float | None) -> str:
    """Dollars as people write them: '$1.23', '$0.0721', '$0.000205' (never '$7.225e-05' or '$200µ')."""
    if value is None or value != value:
        return ""
    if value == 0 or abs(value) >= 1:
        return f"${value:,.2f}"
    digits = max(2, 2 - int(np.floor(np.log10(abs(value)))))
    return f"${value:.{digits}f}"


def _flat_throughput(known: pl.DataFrame, priced: bool, titles: tuple[str, str], modes: Modes | None) -> go.Figure:
    rows = {r["run"]: r for r in known.iter_rows(named=True)}
    facets = _facets(list(rows), modes, {r: rows[r]["tokens_per_s"] for r in rows}, descending=True)
    columns = titles if priced else titles[:1]
    fig = _facet_figure(facets, columns, shared_x=True)
    for row, (_, members) in enumerate(facets, start=1):
        tps = [rows[r]["tokens_per_s"] for r in members]
        fig.add_trace(
            go.Bar(
                y=members,
                x=tps,
                orientation="h",
                marker_color=FLAT_COLOR,
                showlegend=False,
                text=[f"{v / 1e6:,.3g} M" if v >= 1e6 else f"{v:,.0f}" for v in tps],
                textposition="outside",
                cliponaxis=False,
                hovertemplate="%{y}: %{x:,.0f} tokens/s<extra></extra>",
            ),
            row=row,
            col=1,
        )
        if priced:
            cost = [rows[r]["usd_per_mtok"] for r in members]
            fig.add_trace(
                go.Bar(
                    y=members,
                    x=cost,
                    orientation="h",
                    marker_color="#b279a2",
                    showlegend=False,
                    text=[format_usd(v) for v in cost],
                    textposition="outside",
                    cliponaxis=False,
                    hovertemplate="%{y}: $%{x:.4g} per million tokens<extra></extra>",
                ),
                row=row,
                col=2,
            )
    fig.update_xaxes(tickformat=".3~s", col=1)
    if priced:
        fig.update_xaxes(tickprefix="$", tickformat=".3~r", col=2)
        top = max((v for v in known["usd_per_mtok"].to_list() if v is not None), default=1.0)
        fig.update_xaxes(range=[0, top * 1.3], col=2)
    top = max(known["tokens_per_s"].to_list(), default=1.0)
    fig.update_xaxes(range=[0, top * 1.3], col=1)
    _flat_layout(fig, "Throughput and cost", "", len(rows), len(facets))
    return fig


COPY_CLASS_COLORS: dict[str, tuple[str, str]] = {  # copy class -> (legend name, colour); hidden first, in red
    "hidden": ("hidden (made inside another op)", HIDDEN_COLOR),
    "requested": ("requested (copy_/to/clone...)", REQUESTED_COLOR),
    "autograd": ("autograd (gradient work)", "#c7a4d6"),
    "communication": ("communication (collectives)", "#17becf"),
    "unattributed": ("unattributed (no op holds it)", "#c8c8c8"),
}


def copy_time_bars(groups: pl.DataFrame, runs: list[str], modes: Modes | None = None) -> go.Figure:
    """Copy time per step per run, stacked by copy class (hidden, the alarm, in red; requested,
    autograd, communication, unattributed). `groups`: review.copy_groups. More than FEW_RUNS
    runs: flat bars sorted by copy time, faceted by `modes`."""
    fig = go.Figure()
    present = set(groups["copy_class"].to_list()) if "copy_class" in groups.columns else set()
    classes = [c for c in COPY_CLASS_COLORS if c in present] + sorted(c for c in present - set(COPY_CLASS_COLORS) if c)
    if _flat(runs) and classes:
        named = groups.with_columns(
            pl.col("copy_class")
            .replace_strict({c: COPY_CLASS_COLORS.get(c, (c, ""))[0] for c in classes}, default=pl.col("copy_class"))
            .alias("class_name")
        )
        return _flat_stacked(
            named,
            runs,
            "class_name",
            "us_per_step",
            {
                COPY_CLASS_COLORS.get(c, (c, ""))[0]: COPY_CLASS_COLORS.get(c, (c, FAMILY_COLORS["other"]))[1]
                for c in classes
            },
            modes,
            "Time spent copying per step",
            "copy time, µs per step",
            "µs per step",
            fmt=lambda v: format_us(v),
        )
    for copy_class in classes or ["hidden"]:
        name, color = COPY_CLASS_COLORS.get(copy_class, (copy_class, FAMILY_COLORS["other"]))
        part = (
            groups.filter(pl.col("copy_class") == copy_class)
            .group_by("run")
            .agg(pl.col("us_per_step").sum(), pl.col("per_step").sum())
        )
        us = dict(zip(part["run"].to_list(), part["us_per_step"].to_list()))
        count = dict(zip(part["run"].to_list(), part["per_step"].to_list()))
        fig.add_trace(
            go.Bar(
                name=name,
                x=runs,
                y=[us.get(r, 0.0) for r in runs],
                marker_color=color,
                customdata=[count.get(r, 0.0) for r in runs],
                hovertemplate="%{x}: %{y:.4g} µs per step in %{customdata:.3g} copies<extra>"
                + plain(name)
                + "</extra>",
            )
        )
    fig.update_layout(barmode="stack")
    fig.update_yaxes(title_text="copy time, µs per step")
    return _base_layout(fig, "Time spent copying per step", height=320)


def family_diff_bars(
    diff: pl.DataFrame, label_a: str, label_b: str, color_a: str | None = None, color_b: str | None = None
) -> go.Figure:
    """Time by kernel family in the two compared steps. `diff`: diff.family_time_diff (ns);
    `color_a`/`color_b`: the two runs' colours (distinct ones are used when they are the same)."""
    ordered = diff.sort(pl.col("family").map_elements(_family_rank, return_dtype=pl.Int64))
    families = ordered["family"].to_list()
    color_a = color_a or run_color(0)
    color_b = color_b if color_b and color_b != color_a else next(c for c in RUN_COLORS if c != color_a)
    fig = go.Figure()
    for side, label, color in (("a", label_a, color_a), ("b", label_b, color_b)):
        fig.add_trace(
            go.Bar(
                name=label,
                x=families,
                y=[v / 1000.0 for v in ordered[f"{side}_ns"].to_list()],
                marker_color=color,
                customdata=ordered[f"{side}_count"].to_list(),
                hovertemplate=plain(label) + "<br>%{x}: %{y:.4g} µs in %{customdata} units<extra></extra>",
            )
        )
    fig.update_layout(barmode="group")
    fig.update_yaxes(title_text="µs in the step")
    _base_layout(fig, "Time by kernel family in the two steps", height=340)
    # the two step names are long: legend above the plot, not beside it squeezing the bars
    fig.update_layout(
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "left", "x": 0}, margin={"t": 80}
    )
    return fig


ROOF_COLORS: tuple[str, ...] = ("#444444", "#8c6d31", "#7b4173", "#3182bd")  # one per device roof
MEASURE_SYMBOLS = {"attention ops": "circle", "whole step": "diamond"}
MEASURE_KEYS = {"attention ops": "attention op or kernel", "whole step": "whole step (collectors' traces)"}
OWN_BYTES = "bytes its own kernels move, from the recorded shapes"  # roofline.OWN_BYTES_WORDS


def _bytes_words(value: float | None) -> str:
    """Bytes in decimal units for a hover: '2.75 GB', '67.1 MB', '4 B'; 'unknown' for None."""
    if value is None or value != value:
        return "unknown"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} B"


LABEL_CLUSTER = 0.04  # points closer than this in log10 on both axes (about 10%) share one label
LABEL_NAMES = 3  # run names a label lists before '+n more'


def _cluster_labels(points: pl.DataFrame) -> list[tuple[float, float, str]]:
    """(x, y, text) of one label per cluster of roofline points that would overlap: the runs'
    names in their order, each once, the first LABEL_NAMES of them and '+n more'; at the cluster's
    rightmost point, so the text starts past the markers."""
    clusters: list[tuple[float, float, float, float, list[str]]] = []  # log x, log y, right x, its y, runs
    for run, x, y in points.select("run", "intensity", "tflops").iter_rows():
        if not x or not y or x <= 0 or y <= 0:
            continue
        lx, ly = float(np.log10(x)), float(np.log10(y))
        for i, (cx, cy, rx, ry, names) in enumerate(clusters):
            if abs(cx - lx) < LABEL_CLUSTER and abs(cy - ly) < LABEL_CLUSTER:
                if run not in names:
                    names.append(run)
                clusters[i] = (cx, cy, *((x, y) if x > rx else (rx, ry)), names)
                break
        else:
            clusters.append((lx, ly, x, y, [run]))
    out = []
    for _, _, x, y, names in clusters:
        more = f" +{len(names) - LABEL_NAMES} more" if len(names) > LABEL_NAMES else ""
        out.append((x, y, ", ".join(names[:LABEL_NAMES]) + more))
    return out


def roofline(points: pl.DataFrame, colors: Colors | None = None) -> go.Figure:
    """Achieved TFLOP/s against arithmetic intensity (FLOP per byte its own kernels move, from the
    recorded shapes: review.roofline_points), both axes logarithmic: one marker per run's attention
    op/kernel group (circles) or whole step (diamonds), coloured by run, and each device's roofline
    drawn once per peak (the flat compute roof at peak_tflops and the bandwidth slope intensity ×
    peak_tbps). Points without a peak (a CPU, a device the peaks table lacks) are drawn with no roof.

    The legend holds what a reader needs: the roofs, and up to FEW_RUNS runs one entry per run and
    measure; with more runs, each cluster of overlapping points carries its runs' names beside it
    (_cluster_labels) and the legend only says what a circle and a diamond are."""
    fig = go.Figure()
    if points.height == 0:
        return _base_layout(fig, "Attention on the roofline: nothing measured")
    runs = list(dict.fromkeys(points["run"].to_list()))
    palette = dict(zip(runs, run_colors(runs, colors)))
    many = _flat(runs)
    low = float(points["intensity"].min())
    high = float(points["intensity"].max())
    roofs = (
        points.filter(pl.col("peak_tflops").is_not_null() & pl.col("peak_tbps").is_not_null())
        .select("device", "dtype", "peak_tflops", "peak_tbps")
        .unique(maintain_order=True)
    )
    for roof in roofs.iter_rows(named=True):
        high = max(high, roof["peak_tflops"] / roof["peak_tbps"])
    xs = np.geomspace(max(low / 4, 1e-3), high * 4, 200) if high > 0 else np.array([1.0, 10.0])
    for i, roof in enumerate(roofs.iter_rows(named=True)):
        peak, bw = roof["peak_tflops"], roof["peak_tbps"]
        dtype = _dtype_word(roof["dtype"])
        name = f"{roof['device']} {dtype} roof".replace("  ", " ")
        fig.add_trace(
            go.Scatter(
                x=xs.tolist(),
                y=np.minimum(peak, xs * bw).tolist(),
                mode="lines",
                name=name,
                line={"color": ROOF_COLORS[i % len(ROOF_COLORS)], "dash": "dash", "width": 1.5},
                hovertemplate=f"{plain(name)}<br>compute roof {peak:,.4g} TFLOP/s, bandwidth {bw:.4g} TB/s<br>ridge at {peak / bw:,.4g} FLOP/byte"
                "<br>at %{x:.4g} FLOP/byte: %{y:.4g} TFLOP/s<extra></extra>",
            )
        )
    has_bytes = "bytes" in points.columns
    measures_drawn = []
    for run in runs:
        mine = points.filter(pl.col("run") == run)
        for measure, symbol in MEASURE_SYMBOLS.items():
            part = mine.filter(pl.col("measure") == measure)
            if part.height == 0:
                continue
            if measure not in measures_drawn:
                measures_drawn.append(measure)
            per = "call" if measure == "attention ops" else "step"
            custom = [
                [
                    (r["name"] or "")[:NAME_CHARS],
                    r["shape"] or "shape from the collector",
                    r["backend"] or "—",
                    r["device"] or "—",
                    "no roofline for this device"
                    if r["pct_of_roofline"] is None
                    else f"{r['pct_of_roofline']:.3g}% of the roof at its intensity ({r['bound']}-bound)",
                    r["count"] or 0,
                    r["mean_us"] if r["mean_us"] is not None else float("nan"),
                    r["tbps"] if r["tbps"] is not None else float("nan"),
                    _bytes_words(r["bytes"] if has_bytes else None),
                ]
                for r in part.iter_rows(named=True)
            ]
            fig.add_trace(
                go.Scatter(
                    x=part["intensity"].to_list(),
                    y=part["tflops"].to_list(),
                    mode="markers",
                    name=f"{run} ({measure})",
                    legendgroup=run,
                    showlegend=not many,
                    marker={"color": palette[run], "symbol": symbol, "size": 12, "line": {"color": "#222", "width": 1}},
                    customdata=custom,
                    hovertemplate=f"<b>{plain(run)}</b> · {plain(measure)}<br>"
                    + "%{customdata[0]}<br>%{customdata[1]} · backend %{customdata[2]}<br>"
                    f"%{{customdata[8]}} a {per}: the {OWN_BYTES}<br>"
                    "%{customdata[3]}: %{y:.4g} TFLOP/s, %{customdata[7]:.3g} TB/s at %{x:.4g} FLOP/byte<br>%{customdata[4]}<br>"
                    "%{customdata[5]} × %{customdata[6]:.4g} µs<extra></extra>",
                )
            )
    if many:  # the runs named beside their points, one label per cluster of points that overlap; the shapes' key, once
        middle = (np.log10(xs[0]) + np.log10(xs[-1])) / 2
        for x, y, label in _cluster_labels(points):
            left = np.log10(x) > middle  # right half: the text runs leftwards, so it stays inside the plot
            fig.add_trace(
                go.Scatter(
                    x=[x / 1.15 if left else x * 1.15],
                    y=[y],
                    mode="text",
                    text=[label],
                    showlegend=False,
                    textposition="middle left" if left else "middle right",
                    hoverinfo="skip",
                    textfont={"size": 10, "color": "#444"},
                    name=label,
                )
            )
        for measure in [m for m in MEASURE_SYMBOLS if m in measures_drawn]:
            fig.add_trace(
                go.Scatter(
                    x=[None],
                    y=[None],
                    mode="markers",
                    name=MEASURE_KEYS[measure],
                    hoverinfo="skip",
                    marker={
                        "color": "#bbbbbb",
                        "symbol": MEASURE_SYMBOLS[measure],
                        "size": 11,
                        "line": {"color": "#222", "width": 1},
                    },
                )
            )
    # powers of ten only: plotly's default log ticks label 2 and 5 of each decade ("1000, 5, 2, 100")
    fig.update_xaxes(
        type="log",
        title_text="FLOP per byte its own kernels move (from the recorded shapes)",
        showgrid=True,
        gridcolor="#eee",
        dtick=1,
        tickformat=",~g",
    )
    fig.update_yaxes(
        type="log", title_text="achieved TFLOP/s", showgrid=True, gridcolor="#eee", dtick=1, tickformat=",~g"
    )
    _base_layout(fig, "Attention on the roofline (log-log): each point at the bytes its own kernels move", height=460)
    fig.update_layout(
        legend={"orientation": "h", "yanchor": "top", "y": -0.24, "xanchor": "left", "x": 0}, margin={"b": 40}
    )
    return fig


def _dtype_word(dtype: str | None) -> str:
    """'c10::BFloat16' -> 'bf16' (the peaks table's word) for a legend; the name itself when unknown."""
    from dashboard.engine.analyses.efficiency import DTYPES

    return DTYPES.get(dtype or "", (dtype or "",))[0]


def lane_order(lanes: list[str]) -> list[str]:
    """GPU streams first (by device, stream), then CPU threads by nesting depth (numeric)."""

    def key(lane: str) -> tuple:
        gpu = GPU_LANE.match(lane)
        if gpu:
            return (0, _natural(gpu.group(1)), _natural(gpu.group(2)), lane)
        cpu = CPU_LANE.match(lane)
        if cpu:
            return (1, _natural(cpu.group(1)), int(cpu.group(2)), lane)
        return (2, lane, 0, lane)

    return sorted(set(lanes), key=key)


def _natural(text: str) -> tuple[int, str]:
    return (int(text), "") if text.lstrip("-").isdigit() else (1 << 62, text)


def merge_small_events(
    tl: pl.DataFrame, max_events: int = TIMELINE_MAX_EVENTS, pixels: int = TIMELINE_PIXELS
) -> pl.DataFrame:
    """Level of detail for drawing: when a timeline holds more than `max_events` events, events
    shorter than one of `pixels` screen columns are merged per lane and column into one block,
    named '<n> short events' and coloured by the family with the most time in it. Longer events
    are kept as they are. Same columns as diff.timeline plus `merged` (events in the block)."""
    if tl.height <= max_events:
        return tl.with_columns(pl.lit(1, dtype=pl.Int64).alias("merged"))
    span = max(float(tl["end_us"].max() or 0.0), 1e-9)
    width = span / pixels
    small = pl.col("dur_us") < width
    kept = tl.filter(~small).with_columns(pl.lit(1, dtype=pl.Int64).alias("merged"))
    merged = (
        tl.filter(small)
        .with_columns((pl.col("start_us") / width).floor().cast(pl.Int64).alias("_col"))
        .group_by("lane", "lane_kind", "_col")
        .agg(
            pl.col("start_us").min(),
            pl.col("end_us").max(),
            pl.col("dur_us").sum(),
            pl.col("family").sort_by("dur_us", descending=True, maintain_order=True).first(),
            pl.len().cast(pl.Int64).alias("merged"),
            pl.col("name").first().alias("_first"),
            pl.col("cat").first(),
            pl.col("id").first(),
        )
        .with_columns(
            pl.when(pl.col("merged") > 1)
            .then(pl.format("{} short events", pl.col("merged")))
            .otherwise(pl.col("_first"))
            .alias("name")
        )
        .sort("lane", "_col")  # a group_by's groups come in no fixed order
        .select(tl.columns + ["merged"])
    )
    return pl.concat([kept.select(tl.columns + ["merged"]), merged.cast(kept.select(tl.columns + ["merged"]).schema)])


def timeline_pair(
    a: pl.DataFrame, b: pl.DataFrame, label_a: str, label_b: str, max_events: int = TIMELINE_MAX_EVENTS
) -> go.Figure:
    """Two step timelines (diff.timeline frames) on one shared time axis in µs from each step's
    start: a row per lane (GPU streams, then CPU ops by nesting depth), bars coloured by kernel
    family, hover with name, category, start and duration. Drawn with WebGL; very busy steps are
    thinned by merge_small_events."""
    a, b = merge_small_events(a, max_events), merge_small_events(b, max_events)
    lanes_a, lanes_b = lane_order(a["lane"].to_list()), lane_order(b["lane"].to_list())
    rows_a, rows_b = max(len(lanes_a), 1), max(len(lanes_b), 1)
    height = int(min(max((rows_a + rows_b) * LANE_PX + 170, 360), TIMELINE_MAX_HEIGHT))
    lane_px = (height - 170) / (rows_a + rows_b)
    label_every = max(1, int(np.ceil(LABEL_PX / lane_px)))  # many threads: label every n-th lane, never overlapping
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=70 / height,
        row_heights=[rows_a / (rows_a + rows_b), rows_b / (rows_a + rows_b)],
        subplot_titles=(_timeline_title(label_a, a), _timeline_title(label_b, b)),
    )
    shown: set[str] = set()
    for row, (tl, lanes) in enumerate(((a, lanes_a), (b, lanes_b)), start=1):
        # First lane on top. Positions count down instead of reversing the axis: WebGL traces
        # render nothing on a reversed axis in the plotly.js that Streamlit ships.
        position = {lane: len(lanes) - 1 - i for i, lane in enumerate(lanes)}
        families = sorted(set(tl["family"].to_list()), key=_family_rank)
        for family in families:
            part = tl.filter(pl.col("family") == family)
            y = np.array([position[lane] for lane in part["lane"].to_list()], dtype=np.float64)
            start, end = part["start_us"].to_numpy().astype(np.float64), part["end_us"].to_numpy().astype(np.float64)
            n = part.height
            xs = np.empty(n * 3)
            ys = np.empty(n * 3)
            xs[0::3], xs[1::3], xs[2::3] = start, end, np.nan
            ys[0::3], ys[1::3], ys[2::3] = y, y, np.nan
            color = family_color(family)
            fig.add_trace(
                go.Scattergl(
                    x=xs,
                    y=ys,
                    mode="lines",
                    line={"color": color, "width": LANE_PX * 0.7},
                    name=family,
                    legendgroup=family,
                    showlegend=family not in shown,
                    hoverinfo="skip",
                ),
                row=row,
                col=1,
            )
            shown.add(family)
            # Hover data as numpy arrays, their strings already through plain(): plotly validates a
            # list of lists value by value (1-2 s for 12,000 events), an array at once; _literal
            # leaves arrays alone.
            shown_text = part.select(
                plain_expr(pl.col("name").str.slice(0, NAME_CHARS)).alias("name"),
                plain_expr(pl.col("lane")).alias("lane"),
            )
            names = shown_text["name"].to_numpy()
            custom = np.empty((n, 3), dtype=object)
            custom[:, 0], custom[:, 1], custom[:, 2] = (
                part["start_us"].round(3).to_numpy(),
                part["dur_us"].round(3).to_numpy(),
                shown_text["lane"].to_numpy(),
            )
            fig.add_trace(
                go.Scattergl(
                    x=(start + end) / 2,
                    y=y,
                    mode="markers",
                    marker={"color": color, "size": LANE_PX * 0.7, "opacity": 0},
                    name=family,
                    legendgroup=family,
                    showlegend=False,
                    text=names,
                    customdata=custom,
                    hovertemplate="<b>%{text}</b><br>"
                    + plain(family)
                    + " · %{customdata[2]}<br>start %{customdata[0]} µs · duration %{customdata[1]} µs<extra></extra>",
                ),
                row=row,
                col=1,
            )
        labelled = lanes[::label_every]
        fig.update_yaxes(
            tickmode="array",
            tickvals=[position[lane] for lane in labelled],
            ticktext=labelled,
            autorange=False,
            range=[-0.5, len(lanes) - 0.5],
            showgrid=False,
            zeroline=False,
            row=row,
            col=1,
        )
    fig.update_xaxes(title_text="µs since the start of the step", row=2, col=1)
    fig.update_xaxes(showgrid=True, gridcolor="#eee")
    fig.update_layout(hovermode="closest", dragmode="zoom")
    return _base_layout(fig, "", height=height)


def timeline_data(
    a: pl.DataFrame, b: pl.DataFrame, label_a: str, label_b: str, max_events: int = TIMELINE_MAX_EVENTS
) -> dict:
    """What the dashboard's canvas timeline (dashboard/views/timeline_chart.py) draws: the same two
    step timelines as timeline_pair, as plain lists. Per panel: its title, its lanes top to bottom,
    and its bars sorted by lane then start (so the browser finds the bar under the pointer by a
    binary search in the lane): start_us, dur_us (rounded to the ns), lane and family (indices),
    name (an index into the panel's names), merged (events in the bar: above `max_events` events,
    events narrower than a screen pixel are merged per lane, as in timeline_pair) and, where a
    panel has merged bars, busy (the summed duration of the bar's events, µs). Names
    are raw text: the browser writes them with textContent and fillText, never as markup."""
    a, b = merge_small_events(a, max_events), merge_small_events(b, max_events)
    families = sorted(set(a["family"].to_list()) | set(b["family"].to_list()), key=lambda f: (_family_rank(f), f))
    family_index = {family: i for i, family in enumerate(families)}
    panels = []
    for label, tl in ((label_a, a), (label_b, b)):
        lanes = lane_order(tl["lane"].to_list())
        names = sorted(set(tl["name"].to_list()))
        bars = tl.select(
            pl.col("lane")
            .replace_strict({lane: i for i, lane in enumerate(lanes)}, return_dtype=pl.Int64)
            .alias("lane"),
            pl.col("start_us").round(3).alias("start"),
            (pl.col("end_us") - pl.col("start_us")).clip(lower_bound=0).round(3).alias("dur"),
            pl.col("family").replace_strict(family_index, return_dtype=pl.Int64).alias("family"),
            pl.col("name").replace_strict({n: i for i, n in enumerate(names)}, return_dtype=pl.Int64).alias("name"),
            "merged",
            pl.col("dur_us").round(3).alias("busy"),
            "id",
        ).sort("lane", "start", "dur", "id", descending=[False, False, True, False])
        columns = ("start", "dur", "lane", "family", "name", "merged") + (
            ("busy",) if tl.height and int(tl["merged"].max()) > 1 else ()
        )
        panels.append(
            {
                "title": _timeline_title(label, tl),
                "lanes": lanes,
                "names": names,
                **{column: bars[column].to_list() for column in columns},
            }
        )
    end = max([float(tl["end_us"].max() or 0.0) for tl in (a, b) if tl.height] or [0.0])
    rows = sum(max(len(p["lanes"]), 1) for p in panels)
    return {
        "panels": panels,
        "families": [{"name": family, "color": family_color(family)} for family in families],
        "span": round(max(end, 1e-3), 3),
        "height": int(min(max(rows * LANE_PX + 110, 300), TIMELINE_MAX_HEIGHT)),
        "axis": "µs since the start of the step",
    }


def _timeline_title(label: str, tl: pl.DataFrame) -> str:
    merged = int(tl["merged"].sum()) if "merged" in tl.columns and tl.height else tl.height
    note = f", short events merged into {tl.height:,} blocks" if tl.height < merged else ""
    return f"{label}: {merged:,} events{note}"


def _format_count(value: float) -> str:
    """1575 -> '1,575'; 6.5 -> '6.5'."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def signed(value: float, digits: int) -> str:
    """A change with its sign at `digits` decimals, thousands separated: '+1,234.5', '-0.7'; one
    that rounds to zero reads '+0.0', never '-0.0'."""
    text = f"{value:+,.{digits}f}"
    return "+" + text[1:] if text.startswith("-") and not text.strip("-0.,") else text


def format_us(value: float | None) -> str:
    """µs as a short label: '16.6 ms' or '2.24 µs'; '' for a missing value."""
    if value is None or value != value:
        return ""
    if value >= 1000:
        return f"{value / 1000:.3g} ms"
    return f"{value:.3g} µs"


def memory_chart(peaks: pl.DataFrame, colors: Colors | None = None) -> go.Figure:
    """Peak memory allocated per step, one bar per run and step, in MB (10^6 bytes): a run's
    accelerators when it has memory events on one, else its CPU (a bar per device where a run has
    several); hover: the level the step started at, what
    it added, and the op whose allocation reached the peak. `peaks`: memory.memory_by_run (bytes;
    rows without a peak, from traces without Total Allocated, are left out). `colors`: run -> colour."""
    known = peaks.filter(pl.col("peak_allocated_bytes").is_not_null())
    # a run's accelerator when it has one (the CPU allocator's few bytes beside it would be noise)
    known = known.filter((pl.col("device_type") != 0) | ((pl.col("device_type") != 0).any().over("run")).not_())
    runs = list(dict.fromkeys(peaks["run"].to_list()))
    palette = dict(zip(runs, run_colors(runs, colors)))
    steps = sorted(set(known["step"].to_list()))
    labels = [f"step {s}" for s in steps]
    several = known.select(pl.struct("device_type", "device_id").n_unique()).item() > 1 if known.height else False
    fig = go.Figure()
    for (run, device), part in known.group_by("run", "device", maintain_order=True):
        by_step = {row["step"]: row for row in part.iter_rows(named=True)}
        rows = [by_step.get(s) for s in steps]
        mb = [None if r is None else r["peak_allocated_bytes"] / 1e6 for r in rows]
        fig.add_trace(
            go.Bar(
                name=f"{run} ({device})" if several else run,
                x=labels,
                y=mb,
                marker_color=palette.get(run),
                customdata=[
                    ("", "", "", "")
                    if r is None
                    else (
                        device,
                        (r["start_allocated_bytes"] or 0) / 1e6,
                        (r["added_bytes"] or 0) / 1e6,
                        r["peak_op"] or "no op",
                    )
                    for r in rows
                ],
                text=["" if v is None else f"{v:.3g}" for v in mb],
                textposition="outside",
                cliponaxis=False,
                hovertemplate=plain(run)
                + " on %{customdata[0]}, %{x}<br>peak %{y:.4g} MB allocated, at %{customdata[3]}"
                "<br>started at %{customdata[1]:.4g} MB, %{customdata[2]:+.4g} MB over the step<extra></extra>",
            )
        )
    fig.update_layout(barmode="group")
    fig.update_yaxes(title_text="peak allocated, MB", rangemode="tozero")
    return _base_layout(fig, "Peak memory allocated per step (profile_memory)")
