"""The Copies tab's figure: copy time per step by copy class."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from dashboard.charts.facets import Modes, _flat, _flat_stacked
from dashboard.charts.style import COPY_CLASS_COLORS, FAMILY_COLORS, _base_layout, plain
from dashboard.engine.model.formatting import format_us


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
