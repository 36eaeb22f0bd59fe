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
from dashboard.views.tables import _row_styles

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


def _open(tab: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=300)
    at.query_params["run"] = h200_ids()
    at.query_params["tab"] = tab
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
