"""The flat charts built as plain dicts lay out what plotly itself lays out: the facet grid's
domains, shared axes and titles are make_subplots' (plotly is the oracle); the trimmed template is
plotly_white's own values for everything our charts draw; a stacked chart's bars carry the frame's
numbers, summed here by hand."""

from __future__ import annotations

import math

import plotly.io as pio
import polars as pl
import pytest
from plotly.subplots import make_subplots

from dashboard import charts
from dashboard.charts.facets import FACET_PX, ROW_PX, _facet_layout
from dashboard.charts.style import TEMPLATE

GRIDS = [
    ([("", ["a", "b", "c"])], ("",)),
    ([("eager", ["a", "b", "c"]), ("compiled", ["d"]), ("CUDA graphs", ["e", "f"])], ("",)),
    ([("eager", ["a"]), ("compiled", ["b", "c", "d", "e"])], ("tokens / s", "$ per billion tokens")),
    ([("", list("abcdefghijklmnopqrstu"))], ("left", "right")),
    ([("eager", list("abcdefg")), ("compiled", list("hijklmn")), ("CUDA graphs", list("opqrstu"))], ("",)),
]


def _plotly_grid(facets, columns) -> dict:
    """The same grid from plotly's make_subplots, with the facet titles moved as the charts move them."""
    runs = sum(len(m) for _, m in facets)
    height = 70 + ROW_PX * runs + FACET_PX * len(facets)
    titles = [
        " · ".join(t for t in (mode if len(facets) > 1 or mode else "", column) if t)
        for mode, _ in facets
        for column in columns
    ]
    fig = make_subplots(
        rows=len(facets),
        cols=len(columns),
        shared_yaxes=True,
        shared_xaxes="columns",
        row_heights=[max(len(m), 1) for _, m in facets],
        vertical_spacing=min(0.3, FACET_PX / height),
        horizontal_spacing=0.06,
        subplot_titles=titles,
    )
    for row, (_, members) in enumerate(facets, start=1):
        for col in range(1, len(columns) + 1):
            fig.update_yaxes(categoryorder="array", categoryarray=members, autorange="reversed", row=row, col=col)
    for note in fig.layout.annotations or ():
        note.update(
            x=note.x - 0.5 / len(columns) + 0.005 if len(columns) > 1 else 0.0, xanchor="left", font={"size": 13}
        )
    layout = fig.to_dict()["layout"]
    layout.pop("template")
    return layout


def _same(a, b, path="layout") -> None:
    if isinstance(a, dict):
        assert set(a) == set(b), (path, set(a) ^ set(b))
        for key in a:
            _same(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{path}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert math.isclose(a, b, rel_tol=0, abs_tol=1e-12), (path, a, b)
    else:
        assert a == b, (path, a, b)


@pytest.mark.parametrize("facets, columns", GRIDS)
def test_the_facet_grid_is_the_one_make_subplots_lays_out(facets, columns):
    mine = _facet_layout(facets, columns)
    if not mine["annotations"]:  # make_subplots leaves out a grid's empty list of titles
        del mine["annotations"]
    _same(mine, _plotly_grid(facets, columns))


def test_the_template_is_plotly_whites_for_every_trace_type_the_charts_draw():
    white = pio.templates["plotly_white"].to_plotly_json()
    for key, value in TEMPLATE["layout"].items():
        assert white["layout"][key] == value
    assert {"font", "colorway", "xaxis", "yaxis", "paper_bgcolor", "plot_bgcolor"} <= set(TEMPLATE["layout"])
    frame = pl.DataFrame(
        {"run": ["a", "b"], "family": ["gemm", "copy"], "count_per_step": [3.0, 1.0], "us_per_step": [5.0, 2.0]}
    )
    speed = pl.DataFrame(
        {
            "run": ["a", "b"],
            "median_us": [10.0, 5.0],
            "p10_us": [9.0, 4.0],
            "p90_us": [11.0, 6.0],
            "time_source": ["x", "y"],
            "speedup": [1.0, 2.0],
            "tokens_per_s": [1e6, 2e6],
            "usd_per_mtok": [0.1, 0.05],
        }
    )
    figures = [
        charts.family_grouped(frame, ["a", "b"], "time"),
        charts.step_time_bars(speed),
        charts.speedup_bars(speed, "a"),
        charts.throughput_bars(speed),
    ]
    for fig in figures:
        for trace in fig.data:
            assert white["data"][trace.type] == TEMPLATE["data"][trace.type]


def test_stacked_bars_carry_the_frames_numbers_and_totals():
    frame = pl.DataFrame(
        {
            "run": ["a", "a", "b", "c<i>"],
            "family": ["gemm", "copy", "gemm", "softmax"],
            "count_per_step": [2.0, 3.0, 7.0, 1.5],
            "us_per_step": [20.0, 1.0, 4.0, 9.0],
        }
    )
    modes = {"a": "eager", "b": "compiled", "c<i>": "eager"}
    fig = charts.family_grouped(frame, ["a", "b", "c<i>"], "count", modes=modes)
    bars = {(t.name, y): x for t in fig.data if t.type == "bar" for y, x in zip(t.y, t.x)}
    assert bars[("gemm", "a")] == 2.0 and bars[("copy", "a")] == 3.0 and bars[("gemm", "b")] == 7.0
    assert bars[("softmax", "c&lt;i&gt;")] == 1.5  # the label shown literally
    totals = {y: text for t in fig.data if t.type == "scatter" for y, text in zip(t.y, t.text)}
    assert totals == {"a": " 5", "c&lt;i&gt;": " 1.5", "b": " 7"}
    # eager first, its runs by time per step (a: 21 µs, c<i>: 9 µs); compiled in its own facet
    assert list(fig.layout.yaxis.categoryarray) == ["a", "c&lt;i&gt;"]
    assert list(fig.layout.yaxis2.categoryarray) == ["b"]
    assert [n.text for n in fig.layout.annotations] == ["eager", "compiled"]
    assert fig.layout.xaxis2.title.text == "count per step" and fig.layout.barmode == "stack"
