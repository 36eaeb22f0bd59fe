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


END_LABEL_PX = 14  # the vertical room one end label needs
PLOT_PX = LINE_HEIGHT - 50 - 110  # the plot area's height: the figure less its top and bottom margins
STACKED = 0.15  # stars closer than this in log10 of y at one seq are drawn as one (a star is ~14 px)


def log_ticks(values: list[float]) -> tuple[list[float], list[float]]:
    """Tick values for a log axis over `values` (all > 0) and its range in log10: powers of ten
    when the data span two decades or more, else 1-2-5 of each decade (one decade or less gets a
    single power-of-ten label otherwise), so at least two ticks fall inside the data."""
    import math

    good = [v for v in values if v is not None and v == v and v > 0]
    if not good:
        return [], []
    low, high = math.log10(min(good)), math.log10(max(good))
    pad = max((high - low) * 0.08, 0.04)
    lo, hi = low - pad, high + pad
    steps = (1,) if high - low >= 2 else (1, 2, 5)
    ticks = [m * 10.0**k for k in range(math.floor(lo), math.ceil(hi) + 1) for m in steps]
    ticks = [t for t in ticks if lo <= math.log10(t) <= hi]
    if len(ticks) < 3:  # a narrow span: 1, 1.5, 2, 3, 4, 5, 7 of each decade
        fine = (1, 1.5, 2, 3, 4, 5, 7)
        ticks = [m * 10.0**k for k in range(math.floor(lo), math.ceil(hi) + 1) for m in fine]
        ticks = [t for t in ticks if lo <= math.log10(t) <= hi]
    return ticks, [lo, hi]


def _layout(fig: go.Figure, title: str, y_title: str, values: list[float], height: int = LINE_HEIGHT) -> go.Figure:
    fig.update_layout(
        title=dict(text=title, x=0, xanchor="left"),
        height=height,
        margin=dict(l=80, r=110, t=50, b=110),
        legend=dict(orientation="h", yanchor="top", y=-0.26, xanchor="left", x=0),
        hovermode="closest",
    )
    fig.update_xaxes(
        type="log", title_text="sequence length (tokens)", title_standoff=6, dtick=0.30102999566, tickformat="d"
    )
    # tick values that span the data (plotly's dtick=1 labels one power of ten on a curve within a decade)
    ticks, span = log_ticks(values)
    fig.update_yaxes(
        type="log",
        title_text=y_title,
        automargin=True,
        tickvals=ticks or None,
        range=span or None,
        tickformat="~s",
        showgrid=True,
    )
    _x_range(fig)
    _end_labels(fig, span)
    return fig


def _x_range(fig: go.Figure) -> None:
    """The seq axis over the data alone (the end labels sit in the right margin; left to plotly,
    the range grew to an empty 2048)."""
    import math

    seqs = [x for t in fig.data if t.x for x in t.x if x]
    if seqs:
        fig.update_xaxes(range=[math.log10(min(seqs)) - 0.08, math.log10(max(seqs)) + 0.08])


def _end_labels(fig: go.Figure, span: list[float]) -> None:
    """Each line's name at its last point, as annotations moved apart vertically (in log10 of y)
    so that no two overlap; the lines' own text stays empty."""
    import math

    ends = []
    for trace in fig.data:
        if getattr(trace, "meta", None) != "line" or not trace.x:
            continue
        ends.append([math.log10(trace.y[-1]), trace.x[-1], trace.name, trace.line.color])
    if not ends or not span:
        return
    gap = (span[1] - span[0]) * END_LABEL_PX / PLOT_PX
    ends.sort(key=lambda e: e[0])
    for i in range(1, len(ends)):
        ends[i][0] = max(ends[i][0], ends[i - 1][0] + gap)
    over = ends[-1][0] - span[1]
    if over > 0:  # pushed past the top: the top label at the top, the ones below it kept a gap under it
        ends[-1][0] = span[1]
        for i in range(len(ends) - 2, -1, -1):
            ends[i][0] = min(ends[i][0], ends[i + 1][0] - gap)
    for y, x, name, color in ends:
        fig.add_annotation(
            x=math.log10(x), y=y, text=name, showarrow=False, xanchor="left", xshift=8, font=dict(color=color, size=11)
        )


def _lines(points: pl.DataFrame, y: str, colors: dict[str, str], hover: str) -> list[go.Scatter]:
    traces = []
    for variant in list(dict.fromkeys(points["variant"].to_list())):
        part = points.filter(pl.col("variant") == variant).sort("seq")
        traces.append(
            go.Scatter(
                x=part["seq"].to_list(),
                y=part[y].to_list(),
                mode="lines+markers",
                name=variant,
                meta="line",
                cliponaxis=False,
                line=dict(color=colors.get(variant), width=3 if variant == art.BASELINE else 2),
                customdata=part.select("backend_ran").to_series().to_list(),
                hovertemplate=f"<b>{variant}</b><br>seq %{{x}}<br>{hover}<br>backend %{{customdata}}<extra></extra>",
            )
        )
    return traces


def _merged_stars(at: pl.DataFrame) -> list[tuple[int, float, str, str]]:
    """One star per seq for the variants that overtake naive there at about the same time (closer
    than STACKED in log10): (seq, the lowest of their times, their names, the crossover seqs)."""
    import math

    stars: list[list] = []
    for variant, seq, cross, time in (
        at.sort("faster_from_seq", "time_ms")
        .select("variant", "faster_from_seq", "crossover_seq", "time_ms")
        .iter_rows()
    ):
        for star in stars:
            if star[0] == seq and abs(math.log10(star[1]) - math.log10(time)) < STACKED:
                star[2].append(variant)
                star[3].append(f"~{cross:.0f}")
                break
        else:
            stars.append([seq, time, [variant], [f"~{cross:.0f}"]])
    return [(s, t, ", ".join(v), ", ".join(c)) for s, t, v, c in stars]


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
        stars = _merged_stars(at)
        fig.add_trace(
            go.Scatter(
                x=[s[0] for s in stars],
                y=[s[1] for s in stars],
                mode="markers",
                name="overtakes naive",
                marker=dict(symbol="star", size=14, color="#2ca02c", line=dict(color="#222", width=1)),
                customdata=[[s[2], s[3]] for s in stars],
                hovertemplate="<b>%{customdata[0]}</b> overtake(s) naive at seq %{customdata[1]}<extra></extra>",
            )
        )
    return _layout(fig, title, "time per forward (ms, median)", ok["time_ms"].to_list())


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
    fig = _layout(fig, title, "achieved TFLOP/s", ok["tflops"].to_list() + ([peak_tflops] if peak_tflops else []))
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
    tops = [(ok["peak_per_sequence"].max() or 1) * 2] if oom.height else []
    return _layout(fig, title, "peak memory added per sequence (bytes)", ok["peak_per_sequence"].to_list() + tops)


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
