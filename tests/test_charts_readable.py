"""Charts that can be read (issue 40 item 5), held on the builders' figures without pixels: a log
axis labels the span of its data, no two labels sit on one point, one style whatever the number of
runs, titles that fit half a page, one cost unit, one order of runs, no colour with two meanings."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest

from dashboard import article_charts
from dashboard.engine.analyses import article as art

ARTICLE = Path(__file__).resolve().parent.parent / "sample_traces" / "article-cpu"


@pytest.fixture(scope="module")
def sweep_curve():
    a = art.read_article(ARTICLE)
    part = a.sweep.filter(pl.col("dtype") == "fp32", pl.col("head_dim") == 64, pl.col("causal"))
    return part, article_charts.variant_colors(a.sweep["variant"].to_list())


def _sweep_figures(part, colors):
    return {
        "time": article_charts.time_vs_seq(part, colors, "t"),
        "tflops": article_charts.tflops_vs_seq(part, colors, "t", None),
        "memory": article_charts.memory_vs_seq(part, colors, "t"),
    }


@pytest.mark.parametrize("chart", ["time", "tflops", "memory"])
def test_each_sweep_log_axis_labels_ticks_across_its_data(sweep_curve, chart):
    """The bundled CPU sweep's TFLOP/s lie within one decade (0.02 to 0.12): plotly's dtick=1
    labelled only 0.1. At least three tick labels, the lowest at or under the data's middle and
    the highest at or over it, all inside the axis range."""
    fig = _sweep_figures(*sweep_curve)[chart]
    ticks = list(fig.layout.yaxis.tickvals)
    lo, hi = fig.layout.yaxis.range
    ys = [y for t in fig.data if t.meta == "line" for y in t.y]
    middle = (math.log10(min(ys)) + math.log10(max(ys))) / 2
    assert len(ticks) >= 3
    assert math.log10(min(ticks)) <= middle <= math.log10(max(ticks))
    assert all(lo <= math.log10(t) <= hi for t in ticks)
    assert lo <= math.log10(min(ys)) and math.log10(max(ys)) <= hi


@pytest.mark.parametrize("chart", ["time", "tflops", "memory"])
def test_the_lines_end_labels_never_overlap(sweep_curve, chart):
    """sdpa and sdpa-flash end at one TFLOP/s at seq 1024 (the same CPU kernel): their names are
    moved apart by at least a label's height, and each line has its name once."""
    fig = _sweep_figures(*sweep_curve)[chart]
    notes = sorted(fig.layout.annotations, key=lambda a: a.y)
    names = [a.text for a in notes]
    assert sorted(names) == sorted(t.name for t in fig.data if t.meta == "line")
    lo, hi = fig.layout.yaxis.range
    gap = (hi - lo) * article_charts.END_LABEL_PX / article_charts.PLOT_PX
    assert all(b.y - a.y >= gap - 1e-9 for a, b in zip(notes, notes[1:]))
    assert all(lo - 1e-9 <= a.y <= hi + 1e-9 for a in notes)


def test_no_two_crossover_stars_sit_on_one_point(sweep_curve):
    """flex, sdpa and sdpa-flash all overtake naive from seq 128 at about the same time: one star
    names the three instead of three stars stacked."""
    fig = _sweep_figures(*sweep_curve)["time"]
    (stars,) = [t for t in fig.data if t.name == "overtakes naive"]
    points = [(x, math.log10(y)) for x, y in zip(stars.x, stars.y)]
    for i, (x, y) in enumerate(points):
        for x2, y2 in points[i + 1 :]:
            assert not (x == x2 and abs(y - y2) < article_charts.STACKED)
    named = [v for c in stars.customdata for v in c[0].split(", ")]
    crossed = art.crossovers(sweep_curve[0]).filter(pl.col("faster_from_seq").is_not_null())
    assert sorted(named) == sorted(crossed["variant"].to_list())


# ------------------------------------------------ the H200 collection's charts at 2, 8 and 21 runs


@pytest.fixture(scope="module")
def h200(trace_of):
    """label -> (mode, Trace), every run of the bundled H200 collection, the article's eager path first."""
    from test_review_screen import H200, MANIFEST, mode

    out = {}
    for entry in MANIFEST["runs"]:
        label = entry["variant"] + ("" if mode(entry) == "eager" else f" ({mode(entry)})")
        out[label] = (mode(entry), trace_of(H200 / entry["trace"]))
    return out


def _pick(h200, count: int) -> list[str]:
    eager = [label for label in h200 if "(" not in label]
    return eager[:count] if count <= len(eager) else (eager + [x for x in h200 if x not in eager])[:count]


def _figures(h200, labels: list[str]) -> dict:
    from dashboard import charts
    from dashboard.engine.compare import review
    from dashboard.engine.compare.speed import speed_table

    traces = {label: h200[label][1] for label in labels}
    modes = {label: h200[label][0] for label in labels}
    speed = speed_table(traces, labels[0], 2.0, None)
    families = review.families(traces)
    return {
        "time": charts.step_time_bars(speed, modes=modes, baseline=labels[0]),
        "speedup": charts.speedup_bars(speed, labels[0], modes=modes),
        "throughput": charts.throughput_bars(speed, modes=modes),
        "work": charts.work_by_family_stacked(families, labels, "kernels", modes),
        "count": charts.family_grouped(families, labels, "count", modes),
        "kernel time": charts.family_grouped(families, labels, "time", modes),
        "_speed": speed,
    }


def _bar_colours(fig) -> set[str]:
    return {
        c
        for t in fig.data
        if t.type == "bar"
        for c in ([t.marker.color] if isinstance(t.marker.color, str) else t.marker.color)
    }


@pytest.mark.parametrize("count", [2, 8, 21])
def test_one_style_whatever_the_number_of_runs(h200, count):
    """2 runs looked unlike 7 (upright bars, rotated labels, one colour per run with two similar
    yellows): every bar chart lies flat and draws from one small palette for 2, 8 and 21 runs."""
    from dashboard import charts

    allowed = {
        charts.FLAT_COLOR,
        charts.BASELINE_COLOR,
        charts.FASTER_COLOR,
        charts.SLOWER_COLOR,
        "#b279a2",  # the cost bars
        *charts.FAMILY_COLORS.values(),
    }
    figures = _figures(h200, _pick(h200, count))
    for name, fig in figures.items():
        if name.startswith("_"):
            continue
        bars = [t for t in fig.data if t.type == "bar"]
        assert bars and all(t.orientation == "h" for t in bars), name
        assert _bar_colours(fig) <= allowed, (name, _bar_colours(fig) - allowed)


def test_the_run_palette_has_no_two_yellows():
    from dashboard.charts import RUN_COLORS

    import colorsys

    def hls(c: str) -> tuple[float, float, float]:
        return colorsys.rgb_to_hls(*(int(c[i : i + 2], 16) / 255 for i in (1, 3, 5)))

    # hue 40 to 65 degrees, saturated: #eeca3b and the #b8860b that stood beside it on 2-4 runs
    yellows = [c for c in RUN_COLORS if 40 / 360 <= hls(c)[0] <= 65 / 360 and hls(c)[2] > 0.5]
    assert len(yellows) <= 1, yellows


HALF_PAGE_TITLE = 50  # characters a title keeps in half of a 1500 px page (the Speedup chart lost "(above 1 = faste")


@pytest.mark.parametrize("count", [2, 8, 21])
def test_half_page_titles_fit(h200, count):
    labels = _pick(h200, count)
    for name, fig in _figures(h200, labels).items():
        if name.startswith("_"):
            continue
        assert len(fig.layout.title.text) <= HALF_PAGE_TITLE, (name, fig.layout.title.text)
    speedup = _figures(h200, labels)["speedup"]
    assert any("right of 1 = faster" in (ax.title.text or "") for ax in speedup.select_xaxes())


def test_cost_reads_per_billion_tokens_with_the_same_numbers(h200):
    """$0.00000390 per 1M tokens did not read: the chart and the Speedups table both say $ per
    billion tokens, the values 1000x the frame's usd_per_mtok, no label with four zeros after the point."""
    from dashboard import charts

    figures = _figures(h200, _pick(h200, 8))
    fig, speed = figures["throughput"], figures["_speed"]
    titles = [a.text for a in fig.layout.annotations]
    assert any(charts.COST_UNIT in t for t in titles) and not any("million" in t for t in titles)
    cost = [t for t in fig.data if t.type == "bar" and "per billion tokens" in t.hovertemplate]
    assert cost
    want = dict(zip(speed["run"].to_list(), speed["usd_per_mtok"].to_list()))
    for t in cost:
        for run, value, text in zip(t.y, t.x, t.text):
            assert value == pytest.approx(want[run] * 1000)
            assert "0.0000" not in text
    view = Path(__file__).resolve().parent.parent / "dashboard" / "views" / "speedups.py"
    assert "charts.COST_UNIT" in view.read_text() and '"$ / million tokens"' not in view.read_text()


def test_the_kernels_tabs_two_charts_order_the_runs_alike(h200):
    figures = _figures(h200, _pick(h200, 21))
    for count_axis, time_axis in zip(figures["count"].select_yaxes(), figures["kernel time"].select_yaxes()):
        assert list(count_axis.categoryarray) == list(time_axis.categoryarray)
    assert any(len(ax.categoryarray) > 1 for ax in figures["count"].select_yaxes())


def test_the_family_time_chart_uses_no_family_colour_for_a_run(h200):
    """Blue meant run B in the Timeline's family chart and gemm in the legend above it."""
    from dashboard import charts
    from dashboard.engine.compare.diff import family_time_diff

    a, b = h200["naive"][1], h200["sdpa"][1]
    fig = charts.family_diff_bars(family_time_diff(a, 0, b, 0), "A: naive", "B: sdpa")
    inks = {t.marker.color for t in fig.data} | {t.marker.line.color for t in fig.data}
    assert not inks & {c.lower() for c in charts.FAMILY_COLORS.values()}
    assert fig.data[0].marker.color != fig.data[1].marker.color


def test_no_two_roofline_labels_sit_on_one_place(h200):
    """naive and naive_inplace sit close on the roofline: their names go above and below."""
    import numpy as np

    from dashboard import charts
    from dashboard.charts.roofline import LABEL_NEAR
    from dashboard.engine.compare import review

    for count in (2, 8, 21):
        labels = _pick(h200, count)
        fig = charts.roofline(review.roofline_points({k: h200[k][1] for k in labels}))
        texts = [t for t in fig.data if t.mode == "text"]
        for i, t in enumerate(texts):
            for u in texts[i + 1 :]:
                near = (
                    abs(np.log10(t.x[0]) - np.log10(u.x[0])) < LABEL_NEAR[0]
                    and abs(np.log10(t.y[0]) - np.log10(u.y[0])) < LABEL_NEAR[1]
                )
                assert not (near and t.textposition == u.textposition), (count, t.text, u.text)


def test_roofline_labels_run_right_of_their_points_and_their_hover_names_every_run(h200):
    """Text running left from a point crosses the bandwidth slope (the roof falls to the left):
    every label sits right of its point, and a cluster's label, however short, names all its runs
    when hovered; together the labels' hovers name each run with a point exactly once."""
    from dashboard import charts
    from dashboard.engine.compare import review

    labels = _pick(h200, 21)
    points = review.roofline_points({k: h200[k][1] for k in labels})
    fig = charts.roofline(points)
    texts = [t for t in fig.data if t.mode == "text"]
    assert texts and all(t.textposition.endswith("right") for t in texts)
    hovered = [name for t in texts for name in t.hovertemplate.removesuffix("<extra></extra>").split("<br>")]
    placed = points.filter((points["intensity"] > 0) & (points["tflops"] > 0))["run"].unique().to_list()
    assert sorted(hovered) == sorted(charts.plain(r) for r in placed)
