"""What makes a tab switch back fast keeps what the tab shows: the figures kept per selection
(dashboard/views/figures.once) are the ones a fresh session builds, built once; the tables' row
colours given to the Styler at once (tables._row_styles) are the ones one call per row gave."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
from streamlit.testing.v1 import AppTest

from dashboard import charts
from dashboard.runs import ENV_TRACES
from dashboard.views import figures
from dashboard.views.tables import _row_styles, styled

REPO = Path(__file__).resolve().parent.parent
APP = REPO / "dashboard" / "app.py"
H200 = REPO / "sample_traces" / "h200"


def h200_ids() -> list[str]:
    manifest = json.loads((H200 / "runs.json").read_text())
    return [f"{manifest['collection']}/{r['trace'].removesuffix('.json.gz')}" for r in manifest["runs"]]


def test_a_figure_is_built_once_per_comparison_and_again_for_another():
    state: dict = {}
    built: list[int] = []

    def build():
        built.append(1)
        return object()

    sel = SimpleNamespace(comparison=object())
    first = figures.once(sel, ("chart", 1), build, state)
    assert figures.once(sel, ("chart", 1), build, state) is first and len(built) == 1
    assert figures.once(sel, ("chart", 2), build, state) is not first and len(built) == 2  # another choice
    other = SimpleNamespace(comparison=object())  # another selection: its own figures
    assert figures.once(other, ("chart", 1), build, state) is not first and len(built) == 3
    assert figures.once(sel, ("chart", 1), build, state) is not first and len(built) == 4  # the old ones let go
    assert figures.once(None, "x", build, state) is not figures.once(None, "x", build, state)  # no selection


def test_a_flat_chart_is_drawn_with_room_for_its_run_labels_and_no_automatic_margin():
    import plotly.graph_objects as go

    def flat(labels: list[str], **yaxis) -> go.Figure:
        return go.Figure(
            data=[{"type": "bar", "orientation": "h", "y": labels, "x": [1] * len(labels)}],
            layout={"yaxis": {"categoryarray": labels, "categoryorder": "array", **yaxis}, "margin": {"l": 10}},
        )

    # "naive [h200]" by hand: 9 narrow characters (n a i v e, the space, [ h ]) at 6.4 px and 3 digits at
    # 7.2, at 14 px: 79.2; at the ticks' 12 px: 67.9 -> 68, and the 14 px gap to the plot
    fig = figures.once(None, "x", lambda: flat(["naive [h200]", "sdpa"]))
    assert fig.layout.yaxis.automargin is False and fig.layout.margin.l == 82
    # a label as plain() escaped it is measured as the page shows it: "a<b" is 3 narrow characters
    fig = figures.once(None, "x", lambda: flat(["a&lt;b"]))
    assert fig.layout.margin.l == round(3 * 6.4 * 12 / 14) + 14
    assert figures.once(None, "x", lambda: flat(["x" * 400])).layout.margin.l == figures.LABEL_MOST_PX
    titled = figures.once(None, "x", lambda: flat(["naive"], title={"text": "run"}))  # its title needs room too
    assert titled.layout.yaxis.automargin is None and titled.layout.margin.l == 10
    numeric = figures.once(None, "x", lambda: go.Figure(data=[{"type": "scatter", "x": [1, 2], "y": [3, 4]}]))
    assert numeric.layout.yaxis.automargin is None and numeric.layout.margin.l is None


def test_row_styles_are_those_of_one_call_per_row():
    data = pd.DataFrame(
        {"run": ["a", "b", "c", "d"], "change": ["slower", "same", "added", "same"], "us": [1.0, 2, 3, 4]}
    )
    styles = ["background-color: #fde0dc", "", "background-color: #fff4ce", ""]
    per_row = data.style.apply(lambda r: [styles[r.name]] * len(r), axis=1)  # how tables.show gave them before
    at_once = data.style.apply(lambda d: _row_styles(d, styles), axis=None)
    per_row._compute()
    at_once._compute()
    assert dict(at_once.ctx) == dict(per_row.ctx)
    assert at_once.ctx[(0, 2)] == [("background-color", "#fde0dc")] and (1, 0) not in at_once.ctx


def _open(tab: str, opened: tuple[str, ...] = ()) -> AppTest:
    """The app on `tab` with the 21 H200 runs, the closed sections keyed `opened` open (views/folded.py)."""
    at = AppTest.from_file(str(APP), default_timeout=300)
    at.query_params["run"] = h200_ids()
    at.query_params["tab"] = tab
    for key in opened:
        at.session_state[key] = True
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _figure(at: AppTest, key: str) -> dict:
    (chart,) = list(at.get_by_key(key).children.values())
    return json.loads(chart.proto.spec)


def test_a_tab_visited_again_draws_the_figures_a_fresh_session_builds_without_building_them(monkeypatch):
    tab, keys = "Speedups", ["chart_speed_time", "chart_speedup"]
    monkeypatch.delenv(ENV_TRACES, raising=False)
    fresh = _open(tab)
    expected = {key: _figure(fresh, key) for key in keys}
    built: list[str] = []
    real = charts.step_time_bars
    monkeypatch.setattr(charts, "step_time_bars", lambda *a, **k: built.append("time") or real(*a, **k))
    at = _open(tab)
    assert built == ["time"]
    at.query_params["tab"] = "Kernels"
    at.run()
    at.query_params["tab"] = tab
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert built == ["time"]  # drawn again, not built again
    assert {key: _figure(at, key) for key in keys} == expected
    at.toggle(key="speed_log").set_value(True).run()  # a choice the figure depends on: built anew
    assert built == ["time", "time"]
    assert _figure(at, "chart_speed_time")["layout"]["xaxis"]["type"] == "log"


def _marshalled(styler, uuid: str) -> tuple:
    """What Streamlit sends for `styler`: its CSS (the uuid written as 'U'), cell texts and caption."""
    from streamlit.elements.lib.pandas_styler_utils import marshall_styler
    from streamlit.proto.ArrowData_pb2 import ArrowData

    proto = ArrowData()
    styler.set_uuid(uuid)
    marshall_styler(proto, styler, uuid)
    return proto.styler.styles.replace(uuid, "U"), proto.styler.display_values, proto.styler.caption


def test_a_kept_styler_sends_what_a_plain_one_sends_and_renders_once(monkeypatch):
    from pandas.io.formats.style import Styler

    renders: list[int] = []
    real = Styler._translate
    monkeypatch.setattr(Styler, "_translate", lambda self, *a, **k: renders.append(1) or real(self, *a, **k))
    data = pd.DataFrame(
        {
            "run": ["a", "a", "b", "b"],
            "change": ["slower", "same", "fewer", "added"],
            "name": ["gemm", "memset", "softmax", "copy"],
            "delta_us": [1.25, -0.001, -3.5, 2.0],
            "hidden_count": [2, 1, 0, 4],
        }
    )
    styles = ["background-color: #fde0dc", "", "background-color: #e3f4e1", "background-color: #fff4ce"]
    paint = ("change", "name", "absent")  # a column not in the data is no column painted
    # the obvious way: one call per row, on the painted columns only
    plain = data.style.apply(lambda r: [styles[r.name]] * len(r), axis=1, subset=["change", "name"])
    expected = _marshalled(plain, "x1")
    kept = styled(data, styles, paint)
    renders.clear()
    assert _marshalled(kept, "x2") == expected and len(renders) == 1
    assert _marshalled(kept, "x2") == expected and len(renders) == 1  # drawn again: not rendered again
    assert "U_row0_col1" in expected[0] and "U_row1_col" not in expected[0] and "col0" not in expected[0]


def _sent(at: AppTest, key: str) -> tuple:
    """The coloured table under `key` as sent: data, cell texts and CSS (its uuid written as 'U')."""
    arrow = at.get_by_key(key).dataframe[0].proto.arrow_data
    return arrow.data, arrow.styler.display_values, arrow.styler.styles.replace(arrow.styler.uuid, "U")


def test_the_kernels_tab_visited_again_sends_the_coloured_diffs_a_fresh_session_sends_without_rendering_them(
    monkeypatch,
):
    from pandas.io.formats.style import Styler

    keys = ["tbl_kernels_delta", "tbl_ops_delta"]
    monkeypatch.delenv(ENV_TRACES, raising=False)
    fresh = _open("Kernels")
    expected = {key: _sent(fresh, key) for key in keys}
    css = " ".join(styles for _, _, styles in expected.values())
    assert all(colour in css for colour in ("#fde0dc", "#fff4ce", "#e3f4e1"))  # red, yellow and green rows
    renders: list[int] = []
    real = Styler._translate
    monkeypatch.setattr(Styler, "_translate", lambda self, *a, **k: renders.append(1) or real(self, *a, **k))
    at = _open("Kernels")
    assert len(renders) == len(keys)  # a first visit renders each coloured table once
    at.query_params["tab"] = "Overview"
    at.run()
    renders.clear()
    at.query_params["tab"] = "Kernels"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert renders == [] and {key: _sent(at, key) for key in keys} == expected
    at.toggle(key="kernels_only_changes").set_value(False).run()  # another choice: its own tables, rendered
    assert len(renders) == len(keys) and _sent(at, "tbl_kernels_delta")[0] != expected["tbl_kernels_delta"][0]


def _sent_whole(at: AppTest, key: str) -> tuple:
    """The table under `key` as sent, uuid and all: what decides whether Streamlit sends it again
    or as a reference to the message the browser keeps."""
    arrow = at.get_by_key(key).dataframe[0].proto.arrow_data
    return arrow.data, arrow.styler.display_values, arrow.styler.styles, arrow.styler.uuid


def test_coloured_tables_drawn_again_are_the_same_message_named_by_their_key(monkeypatch):
    from pandas.io.formats.style import Styler

    monkeypatch.delenv(ENV_TRACES, raising=False)
    kept = {"Copies": ["tbl_copy_groups", "tbl_copies"]}
    also = {"Sweep": ["tbl_dispatch_cells", "tbl_dispatch_map"]}  # (the map: a Styler of its own)
    fresh = {
        tab: _open(tab, ("fold_dispatch_cells",)) for tab in (*kept, *also)
    }  # (the cells' table: a closed section)
    expected = {key: _sent_whole(fresh[tab], key) for tab, keys in {**kept, **also}.items() for key in keys}
    for key, (_, _, css, uuid) in expected.items():
        assert uuid == key and f"#T_{key}_row" in css  # the CSS names the table by its key, not at random
    renders: list[str] = []
    real = Styler._translate
    monkeypatch.setattr(Styler, "_translate", lambda self, *a, **k: renders.append(self.uuid) or real(self, *a, **k))
    at = _open("Copies", ("fold_dispatch_cells",))
    for tab, keys in {**kept, **also}.items():
        at.query_params["tab"] = "Ranks"
        at.run()
        renders.clear()
        at.query_params["tab"] = tab
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert {key: _sent_whole(at, key) for key in keys} == {key: expected[key] for key in keys}
        if tab in kept:
            assert not set(renders) & set(keys), renders  # a switch back renders none of them again
