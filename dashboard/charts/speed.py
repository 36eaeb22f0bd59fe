"""The Speedups tab's (and the Overview's) figures: time per step, speedup, throughput and cost."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from dashboard.charts.facets import Modes, _facet_figure, _facets, _flat_layout
from dashboard.charts.style import (
    BASELINE_COLOR,
    FASTER_COLOR,
    FLAT_COLOR,
    NO_BAR_COLOR,
    SLOWER_COLOR,
    plain,
)
from dashboard.engine.compare.fingerprint import CROSS_DEVICE
from dashboard.engine.compare.speed import NO_SPEEDUP
from dashboard.engine.model.formatting import format_us, format_usd


def step_time_bars(
    speed: pl.DataFrame,
    log: bool = False,
    title: str = "",
    modes: Modes | None = None,
    baseline: str | None = None,
) -> go.Figure:
    """Median time per step with its p10-p90 spread as whiskers, one flat bar per run whatever
    their number, fastest first, faceted by `modes`, the `baseline` hatched and named; each bar's
    value written past its whisker. `speed`: speed.speed_table. `log`: logarithmic time axis."""
    other = _other_work(speed)
    if other:
        title = (title or "Median time per step, with spread") + f" ({OTHER_WORK_KEY})"
    return _flat_step_time(speed, log, title, modes, baseline)


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
    tops = [max(r["median_us"], r["p90_us"]) if r["p90_us"] == r["p90_us"] else r["median_us"] for r in rows.values()]
    tops = [t for t in tops if t is not None and t == t]
    if tops and not log:  # room for the value and '· baseline' past the longest whisker
        fig.update_xaxes(range=[0, max(tops) * 1.45 or 1.0])
    return _flat_layout(
        fig,
        title or "Median time per step, with spread (fastest first)",
        "µs per step (median; whiskers: p10 to p90)",
        len(rows),
        len(facets),
    )


def speedup_bars(speed: pl.DataFrame, baseline: str, log: bool = False, modes: Modes | None = None) -> go.Figure:
    """Speedup against the baseline (> 1 is faster), flat bars with a dashed line at 1; the
    baseline's own bar is labelled 'baseline'. `speed`: the rows of one device group of
    speed.speed_table; `log`: logarithmic speedup axis."""
    runs = speed["run"].to_list()
    values = speed["speedup"].to_list()
    related = speed["relation"].to_list() if "relation" in speed.columns else [None] * len(runs)
    colors = [
        BASELINE_COLOR if r == baseline else (FASTER_COLOR if (v or 0) >= 1 else SLOWER_COLOR)
        for r, v in zip(runs, values)
    ]
    text = _speedup_text(runs, values, related, baseline)
    return _flat_speedup(runs, values, text, colors, baseline, log, modes)


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
        f"Speedup against {baseline}",  # short: the chart has half the page (the words on 1 are on its axis)
        "speedup (baseline time / run time; right of 1 = faster)",
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


OTHER_WORK = "other work"  # a step-time bar of a run that does other work than its baseline
OTHER_WORK_KEY = "hatched ×: other work"  # the step-time chart's title, when it has such bars


def _other_work(speed: pl.DataFrame) -> set[str]:
    """The runs of a speed.speed_table that do other work than their baseline (no speedup)."""
    if "relation" not in speed.columns:
        return set()
    return set(speed.filter(pl.col("relation") == NO_SPEEDUP)["run"].to_list())


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


COST_TOKENS = 1e9  # cost is shown per billion tokens: per million, a GPU's cost reads "$0.0000723"
COST_UNIT = "$ per billion tokens"


def throughput_bars(speed: pl.DataFrame, modes: Modes | None = None) -> go.Figure:
    """Tokens per second (left) and dollars per billion tokens (right: COST_UNIT, from the frame's
    usd_per_mtok), runs with tokens only, flat bars whatever their number, highest throughput
    first, faceted by `modes`."""
    known = speed.filter(pl.col("tokens_per_s").is_not_null())
    priced = known["usd_per_mtok"].is_not_null().any()
    titles = ("tokens / s (higher is better)", f"{COST_UNIT} (lower is better)")
    return _flat_throughput(known, priced, titles, modes)


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
            cost = [_per_cost_unit(rows[r]["usd_per_mtok"]) for r in members]
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
                    hovertemplate="%{y}: $%{x:.4g} per billion tokens<extra></extra>",
                ),
                row=row,
                col=2,
            )
    fig.update_xaxes(tickformat=".3~s", col=1)
    if priced:
        fig.update_xaxes(tickprefix="$", tickformat=".3~r", col=2)
        top = max((_per_cost_unit(v) for v in known["usd_per_mtok"].to_list() if v is not None), default=1.0)
        fig.update_xaxes(range=[0, top * 1.3], col=2)
    top = max(known["tokens_per_s"].to_list(), default=1.0)
    fig.update_xaxes(range=[0, top * 1.3], col=1)
    _flat_layout(fig, "Throughput and cost", "", len(rows), len(facets))
    return fig


def _per_cost_unit(usd_per_mtok: float | None) -> float | None:
    """$ per million tokens -> $ per COST_TOKENS tokens."""
    return None if usd_per_mtok is None else usd_per_mtok * COST_TOKENS / 1e6
