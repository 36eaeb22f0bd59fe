"""The review screen a team reads (issue items 4-11): the Overview's story columns first, charts
that stay readable at 2, 8 and 21 runs, the article's path as the opening selection, one step
picker on the Kernels tab, why CUDA-graph runs can be slower, and the small things (labels, short
links, number formats, the toolbar, the favicon)."""

from __future__ import annotations

import json
import tempfile
import tomllib
from pathlib import Path

import polars as pl
import pytest
from streamlit.testing.v1 import AppTest

from dashboard import charts, report
from dashboard.engine.compare import review
from dashboard.engine.analyses.copies import copies
from dashboard.engine.compare.speed import speed_table, step_time

REPO = Path(__file__).resolve().parent.parent
APP = REPO / "dashboard" / "app.py"
H200 = REPO / "sample_traces" / "h200"
MANIFEST = json.loads((H200 / "runs.json").read_text())
ARTICLE = ("naive", "naive_inplace", "sdpa", "sdpa-math", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn")


def mode(entry: dict) -> str:
    return "CUDA graphs" if entry["cuda_graphs"] else "compiled" if entry["compiled"] else "eager"


def run_id(entry: dict) -> str:
    return "h200/" + entry["trace"].removesuffix(".json.gz")


@pytest.fixture
def app(monkeypatch):
    monkeypatch.delenv("ATTNSCOPE_TRACES", raising=False)

    def open_app(tab: str = "Overview", params: dict | None = None) -> AppTest:
        at = AppTest.from_file(str(APP), default_timeout=180)
        if tab != "Overview":
            at.query_params["tab"] = tab
        for key, value in (params or {}).items():
            at.query_params[key] = value
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert not [e.value for e in at.main.error if "could not be drawn" in e.value]
        return at

    return open_app


@pytest.fixture(scope="module")
def h200(trace_of) -> dict[str, tuple[dict, object]]:
    """label as the charts get it -> (manifest entry, Trace), every run of the H200 collection."""
    out = {}
    for entry in MANIFEST["runs"]:
        label = entry["variant"] + ("" if mode(entry) == "eager" else f" ({mode(entry)})")
        out[label] = (entry, trace_of(H200 / entry["trace"]))
    return out


# ---------------------------------------------------------------- item 6: what the app opens on


def test_the_app_opens_on_the_articles_path_eager_and_the_timeline_compares_naive_with_sdpa(app):
    at = app()
    want = [run_id(e) for v in ARTICLE for e in MANIFEST["runs"] if e["variant"] == v and mode(e) == "eager"]
    assert at.multiselect[0].value == want
    at.toggle(key="with_modes").set_value(True).run()
    assert sorted(at.multiselect[0].value) == sorted(run_id(e) for e in MANIFEST["runs"] if e["variant"] in ARTICLE)
    at.toggle(key="with_modes").set_value(False).run()
    assert at.multiselect[0].value == want
    timeline = app("Timeline diff")
    assert (timeline.selectbox(key="tl_a").value, timeline.selectbox(key="tl_b").value) == ("h200/naive", "h200/sdpa")


# ---------------------------------------------------------------- item 4: the Overview's columns


def test_the_overview_shows_the_story_columns_first_and_the_rest_on_demand(app):
    at = app()
    grid = at.get_by_key("tbl_overview").dataframe[0]
    order = list(grid.proto.column_order)
    assert order[:7] == [
        "run",
        "device_label",
        "median_step_us",
        "speedup",
        "work_per_step",
        "memsets_per_step",
        "hidden_copies_per_step",
    ]
    assert "backends" in order and "backend_requested" not in order and "parity_passed" not in order
    assert {"backend_requested", "parity_passed", "steps"} <= set(grid.value.columns)  # hidden, not dropped
    at.get_by_key("overview_more").set_value(["backend_requested", "parity_passed"]).run()
    order = list(at.get_by_key("tbl_overview").dataframe[0].proto.column_order)
    assert order[-2:] == ["backend_requested", "parity_passed"]


# ---------------------------------------------------------------- item 5: charts at 2, 8 and 21 runs


@pytest.mark.parametrize("count", [2, 8, 21])
def test_bar_charts_stay_readable_at_2_8_and_21_runs(h200, count):
    labels = list(h200)[:count] if count != 8 else [label for label in h200 if "(" not in label] + ["sdpa (compiled)"]
    traces = {label: h200[label][1] for label in labels}
    modes = {label: mode(h200[label][0]) for label in labels}
    speed = speed_table(traces, labels[0], 2.0, None)
    figures = {
        "time": charts.step_time_bars(speed, modes=modes, baseline=labels[0]),
        "speedup": charts.speedup_bars(speed, labels[0], modes=modes),
        "throughput": charts.throughput_bars(speed, modes=modes),
        "work": charts.work_by_family_stacked(review.families(traces), labels, "kernels", modes),
    }
    for name, fig in figures.items():
        bars = [t for t in fig.data if t.type == "bar"]
        drawn = [run for t in bars for run in (t.y if t.orientation == "h" else t.x)]
        assert set(drawn) == set(labels), name
        # flat bars whatever the count (one style), one facet per mode present, never one colour per run
        assert all(t.orientation == "h" for t in bars), name
        facets = [a.text for a in fig.layout.annotations if a.text]
        assert len({m for m in modes.values()}) == len({f.split(" · ")[0] for f in facets}), (name, facets)
        colours = {c for t in bars for c in ([t.marker.color] if isinstance(t.marker.color, str) else t.marker.color)}
        assert len(colours) <= 12, name
        assert fig.layout.height >= 20 * count, name  # a row per run: every label shown, none skipped
    # the speedup chart sorts each facet fastest first, and labels every bar
    speedup = [t for t in figures["speedup"].data if t.type == "bar"]
    for t in speedup:
        assert len(t.text) == len(t.y if t.orientation == "h" else t.x)
        if t.orientation == "h":
            values = [v for v in t.x if v is not None]
            assert values == sorted(values, reverse=True)


def test_the_family_legend_never_scrolls_and_fused_attention_is_in_it(h200):
    labels = list(h200)
    fig = charts.work_by_family_stacked(
        review.families({k: v[1] for k, v in h200.items()}), labels, "kernels", {k: mode(v[0]) for k, v in h200.items()}
    )
    assert fig.layout.legend.orientation == "h"
    assert "fused attention" in {t.name for t in fig.data if t.showlegend is not False}


def test_the_roofline_labels_powers_of_ten_and_costs_read_as_dollars():
    points = pl.DataFrame(
        {
            "run": ["a", "b"],
            "measure": ["whole step"] * 2,
            "name": ["a", "b"],
            "shape": [None, None],
            "backend": [None, None],
            "device": ["H200"] * 2,
            "dtype": ["bf16"] * 2,
            "count": [3, 3],
            "mean_us": [10.0, 20.0],
            "intensity": [30.0, 300.0],
            "tflops": [5.0, 500.0],
            "tbps": [1.0, 1.0],
            "peak_tflops": [989.0] * 2,
            "peak_tbps": [4.8] * 2,
            "pct_of_roofline": [1.0, 50.0],
            "bound": ["memory"] * 2,
        }
    )
    fig = charts.roofline(points)
    assert fig.layout.xaxis.dtick == 1 and fig.layout.yaxis.dtick == 1  # 1, 10, 100: never "1000, 5, 2, 100"
    assert [charts.format_usd(v) for v in (7.226e-05, 0.0721, 2.5, 0.0)] == ["$0.0000723", "$0.0721", "$2.50", "$0.00"]


# ---------------------------------------------------------------- item 7: the Kernels tab


def test_the_kernels_tab_has_one_step_picker_and_one_explanation(app):
    at = app("Kernels")
    pickers = [s for s in at.selectbox if s.key and s.key.startswith("kd_step")]
    assert [s.key for s in pickers] == ["kd_step"]
    callouts = at.get_by_key("kernels_readings").info
    combined, per_run = callouts[0], callouts[1:]  # one callout for every run; each run's own inside an expander
    assert "every run" in combined.value or all(label in combined.value for label in ("sdpa", "naive"))
    assert len(per_run) <= 6 and len(at.get_by_key("kernels_readings").expander) == 1
    assert len(at.get_by_key("kernels_explained").caption) == 1
    at.selectbox(key="kd_step").set_value(1).run()
    kstep = at.query_params["kstep"]
    assert len(kstep) == 7  # each run's second step, in the link for the reports


def test_a_folded_section_is_drawn_only_once_opened(app):
    """The Kernels tab's per-run readings and top-rows table sit in closed sections (views/folded.py):
    nothing of theirs is sent until the reader opens them, and then all of it is."""
    from dashboard.views import literal

    at = app("Kernels")
    [box] = at.get_by_key("kernels_readings").expander
    assert box.label == "Each run's readings, with its own numbers" and not box.markdown
    assert not at.get_by_key("kernels_explained").dataframe
    at.session_state["fold_kernels_readings"] = True
    at.session_state["fold_kernels_explained"] = True
    at.run()
    [box] = at.get_by_key("kernels_readings").expander
    [body] = box.markdown
    others = [e["variant"] for e in MANIFEST["runs"] if mode(e) == "eager"][1:]  # the default runs but the baseline
    assert len(others) >= 6 and all(f"**{literal.md(variant + ' [h200]')}**" in body.value for variant in others), (
        body.value[:300]
    )
    assert len(at.get_by_key("kernels_explained").dataframe) == 1


# ---------------------------------------------------------------- items 8 and 10


def test_a_cuda_graph_run_says_its_static_input_copies_cost_what_the_trace_shows(app, trace_of):
    at = app(params={"run": ["h200/sdpa", "h200/sdpa.graphs"]})
    (note,) = at.get_by_key("graph_copies").info
    graphs = trace_of(H200 / "sdpa.graphs.json.gz")
    assert copies(graphs).height > 0
    groups = review.copy_groups({"g": graphs})
    want = report.graph_input_copies(groups)["us_per_step"][0]
    assert want > 20
    assert charts.format_us(want) in note.value
    assert charts.format_us(step_time(graphs).median_us) in note.value
    assert charts.format_us(step_time(trace_of(H200 / "sdpa.json.gz")).median_us) in note.value
    assert "reduce-overhead" in note.value and "static" in note.value


def test_sdpa_says_its_second_unit_of_work_is_a_memset(app):
    at = app(params={"run": ["h200/sdpa"]})
    row = at.get_by_key("tbl_overview").dataframe[0].value.iloc[0]
    assert row["work_per_step"] == 2 and row["memsets_per_step"] == 1


# ---------------------------------------------------------------- item 11


def test_a_collections_name_is_on_all_its_labels_or_none(app):
    at = app(params={"run": [run_id(e) for e in MANIFEST["runs"]]})
    runs = at.get_by_key("tbl_overview").dataframe[0].value["run"].tolist()
    assert len(runs) == 21 and all(r.endswith(" [h200]") for r in runs)


def test_a_saved_view_opens_on_its_tab(app, monkeypatch):
    monkeypatch.setenv("ATTNSCOPE_STORE", tempfile.mkdtemp(prefix="attnscope-view-"))
    from dashboard.runs import trace_cache

    trace_cache.clear()
    try:
        at = app("Speedups")
        at.button(key="save_view").click().run()
        view = at.session_state["saved_view_id"]
        again = app(params={"view": view})
        assert again.query_params["tab"] == "Speedups"
        assert again.get_by_key("tbl_speed") is not None  # the Speedups tab is the one drawn
    finally:
        trace_cache.clear()


def test_report_numbers_read_as_people_write_them():
    assert report._cell(7.0) == "7" and report._cell(-0.0001) == "0" and report._cell(1.25) == "1.25"
    assert report._fmt("usd_per_mtok", 7.225e-05) == "0.00007225"


def test_streamlit_is_configured_for_a_review_tool_from_the_repository_root():
    config = tomllib.loads((REPO / ".streamlit" / "config.toml").read_text())
    assert config["client"]["toolbarMode"] == "minimal"  # no Deploy button
    source = APP.read_text()
    assert "page_icon=favicon()" in source and ":material/bolt:" not in source  # drawn here, not fetched from a CDN


def test_the_favicon_is_an_image_of_its_own():
    import importlib.util

    spec = importlib.util.spec_from_file_location("attnscope_app_module", APP)
    assert spec is not None
    from dashboard.app import favicon  # noqa: PLC0415 - imported as the package module

    image = favicon()
    assert image.size == (32, 32) and len(set(image.getdata())) == 2
