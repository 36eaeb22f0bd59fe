"""A newcomer's hour with the dashboard (issue 40), in AppTest: what each tab says when the runs are
not the same work, that an upload keeps the review, one statement per fact, the saved view's whole
link, labels in plain text, a memsets column of numbers and a backend check that does not call a
trace without attention 'not forced'.

The unrelated selection is the issue's: our H200 naive attention, TraceLens' H100 BERT and HTA's
MI250 toy. Why they are not one workload is read from the JSON here (the oracle), not from the app.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

import oracle
from dashboard.views import tab_set
from test_dashboard_apptest import DATA, app, figure, table, texts  # noqa: F401 - app: the fixture

REPO = Path(__file__).resolve().parent.parent
H200 = REPO / "sample_traces" / "h200"
PUBLIC = REPO / "sample_traces" / "gpu-public"
NAIVE, BERT, MI250 = "h200/naive", "gpu-public/tracelens_h100_bert_sdpa_flash", "gpu-public/hta_mi250_rocm_minitoy"
VLLM = "gpu-public/tracelens_vllm_decode_graph_unified_attention"
UNRELATED = {"run": [NAIVE, BERT, MI250], "baseline": NAIVE}
LABELS = {NAIVE: "naive [h200]", BERT: "h100-bert-flash", MI250: "mi250-minitoy"}
TABS_THAT_COMPARE = ("Overview", "Kernels", "Copies", "Speedups", "Backends")
DIFFERENCE_WORDS = {
    "only in the run",
    "only in the baseline",
    "more per step",
    "fewer per step",
    "longer mean",
    "shorter mean",
}


# ---------------------------------------------------------------- the oracle: not the same work


def _sdpa_dims(path: Path) -> set[str]:
    return {
        json.dumps(e["args"]["Input Dims"][0])
        for e in oracle.complete(oracle.raw(path))
        if e.get("name") == "aten::scaled_dot_product_attention"
    }


def _op_names(path: Path) -> set[str]:
    return {e["name"] for e in oracle.complete(oracle.raw(path)) if e.get("cat") == "cpu_op"}


def test_the_issues_three_runs_are_not_one_workload():
    naive = oracle.raw(H200 / "naive.json.gz")["attnscope"]["shape"]
    assert [naive[k] for k in ("batch", "heads", "seq", "head_dim")] == [8, 16, 1024, 64]
    assert _sdpa_dims(PUBLIC / "tracelens_h100_bert_sdpa_flash.json.gz") - {"[8, 16, 1024, 64]"}  # BERT: other shapes
    a, b = _op_names(H200 / "naive.json.gz"), _op_names(PUBLIC / "hta_mi250_rocm_minitoy.json.gz")
    assert len(a & b) / len(a | b) < 0.6  # the MI250 toy shares few of naive's ops


# ---------------------------------------------------------------- item 1: said first, on every tab


def read(elements) -> list[str]:
    """texts(), bold marks removed too: the words a reader reads."""
    return [t.replace("**", "") for t in texts(elements)]


def relation(tab: str) -> str:
    """The relation block's key in `tab` (one per tab: dashboard/views/tab_set.keyed)."""
    return tab_set.key_in("relation", tab)


def _open_tab(at):
    (tab,) = [t for t in at.tabs if len(t.children)]
    return tab


def _first_statement(block):
    """The first thing a reader meets in a tab: its first alert box, table or chart."""
    kinds = ("warning", "info", "error", "success", "arrow_data_frame", "plotly_chart", "dataframe")
    return next(node for node in block if getattr(node, "type", None) in kinds)


@pytest.mark.parametrize("tab", TABS_THAT_COMPARE)
def test_every_tab_says_first_that_the_runs_are_not_the_same_work(app, tab):
    at = app(tab, params=UNRELATED)
    first = _first_statement(_open_tab(at))
    assert first.type == "warning", (tab, first.type)
    said = read([first])[0]
    assert said.startswith("Not the same work as its baseline: no speedup is set")
    assert "h100-bert-flash against naive [h200]: attention shapes differ" in said
    assert "mi250-minitoy against naive [h200]: op signatures only" in said
    assert len(texts(at.get_by_key(relation(tab)).warning)) == 1
    everything = " ".join(texts(at.main.warning) + texts(at.main.info) + texts(at.main.markdown))
    assert everything.count("attention shapes differ") == 1  # said once


def test_the_speedups_tab_marks_other_work_and_says_why_a_slot_has_no_bar(app):
    at = app("Speedups", params=UNRELATED)
    speed = table(at, "tbl_speed").set_index("run")
    for label in (LABELS[BERT], LABELS[MI250]):
        assert math.isnan(speed.loc[label, "speedup"]) and speed.loc[label, "relation"].startswith("different")
    times = figure(at, "chart_speed_time")
    # flat bars, one trace per kind of bar: each run's hatch and end label, whichever trace draws it
    shapes = {
        run: shape
        for t in times["data"]
        if t["type"] == "bar"
        for run, shape in zip(t["y"], t["marker"]["pattern"]["shape"])
    }
    assert shapes[LABELS[BERT]] == shapes[LABELS[MI250]] == "x" and shapes[LABELS[NAIVE]] != "x"
    ends = {run: text for t in times["data"] if t["type"] == "scatter" for run, text in zip(t["y"], t["text"])}
    assert {run: text.endswith("· other work") for run, text in ends.items()} == {
        LABELS[NAIVE]: False,
        LABELS[BERT]: True,
        LABELS[MI250]: True,
    }
    assert "other work" in times["layout"]["title"]["text"]
    speedups = figure(at, "chart_speedup")
    # flat bars: a run is a row (the other annotations title the execution modes' groups)
    notes = {a["y"]: a["text"] for a in speedups["layout"]["annotations"] if isinstance(a["y"], str)}
    assert notes == {
        LABELS[BERT]: "different workload: no speedup",
        LABELS[MI250]: "different workload: no speedup",
    }
    assert "other work" in " ".join(texts([at.get_by_key("speed_apart").caption[0]]))


def test_the_kernels_tab_lists_how_other_work_differs_and_calls_nothing_a_change(app):
    at = app("Kernels", params=UNRELATED)
    with pytest.raises(KeyError):
        at.get_by_key("tbl_kernels_delta")  # no 'what changed' table between different work
    rows = table(at, "tbl_kernels_apart")
    assert set(rows["change"]) <= DIFFERENCE_WORDS
    # naive's softmax kernel (in its JSON) is not among BERT's kernels: only in the baseline
    naive_kernels = {e["name"] for e in oracle.complete(oracle.raw(H200 / "naive.json.gz")) if e.get("cat") == "kernel"}
    softmax = [n for n in naive_kernels if "softmax_warp_forward" in n]
    assert softmax
    bert = rows[rows["run"] == LABELS[BERT]].set_index("name")
    assert bert.loc["(anonymous namespace)::softmax_warp_forward", "change"] == "only in the baseline"
    assert not at.get_by_key("tbl_kernels_apart").dataframe[0].proto.arrow_data.styler.styles  # no red, no green
    said = " ".join(texts(at.main.info))
    assert "nothing here is a change" in said


def test_the_timeline_says_a_and_b_are_other_work_and_aligns_no_op_of_one_with_the_other(app):
    at = app("Timeline diff", params={**UNRELATED, "a": NAIVE, "b": BERT})
    first = _first_statement(_open_tab(at))
    assert first.type == "warning" and read([first])[0].startswith("A and B are not the same work: attention shapes")
    ops = at.get_by_key("timeline_op_changes")
    assert "Not compared" in texts(ops.caption)[0] and not ops.markdown  # no 'replaced by', no '-39 kernels'
    seq = table(at, "tbl_sequence")
    assert set(seq["change"]) <= {"same", "only in A", "only in B", "different kernels"}
    assert not at.get_by_key("tbl_sequence").dataframe[0].proto.arrow_data.styler.styles
    labels = [m.label for m in at.get_by_key("timeline_counts").metric]
    assert labels == ["same in both", "only in A", "only in B", "different kernels at that point"]


def test_the_same_work_on_another_device_is_a_note_and_its_changes_stay_changes(app):
    a100, v100 = DATA / "hta_a100_control.json.gz", DATA / "hta_v100_test.json.gz"
    ids = ["file/" + a100.name, "file/" + v100.name]
    at = app("Kernels", params={"run": ids, "baseline": ids[0]}, traces=[a100, v100])
    said = read(at.get_by_key(relation("Kernels")).info)
    assert len(said) == 1 and said[0].startswith("The same work on another device:") and "V100" in said[0]
    assert not at.get_by_key(relation("Kernels")).warning
    assert table(at, "tbl_kernels_delta").shape[0] > 0


def test_runs_that_do_the_same_work_get_no_relation_note(app):
    for tab in TABS_THAT_COMPARE + ("Timeline diff",):
        at = app(tab)  # the bundled H200 article path: one workload, one device
        with pytest.raises(KeyError):
            at.get_by_key(relation(tab))


# ---------------------------------------------------------------- item 3: one statement per fact


def test_a_small_hidden_copy_is_said_once_with_its_size_under_the_green_line(app):
    at = app(params={"run": [VLLM], "baseline": VLLM})
    boxes = [read([b])[0] for b in at.get_by_key("findings") if getattr(b, "type", None) in ("success", "warning")]
    about_copies = [b for b in boxes if "hidden cop" in b]
    assert len(about_copies) == 1, boxes
    (line,) = about_copies
    assert "no hidden copy at or above the alarm's threshold (1% of the step or 1.0 MB a step)" in line
    assert re.search(r"Below it, 1 run makes hidden copies:\s.*: 1 hidden copy per step \(128 B per step", line, re.S)
    assert "below the alarm's" not in line
    copies = app("Copies", params={"run": [VLLM], "baseline": VLLM})
    (green,) = read(copies.get_by_key("copies_alarms").success)
    assert "below it:" in green and "128 B a step" in green


# ---------------------------------------------------------------- item 6: the saved view's whole link


def test_the_saved_view_gives_the_whole_link(app, monkeypatch):
    import streamlit.runtime.context as context

    monkeypatch.setattr(context.ContextProxy, "url", property(lambda self: "http://reviews.example:8501/"))
    at = app()
    at.sidebar.text_input(key="view_note").set_value("flash vs naive").run()
    at.sidebar.button(key="save_view").click().run()
    (link,) = [c.value for c in at.sidebar.code]
    assert re.fullmatch(r"http://reviews\.example:8501/\?view=[0-9a-f]+", link), link


# ---------------------------------------------------------------- item 7: labels in plain text


def test_labels_read_as_written(app):
    at = app(params={"run": [NAIVE, BERT], "baseline": NAIVE})
    pins = [c.label for c in at.sidebar.checkbox if c.label.startswith("Pin ")]
    assert pins and pins[0].startswith("Pin naive [h200] (")
    labels = [w.label for w in at.sidebar.checkbox] + [e.label for e in at.expander]
    assert not [lab for lab in labels if "\\" in lab]


# ---------------------------------------------------------------- item 12: small ones


def test_a_gpu_run_without_memsets_shows_zero_memsets_and_a_trace_without_attention_is_not_not_forced(app):
    memsets = {
        p.name: sum(1 for e in oracle.complete(oracle.raw(p)) if e.get("cat") == "gpu_memset")
        for p in (PUBLIC / "tracelens_h100_bert_sdpa_flash.json.gz", PUBLIC / "hta_mi250_rocm_minitoy.json.gz")
    }
    assert set(memsets.values()) == {0}
    at = app(params=UNRELATED)
    shown = table(at, "tbl_overview").set_index("run")
    assert shown.loc[LABELS[BERT], "memsets_per_step"] == 0 and shown.loc[LABELS[MI250], "memsets_per_step"] == 0
    assert shown.loc[LABELS[NAIVE], "memsets_per_step"] == 1
    assert shown.loc[LABELS[MI250], "backend_verdict"] == "no attention found"
    backends = table(app("Backends", params=UNRELATED), "tbl_backends").set_index("run")
    assert (
        backends.loc[LABELS[MI250], "detected"] == "" and backends.loc[LABELS[MI250], "verdict"] == "no attention found"
    )
    assert backends.loc[LABELS[BERT], "verdict"] == "not forced"  # flash ran, nobody forced it
