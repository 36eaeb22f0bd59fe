"""Plotly figures of the article's measurements (dashboard.engine.analyses.article frames in, figures out):
time, TFLOP/s and peak memory against sequence length, log-log, one line per variant with the
crossover points and out-of-memory points marked; the end-to-end gain beside Amdahl's prediction.
No streamlit here."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from dashboard.charts import RUN_COLORS
from dashboard.engine.analyses import article as art

MEASURED_COLOR = "#4c78a8"
PREDICTED_COLOR = "#b0b0b0"
OOM_COLOR = "#d62728"
LINE_HEIGHT = 420


def variant_colors(variants: list[str]) -> dict[str, str]:
    """One colour per variant, stable across the charts of one folder (naive always the first)."""
    ordered = sorted(set(variants), key=lambda v: (v != art.BASELINE, variants.index(v)))
    return {v: RUN_COLORS[i % len(RUN_COLORS)] for i, v in enumerate(ordered)}


def _layout(fig: go.Figure, title: str, y_title: str, height: int = LINE_HEIGHT) -> go.Figure:
    fig.update_layout(
        title=dict(text=title, x=0, xanchor="left"),
        height=height,
        margin=dict(l=70, r=110, t=50, b=90),
        legend=dict(orientation="h", yanchor="top", y=-0.18, xanchor="left", x=0),
        hovermode="closest",
    )
    fig.update_xaxes(type="log", title_text="sequence length (tokens)", dtick=0.30102999566, tickformat="d")
    # labels at powers of ten only (plotly's default labels 2 and 5 between them read "100, 2, 5, 1000")
    fig.update_yaxes(
        type="log", title_text=y_title, dtick=1, tickformat="~s", minor=dict(ticks="inside", showgrid=True)
    )
    return fig


def _lines(points: pl.DataFrame, y: str, colors: dict[str, str], hover: str) -> list[go.Scatter]:
    traces = []
    for variant in list(dict.fromkeys(points["variant"].to_list())):
        part = points.filter(pl.col("variant") == variant).sort("seq")
        last = part.height - 1
        traces.append(
            go.Scatter(
                x=part["seq"].to_list(),
                y=part[y].to_list(),
                mode="lines+markers+text",
                name=variant,
                text=[variant if i == last else "" for i in range(part.height)],
                textposition="middle right",
                textfont=dict(color=colors.get(variant), size=11),
                cliponaxis=False,
                line=dict(color=colors.get(variant), width=3 if variant == art.BASELINE else 2),
                customdata=part.select("backend_ran").to_series().to_list(),
                hovertemplate=f"<b>{variant}</b><br>seq %{{x}}<br>{hover}<br>backend %{{customdata}}<extra></extra>",
            )
        )
    return traces


def time_vs_seq(sweep: pl.DataFrame, colors: dict[str, str], title: str) -> go.Figure:
    """Median time per forward (ms) against seq, log-log; each variant's crossover with naive is
    a star at the first seq from which it stays faster (see article.crossovers)."""
    ok = sweep.filter(pl.col("status") == art.STATUS_OK)
    fig = go.Figure(_lines(ok, "time_ms", colors, "%{y:.3g} ms per forward"))
    cross = art.crossovers(sweep).filter(pl.col("faster_from_seq").is_not_null(), pl.col("crossover_seq").is_not_null())
    if cross.height:
        at = cross.join(
            ok.select("variant", pl.col("seq").alias("faster_from_seq"), "time_ms"),
            on=["variant", "faster_from_seq"],
            how="inner",
        )
        fig.add_trace(
            go.Scatter(
                x=at["faster_from_seq"].to_list(),
                y=at["time_ms"].to_list(),
                mode="markers",
                name="overtakes naive",
                marker=dict(symbol="star", size=14, color="#2ca02c", line=dict(color="#222", width=1)),
                customdata=list(zip(at["variant"].to_list(), at["crossover_seq"].to_list())),
                hovertemplate="<b>%{customdata[0]}</b> overtakes naive at seq ~%{customdata[1]:.0f}<extra></extra>",
            )
        )
    return _layout(fig, title, "time per forward (ms, median)")


def tflops_vs_seq(sweep: pl.DataFrame, colors: dict[str, str], title: str, peak_tflops: float | None) -> go.Figure:
    """Achieved TFLOP/s (the sweep's FLOP convention) against seq, with the device's dense peak as
    a dashed line when it is known."""
    ok = sweep.filter(pl.col("status") == art.STATUS_OK, pl.col("tflops") > 0)
    fig = go.Figure(_lines(ok, "tflops", colors, "%{y:.3g} TFLOP/s"))
    if peak_tflops:
        fig.add_hline(
            y=peak_tflops,
            line=dict(color="#222", dash="dash"),
            annotation_text=f"device peak {peak_tflops:g} TFLOP/s",
            annotation_position="bottom right",
        )
    fig = _layout(fig, title, "achieved TFLOP/s")
    # plain decimals: SI prefixes read 0.1 TFLOP/s as "100m"
    return fig.update_yaxes(tickformat="~g")


def memory_vs_seq(sweep: pl.DataFrame, colors: dict[str, str], title: str) -> go.Figure:
    """Peak memory the call added per sequence of the batch (bytes / batch, log) against seq: the
    sweep keeps tokens constant, so the batch shrinks as seq grows; per sequence, naive's scores
    grow as S^2 and the fused paths' memory as S. Out-of-memory points are red crosses drawn above
    the highest measured point."""
    ok = sweep.filter(pl.col("status") == art.STATUS_OK, pl.col("peak_mem_bytes") > 0).with_columns(
        (pl.col("peak_mem_bytes") / pl.col("batch")).alias("peak_per_sequence")
    )
    fig = go.Figure(_lines(ok, "peak_per_sequence", colors, "%{y:.3s}B peak added per sequence"))
    oom = sweep.filter(pl.col("status") == "oom")
    if oom.height:
        top = (ok["peak_per_sequence"].max() or 1) * 2
        fig.add_trace(
            go.Scatter(
                x=oom["seq"].to_list(),
                y=[top] * oom.height,
                mode="markers+text",
                name="out of memory",
                marker=dict(symbol="x", size=13, color=OOM_COLOR),
                text=oom["variant"].to_list(),
                textposition="top center",
                customdata=oom["reason"].fill_null("").to_list(),
                hovertemplate="out of memory at seq %{x}<br>%{customdata}<extra></extra>",
            )
        )
    return _layout(fig, title, "peak memory added per sequence (bytes)")


def e2e_bars(e2e: pl.DataFrame) -> go.Figure:
    """Per phase (prefill, decode): each variant's measured end-to-end speedup against naive beside
    the Amdahl prediction from attention's share of naive's step; horizontal bars."""
    frame = e2e
    if "status" in frame.columns:
        frame = frame.filter(pl.col("status").fill_null(art.STATUS_OK) == art.STATUS_OK)
    frame = frame.filter(pl.col("variant") != art.BASELINE, pl.col("speedup_vs_naive").is_not_null())
    phases = [p for p in ("prefill", "decode") if p in frame["phase"].to_list()] or sorted(set(frame["phase"]))
    fig = make_subplots(
        rows=1, cols=max(len(phases), 1), subplot_titles=[f"{p}" for p in phases], horizontal_spacing=0.12
    )
    for col, phase in enumerate(phases, start=1):
        part = frame.filter(pl.col("phase") == phase).sort("speedup_vs_naive")
        names = part["variant"].to_list()
        for column, label, color in (
            ("amdahl_predicted_speedup", "Amdahl prediction", PREDICTED_COLOR),
            ("speedup_vs_naive", "measured", MEASURED_COLOR),
        ):
            fig.add_trace(
                go.Bar(
                    y=names,
                    x=part[column].to_list(),
                    orientation="h",
                    name=label,
                    marker_color=color,
                    showlegend=col == 1,
                    legendgroup=label,
                    text=[f"{v:.2f}x" for v in part[column].to_list()],
                    textposition="outside",
                    cliponaxis=False,
                    hovertemplate=f"%{{y}} ({phase})<br>{label}: %{{x:.3f}}x<extra></extra>",
                ),
                row=1,
                col=col,
            )
        fig.add_vline(x=1.0, line=dict(color="#222", dash="dot"), row=1, col=col)
        fig.update_xaxes(title_text="speedup against naive (x)", row=1, col=col)
    height = 160 + 48 * max((frame.filter(pl.col("phase") == p).height for p in phases), default=1)
    fig.update_layout(
        barmode="group",
        height=height,
        margin=dict(l=110, r=40, t=50, b=60),
        title=dict(text="End to end: measured gain and Amdahl's prediction", x=0, xanchor="left"),
        legend=dict(orientation="h", yanchor="bottom", y=1.08, xanchor="right", x=1),
    )
    return fig
