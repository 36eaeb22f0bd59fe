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
