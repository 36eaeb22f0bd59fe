"""The roofline: achieved TFLOP/s against arithmetic intensity, each device's roofs drawn."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import polars as pl

from dashboard.charts.facets import _flat
from dashboard.charts.style import NAME_CHARS, ROOF_COLORS, Colors, _base_layout, plain, run_colors
from dashboard.engine.model.formatting import bytes_words

MEASURE_SYMBOLS = {"attention ops": "circle", "whole step": "diamond"}
MEASURE_KEYS = {"attention ops": "attention op or kernel", "whole step": "whole step (collectors' traces)"}
OWN_BYTES = "bytes its own kernels move, from the recorded shapes"  # roofline.OWN_BYTES_WORDS


LABEL_CLUSTER = 0.04  # points closer than this in log10 on both axes (about 10%) share one label
LABEL_NAMES = 1  # run names a label lists before '+n more' (its hover lists them all)
LABEL_CHARS = 32  # a longer first name is cut there, with '…' (its hover has it whole)
LABEL_ROOM_PX = 190  # the right margin the labels of the rightmost points run into


def _cluster_labels(points: pl.DataFrame) -> list[tuple[float, float, str, list[str]]]:
    """(x, y, text, runs) of one label per cluster of roofline points that would overlap: the runs'
    names in their order, each once; the text the first LABEL_NAMES of them and '+n more'; at the
    cluster's rightmost point, so the text starts past the markers."""
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
        shown = [n if len(n) <= LABEL_CHARS else n[: LABEL_CHARS - 1] + "…" for n in names[:LABEL_NAMES]]
        out.append((x, y, ", ".join(shown) + more, names))
    return out


def roofline(points: pl.DataFrame, colors: Colors | None = None) -> go.Figure:
    """Achieved TFLOP/s against arithmetic intensity (FLOP per byte its own kernels move, from the
    recorded shapes: review.roofline_points), both axes logarithmic: one marker per run's attention
    op/kernel group (circles) or whole step (diamonds), coloured by run, and each device's roofline
    drawn once per peak (the flat compute roof at peak_tflops and the bandwidth slope intensity ×
    peak_tbps). Points without a peak (a CPU, a device the peaks table lacks) are drawn with no roof.

    The legend holds what a reader needs, whatever the number of runs: the roofs and what a circle
    and a diamond are; each cluster of overlapping points carries its runs' names beside it
    (_cluster_labels), two labels near each other set above and below (_label_places)."""
    fig = go.Figure()
    if points.height == 0:
        return _base_layout(fig, "Attention on the roofline: nothing measured")
    runs = list(dict.fromkeys(points["run"].to_list()))
    palette = dict(zip(runs, run_colors(runs, colors)))
    many = _flat(runs)
    roofs = (
        points.filter(pl.col("peak_tflops").is_not_null() & pl.col("peak_tbps").is_not_null())
        .select("device", "dtype", "peak_tflops", "peak_tbps")
        .unique(maintain_order=True)
    )
    xs = _roof_xs(points, roofs)
    _add_roofs(fig, roofs, xs)
    measures_drawn = _add_points(fig, points, runs, palette, many)
    if many:  # the runs named beside their points, one label per cluster of points that overlap; the shapes' key, once
        _add_cluster_labels(fig, points)
        _add_measure_keys(fig, measures_drawn)
    _roofline_axes(fig)
    if many:  # room for the labels of the rightmost points
        fig.update_layout(margin={"r": LABEL_ROOM_PX})
    return fig


def _roof_xs(points: pl.DataFrame, roofs: pl.DataFrame) -> np.ndarray:
    """The intensities the roofs are drawn at: from a quarter of the lowest point to four times the
    highest point or ridge, 200 of them evenly spaced in log."""
    low = float(points["intensity"].min())
    high = float(points["intensity"].max())
    for roof in roofs.iter_rows(named=True):
        high = max(high, roof["peak_tflops"] / roof["peak_tbps"])
    return np.geomspace(max(low / 4, 1e-3), high * 4, 200) if high > 0 else np.array([1.0, 10.0])


def _add_roofs(fig: go.Figure, roofs: pl.DataFrame, xs: np.ndarray) -> None:
    """Each device's roof, dashed: the flat compute roof and the bandwidth slope, with its ridge in the hover."""
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


def _point_hovers(part: pl.DataFrame, has_bytes: bool) -> list[list]:
    """A point's hover data: name, shape, backend, device, its share of the roof, count, mean µs,
    TB/s and the bytes its own kernels move (customdata[0] to [8])."""
    return [
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
            bytes_words(r["bytes"] if has_bytes else None),
        ]
        for r in part.iter_rows(named=True)
    ]


def _add_points(
    fig: go.Figure, points: pl.DataFrame, runs: list[str], palette: dict[str, str], many: bool
) -> list[str]:
    """One marker trace per run and measure (a circle per attention op, a diamond per whole step),
    in the legend when the runs are few; returns the measures drawn, in the order first drawn."""
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
            fig.add_trace(
                go.Scatter(
                    x=part["intensity"].to_list(),
                    y=part["tflops"].to_list(),
                    mode="markers",
                    name=f"{run} ({measure})",
                    legendgroup=run,
                    showlegend=not many,
                    marker={"color": palette[run], "symbol": symbol, "size": 12, "line": {"color": "#222", "width": 1}},
                    customdata=_point_hovers(part, has_bytes),
                    hovertemplate=f"<b>{plain(run)}</b> · {plain(measure)}<br>"
                    + "%{customdata[0]}<br>%{customdata[1]} · backend %{customdata[2]}<br>"
                    f"%{{customdata[8]}} a {per}: the {OWN_BYTES}<br>"
                    "%{customdata[3]}: %{y:.4g} TFLOP/s, %{customdata[7]:.3g} TB/s at %{x:.4g} FLOP/byte<br>%{customdata[4]}<br>"
                    "%{customdata[5]} × %{customdata[6]:.4g} µs<extra></extra>",
                )
            )
    return measures_drawn


LABEL_NEAR = (0.5, 0.12)  # labels closer than this in log10 (x, y) would overlap: one goes above, one below


def _label_places(labels: list[tuple[float, float, str, list[str]]]) -> list[str]:
    """Each label's textposition, always right of its point: the roof never falls as the intensity
    grows, so text running right from a point under it stays under it (text running left would
    cross the bandwidth slope). Of two labels closer than LABEL_NEAR, the lower one goes below its
    point and the higher one above, so the two never overlap."""
    rows = ["middle"] * len(labels)
    order = sorted(range(len(labels)), key=lambda i: labels[i][1])
    for lower, upper in zip(order, order[1:]):
        (x1, y1, *_), (x2, y2, *_) = labels[lower], labels[upper]
        if abs(np.log10(x1) - np.log10(x2)) < LABEL_NEAR[0] and abs(np.log10(y1) - np.log10(y2)) < LABEL_NEAR[1]:
            rows[lower] = "bottom" if rows[lower] == "middle" else rows[lower]
            rows[upper] = "top"
    return [f"{row} right" for row in rows]


def _add_cluster_labels(fig: go.Figure, points: pl.DataFrame) -> None:
    """The runs' names beside their points, one label per cluster of points that overlap (its
    hover names every run in it), two labels near each other set above and below (_label_places);
    the rightmost run into the plot's right margin (roofline() widens it)."""
    labels = _cluster_labels(points)
    for (x, y, label, names), place in zip(labels, _label_places(labels)):
        fig.add_trace(
            go.Scatter(
                x=[x * 1.15],
                y=[y],
                mode="text",
                text=[label],
                showlegend=False,
                textposition=place,
                cliponaxis=False,
                hovertemplate="<br>".join(plain(n) for n in names) + "<extra></extra>",
                textfont={"size": 10, "color": "#444"},
                name=label,
            )
        )


def _add_measure_keys(fig: go.Figure, measures_drawn: list[str]) -> None:
    """The legend's key to the shapes (what a circle and a diamond are), once each, in grey."""
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


def _roofline_axes(fig: go.Figure) -> None:
    """Both axes logarithmic, labelled at powers of ten only (plotly's default log ticks label 2
    and 5 of each decade: "1000, 5, 2, 100"); the legend under the plot."""
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


def _dtype_word(dtype: str | None) -> str:
    """'c10::BFloat16' -> 'bf16' (the peaks table's word) for a legend; the name itself when unknown."""
    from dashboard.engine.analyses.efficiency import DTYPES

    return DTYPES.get(dtype or "", (dtype or "",))[0]
