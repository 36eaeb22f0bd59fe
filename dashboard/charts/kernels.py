"""The work by kernel family: the Overview's stacked bars and the Kernels tab's grouped ones."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from dashboard.charts.facets import Modes, _flat, _flat_stacked
from dashboard.charts.style import Colors, _base_layout, _family_rank, family_color, plain, run_colors
from dashboard.engine.model.formatting import format_count, format_us


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
            text=[format_count(total.get(r, 0.0)) for r in runs],
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
            fmt=format_count if value == "count" else (lambda v: format_us(v)),
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
