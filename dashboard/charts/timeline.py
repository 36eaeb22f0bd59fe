"""The Timeline tab's figures: two steps' timelines (plotly's, and the canvas' data) and their time by family."""

from __future__ import annotations

import re

import numpy as np
import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from dashboard.charts.style import (
    NAME_CHARS,
    _base_layout,
    _family_rank,
    family_color,
    plain,
    plain_expr,
)

# Above this many events in one timeline, events narrower than a screen pixel are merged per lane.
TIMELINE_MAX_EVENTS = 20_000
TIMELINE_PIXELS = 2_000
LANE_PX = 18
LABEL_PX = 14  # the least height a lane label needs; denser lanes show every n-th label
TIMELINE_MAX_HEIGHT = 4000
CPU_LANE = re.compile(r"^CPU (\S+) depth (\d+)$")
GPU_LANE = re.compile(r"^GPU (\S+) stream (\S+)$")


STEP_INK = "#3a3a3a"  # no family's colour (style.FAMILY_COLORS)
STEP_A_MARKER = {"color": STEP_INK, "line": {"color": STEP_INK, "width": 1}}
STEP_B_MARKER = {
    "color": "#ffffff",
    "line": {"color": STEP_INK, "width": 1.5},
    "pattern": {"shape": "/", "fgcolor": STEP_INK},
}


def family_diff_bars(diff: pl.DataFrame, label_a: str, label_b: str) -> go.Figure:
    """Time by kernel family in the two compared steps. `diff`: diff.family_time_diff (ns). The
    families are the x axis; the two steps are told apart by ink, never by a colour a family has
    (the timeline above colours its blocks by family): A solid dark grey, B hatched on white."""
    ordered = diff.sort(pl.col("family").map_elements(_family_rank, return_dtype=pl.Int64))
    families = ordered["family"].to_list()
    fig = go.Figure()
    for side, label, marker in (("a", label_a, STEP_A_MARKER), ("b", label_b, STEP_B_MARKER)):
        fig.add_trace(
            go.Bar(
                name=label,
                x=families,
                y=[v / 1000.0 for v in ordered[f"{side}_ns"].to_list()],
                marker=marker,
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
        for family in sorted(set(tl["family"].to_list()), key=_family_rank):
            _add_family_bars(fig, row, tl.filter(pl.col("family") == family), family, position, shown)
            shown.add(family)
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


def _add_family_bars(
    fig: go.Figure, row: int, part: pl.DataFrame, family: str, position: dict[str, int], shown: set[str]
) -> None:
    """One family's events in one panel: the bars as one WebGL line trace (start to end, NaN
    between), in the legend the first time the family is drawn, and an invisible marker at each
    bar's middle that carries its hover."""
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
    names, custom = _bar_hovers(part)
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


def _bar_hovers(part: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The bars' hover data as numpy arrays, their strings already through plain(): plotly
    validates a list of lists value by value (1-2 s for 12,000 events), an array at once; _literal
    leaves arrays alone. The names (cut at NAME_CHARS), and per bar its start, duration and lane."""
    shown_text = part.select(
        plain_expr(pl.col("name").str.slice(0, NAME_CHARS)).alias("name"),
        plain_expr(pl.col("lane")).alias("lane"),
    )
    custom = np.empty((part.height, 3), dtype=object)
    custom[:, 0], custom[:, 1], custom[:, 2] = (
        part["start_us"].round(3).to_numpy(),
        part["dur_us"].round(3).to_numpy(),
        shown_text["lane"].to_numpy(),
    )
    return shown_text["name"].to_numpy(), custom


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
