"""The work by kernel family: the Overview's stacked bars and the Kernels tab's grouped ones."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from dashboard.charts.facets import Modes, _flat_stacked
from dashboard.charts.style import _family_rank, family_color
from dashboard.engine.model.formatting import format_count, format_us


def work_by_family_stacked(families: pl.DataFrame, runs: list[str], unit: str, modes: Modes | None = None) -> go.Figure:
    """Device work per step, one stacked bar per run, coloured by kernel family.
    `families`: run, family, count_per_step (review.families). `unit` names what was counted.
    Flat bars whatever the number of runs, sorted by total, faceted by `modes` (run -> mode)."""
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


def family_grouped(families: pl.DataFrame, runs: list[str], value: str, modes: Modes | None = None) -> go.Figure:
    """The Kernels tab's charts: one flat bar per run stacked by family (family colours), faceted
    by `modes`. value: 'count' (count_per_step) or 'time' (us_per_step). Both charts sort the runs
    by time per step (most first), so a run sits on the same row in the two."""
    column, axis, title = (
        ("count_per_step", "count per step", "Count per step by kernel family")
        if value == "count"
        else ("us_per_step", "µs per step", "Time per step by kernel family (µs)")
    )
    present = sorted(set(families["family"].to_list()), key=_family_rank)
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
        order_by="us_per_step" if "us_per_step" in families.columns else None,
    )
