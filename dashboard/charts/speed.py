"""The Speedups tab's (and the Overview's) figures: time per step, speedup, throughput and cost."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from dashboard.charts.facets import Modes, _cell, _facet_layout, _facets, _flat_figure, _value_axes
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
    layout = _facet_layout(facets)
    data: list[dict] = []
    for row, (_, members) in enumerate(facets, start=1):
        median = [rows[r]["median_us"] for r in members]
        p10 = [rows[r]["p10_us"] for r in members]
        p90 = [rows[r]["p90_us"] for r in members]
        data.append(
            {
                "type": "bar",
                "y": members,
                "x": median,
                "orientation": "h",
                "showlegend": False,
                "marker": {
                    "color": [BASELINE_COLOR if r == baseline else FLAT_COLOR for r in members],
                    "pattern": {"shape": ["/" if r == baseline else "x" if r in other else "" for r in members]},
                },
                "error_x": {
                    "type": "data",
                    "symmetric": False,
                    "array": [(b - m) if b == b and m == m else 0 for m, b in zip(median, p90)],
                    "arrayminus": [(m - a) if a == a and m == m else 0 for m, a in zip(median, p10)],
                    "color": "#444",
                },
                "customdata": [[a, b, rows[r]["time_source"]] for r, a, b in zip(members, p10, p90)],
                "hovertemplate": "%{y}<br>median %{x:.4g} µs<br>p10 %{customdata[0]:.4g} µs, p90 %{customdata[1]:.4g} µs<br>%{customdata[2]}<extra></extra>",
                **_cell(row, 1, 1),
            }
        )
        data.append(
            {
                "type": "scatter",
                "y": members,
                "x": [max(m, b) if b == b else m for m, b in zip(median, p90)],
                "mode": "text",
                "cliponaxis": False,
                "text": [
                    " " + format_us(m) + (" · baseline" if r == baseline else f" · {OTHER_WORK}" if r in other else "")
                    for r, m in zip(members, median)
                ],
                "textposition": "middle right",
                "showlegend": False,
                "hoverinfo": "skip",
                **_cell(row, 1, 1),
            }
        )
    tops = [max(r["median_us"], r["p90_us"]) if r["p90_us"] == r["p90_us"] else r["median_us"] for r in rows.values()]
    tops = [t for t in tops if t is not None and t == t]
    for ax in _value_axes(layout):
        ax.update(type="log" if log else "linear", rangemode="normal" if log else "tozero")
        if tops and not log:  # room for the value and '· baseline' past the longest whisker
            ax["range"] = [0, max(tops) * 1.45 or 1.0]
    return _flat_figure(
        data,
        layout,
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
    layout = _facet_layout(facets)
    data: list[dict] = []
    shapes: list[dict] = []
    for row, (_, members) in enumerate(facets, start=1):
        cell = _cell(row, 1, 1)
        data.append(
            {
                "type": "bar",
                "y": members,
                "x": [by[r][0] for r in members],
                "orientation": "h",
                "marker": {
                    "color": [by[r][2] for r in members],
                    "pattern": {"shape": ["/" if r == baseline else "" for r in members]},
                },
                "text": [by[r][1] for r in members],
                "textposition": "outside",
                "cliponaxis": False,
                "showlegend": False,
                "hovertemplate": "%{y}: %{x:.3g}× the baseline's speed<extra></extra>",
                **cell,
            }
        )
        shapes.append(  # the dashed line at 1, the height of the facet
            {
                "type": "line",
                "x0": 1.0,
                "x1": 1.0,
                "xref": cell["xaxis"],
                "y0": 0,
                "y1": 1,
                "yref": cell["yaxis"] + " domain",
                "line": {"color": "#444", "dash": "dash"},
            }
        )
        for run in members:
            value, words, _ = by[run]
            if run != baseline and (value is None or value != value or value <= 0):  # no bar: its slot says why
                layout["annotations"].append(  # (its words made plain with the facet titles)
                    {
                        "x": 0,
                        "y": plain(run),
                        "text": words,
                        "showarrow": False,
                        "xanchor": "left",
                        "font": {"size": 12, "color": NO_BAR_COLOR},
                        "xref": cell["xaxis"],
                        "yref": cell["yaxis"],
                    }
                )
    layout["shapes"] = shapes
    top = max((v for v in values if v is not None and v == v), default=1.0)
    for ax in _value_axes(layout):
        ax.update(type="log" if log else "linear", rangemode="normal" if log else "tozero")
        if not log:  # room for the labels beside the longest bar
            ax["range"] = [0, top * 1.35]
    return _flat_figure(
        data,
        layout,
        f"Speedup against {baseline}",  # short: the chart has half the page (the words on 1 are on its axis)
        "speedup (baseline time / run time; right of 1 = faster)",
        len(runs),
        len(facets),
    )


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
    layout = _facet_layout(facets, columns)
    data: list[dict] = []
    for row, (_, members) in enumerate(facets, start=1):
        tps = [rows[r]["tokens_per_s"] for r in members]
        data.append(
            {
                "type": "bar",
                "y": members,
                "x": tps,
                "orientation": "h",
                "marker": {"color": FLAT_COLOR},
                "showlegend": False,
                "text": [f"{v / 1e6:,.3g} M" if v >= 1e6 else f"{v:,.0f}" for v in tps],
                "textposition": "outside",
                "cliponaxis": False,
                "hovertemplate": "%{y}: %{x:,.0f} tokens/s<extra></extra>",
                **_cell(row, 1, len(columns)),
            }
        )
        if priced:
            cost = [_per_cost_unit(rows[r]["usd_per_mtok"]) for r in members]
            data.append(
                {
                    "type": "bar",
                    "y": members,
                    "x": cost,
                    "orientation": "h",
                    "marker": {"color": "#b279a2"},
                    "showlegend": False,
                    "text": [format_usd(v) for v in cost],
                    "textposition": "outside",
                    "cliponaxis": False,
                    "hovertemplate": "%{y}: $%{x:.4g} per billion tokens<extra></extra>",
                    **_cell(row, 2, len(columns)),
                }
            )
    top = max(known["tokens_per_s"].to_list(), default=1.0)
    for ax in _value_axes(layout, len(columns), 1):
        ax.update(tickformat=".3~s", range=[0, top * 1.3])
    if priced:
        top = max((_per_cost_unit(v) for v in known["usd_per_mtok"].to_list() if v is not None), default=1.0)
        for ax in _value_axes(layout, len(columns), 2):
            ax.update(tickprefix="$", tickformat=".3~r", range=[0, top * 1.3])
    return _flat_figure(data, layout, "Throughput and cost", "", len(rows), len(facets))


def _per_cost_unit(usd_per_mtok: float | None) -> float | None:
    """$ per million tokens -> $ per COST_TOKENS tokens."""
    return None if usd_per_mtok is None else usd_per_mtok * COST_TOKENS / 1e6
