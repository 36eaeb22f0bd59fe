"""The dashboard, driven headless with Streamlit's AppTest: every tab shows the engine's numbers.

Oracles are the engine's primitive analyses (per_step, step_time, copies, kernel_table,
detect_backends, timeline, sequence_diff, speed_table) computed here on traces loaded here, and
facts from the collection's own manifest (shape, variants) - never numbers copied from the app.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
from pathlib import Path

import pandas as pd
import polars as pl
import pytest

import oracle
from uploading import send
from streamlit.runtime.media_file_manager import MediaFileManager
from streamlit.testing.v1 import AppTest

from dashboard.engine import load_trace
from dashboard.engine.analyses.backends import detect_backends
from dashboard.engine.analyses.copies import copies
from dashboard.engine.compare.diff import family_time_diff, kernel_diff, sequence_diff, timeline
from dashboard.engine.analyses.kernels import family_per_step, kernel_table, per_step
from dashboard.engine.compare.speed import representative_step, speed_table, step_time
from dashboard.runs import ENV_TRACES, trace_cache

REPO = Path(__file__).resolve().parent.parent
APP = REPO / "dashboard" / "app.py"
SAMPLE = REPO / "sample_traces" / "cpu"
GPU_SAMPLE = REPO / "sample_traces" / "gpu-public"
H200_SAMPLE = REPO / "sample_traces" / "h200"
DATA = REPO / "tests" / "data"
H100 = DATA / "tracelens_h100_bert_sdpa_flash.json.gz"
A100 = DATA / "hta_a100_control.json.gz"
V100 = DATA / "hta_v100_test.json.gz"

pytestmark = pytest.mark.skipif(not (SAMPLE / "runs.json").is_file(), reason="sample_traces/cpu/runs.json is missing")


# ---------------------------------------------------------------- helpers


def manifest() -> dict:
    return json.loads((SAMPLE / "runs.json").read_text())


def cpu(label: str) -> str:
    """How the app shows a CPU sample's label: the H200 collection has runs of the same variants,
    so each of these labels carries its collection's name."""
    return f"{label} [cpu]"


def sample_runs() -> dict[str, Path]:
    """label (as the app shows it) -> trace path for every run of the bundled CPU collection, as
    the manifest lists them."""
    return {
        cpu(f"{r['variant']} (compiled)" if r["compiled"] else r["variant"]): SAMPLE / r["trace"]
        for r in manifest()["runs"]
    }


def sample_id(label: str) -> str:
    """The run id a link uses for a run of the bundled collection (its label, with or without [cpu])."""
    label = label.removesuffix(" [cpu]")
    entry = next(
        r for r in manifest()["runs"] if (f"{r['variant']} (compiled)" if r["compiled"] else r["variant"]) == label
    )
    return f"{manifest()['collection']}/{entry['trace'].removesuffix('.json.gz')}"


def cpu_link() -> dict:
    """URL parameters that select the whole CPU collection (the app opens on the GPU one)."""
    return {"run": [sample_id(label) for label in sample_runs()]}


def gpu_manifest() -> dict:
    return json.loads((GPU_SAMPLE / "runs.json").read_text())


def gpu_runs() -> dict[str, Path]:
    """label -> trace path for every run of the bundled GPU collection, as its manifest lists them."""
    return {r["variant"]: GPU_SAMPLE / r["trace"] for r in gpu_manifest()["runs"]}


def gpu_ids() -> list[str]:
    return [f"{gpu_manifest()['collection']}/{r['trace'].removesuffix('.json.gz')}" for r in gpu_manifest()["runs"]]


def literal(body: str) -> str:
    """What a reader sees of a Markdown body: CommonMark's backslash escapes of ASCII punctuation
    removed (the rule from the CommonMark spec, written here independently of the app)."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", body)


@pytest.fixture
def app(monkeypatch):
    """open(tab, params, traces) -> a finished AppTest run of the dashboard."""

    def open_app(
        tab: str = "Overview", params: dict | None = None, traces: list[Path] = (), allow_tab_errors: bool = False
    ) -> AppTest:
        if traces:
            monkeypatch.setenv(ENV_TRACES, os.pathsep.join(str(p) for p in traces))
        else:
            monkeypatch.delenv(ENV_TRACES, raising=False)
        at = AppTest.from_file(str(APP), default_timeout=120)
        if tab != "Overview":
            at.query_params["tab"] = tab
        for key, value in (params or {}).items():
            at.query_params[key] = value
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        failed = [t for t in texts(at.main.error) if " tab could not be drawn" in t]
        assert not failed or allow_tab_errors, failed
        return at

    return open_app


def table(at: AppTest, key: str):
    """The pandas frame a keyed table shows (the engine's values, before display formatting)."""
    return at.get_by_key(key).dataframe[0].value


def figure(at: AppTest, key: str) -> dict:
    """The plotly figure (as JSON) inside a keyed chart container."""
    block = at.get_by_key(key)
    (chart,) = list(block.children.values())
    return json.loads(chart.proto.spec)


def timeline_drawn(at: AppTest, key: str = "chart_timeline") -> dict:
    """What the Timeline diff tab's canvas component was given (charts.timeline_data)."""
    block = at.get_by_key(key)
    (chart,) = list(block.children.values())
    assert chart.type == "bidi_component"
    return json.loads(chart.proto.json)


def bar_values(fig: dict) -> dict:
    """run -> value of every bar of a one-value-per-run bar chart, upright (x: runs) or flat (y: runs)."""
    out = {}
    for bar in (t for t in fig["data"] if t["type"] == "bar"):
        runs, values = (bar["y"], bar["x"]) if bar.get("orientation") == "h" else (bar["x"], bar["y"])
        out.update(zip(runs, values))
    return out


def close(a: float | None, b: float | None, rel: float = 1e-9) -> bool:
    if a is None or b is None or (isinstance(a, float) and math.isnan(a)) or (isinstance(b, float) and math.isnan(b)):
        return (a is None or a != a) and (b is None or b != b)
    return math.isclose(float(a), float(b), rel_tol=rel, abs_tol=1e-12)


def as_list(value) -> list[str]:
    """A query parameter as a list (AppTest gives a single value as a string)."""
    return [value] if isinstance(value, str) else list(value)


def texts(elements) -> list[str]:
    """The text a reader sees in each Markdown element (escapes removed)."""
    return [literal(e.value) for e in elements]


# ---------------------------------------------------------------- runs and overview


def h200_ids() -> list[str]:
    """The run ids of the bundled H200 collection, in its manifest's order."""
    manifest = json.loads((H200_SAMPLE / "runs.json").read_text())
    return [f"{manifest['collection']}/{r['trace'].removesuffix('.json.gz')}" for r in manifest["runs"]]


def rank_run_ids() -> list[str]:
    """The runs of several ranks among the bundled collections: one per collection whose manifest's
    entries name a rank (sample_traces/ranks-cpu), its id '<collection>/ranks'."""
    manifests = [json.loads(p.read_text()) for p in sorted((REPO / "sample_traces").glob("*/runs.json"))]
    return [f"{m['collection']}/ranks" for m in manifests if any("rank" in r for r in m.get("runs", []))]


def test_the_app_opens_on_our_h200_collection_alone_and_the_others_are_one_click_away(app):
    at = app()
    shown = table(at, "tbl_overview")
    # the bundled GPU collection our collectors wrote (parity, shapes), never mixed with CPU runs
    # it opens on the article's path, eager (issue item 6); the compiled and CUDA-graph runs are a switch away
    eager = [i for i in h200_ids() if "." not in i.removeprefix("h200/")]
    assert at.multiselect[0].value == eager and len(h200_ids()) == 21 and len(eager) == 7
    assert at.selectbox(key="baseline").value == "h200/naive"
    assert set(shown["work_unit"]) == {"kernel"}
    assert set(shown["backends"]) == {"eager", "cudnn", "math", "flash", "efficient"}
    at.toggle(key="with_modes").set_value(True).run()
    assert sorted(at.multiselect[0].value) == sorted(h200_ids())
    assert "inductor" in set(table(at, "tbl_overview")["backends"])
    assert (shown["hidden_copies_per_step"] > 0).any()  # and the article's hidden copy
    # sample_traces/ranks-cpu's four rank files are one run of four ranks, on offer but not selected first
    assert rank_run_ids() == ["ranks-cpu/ranks"] and "ranks-cpu (4 ranks)" in at.multiselect[0].options
    assert len(at.multiselect[0].options) == len(gpu_runs()) + len(sample_runs()) + len(h200_ids()) + 1
    at.button(key="pick_cpu").click().run()
    assert table(at, "tbl_overview")["run"].tolist() == list(sample_runs())
    assert at.selectbox(key="baseline").value == sample_id(next(iter(sample_runs())))
    assert at.query_params["run"] == [sample_id(label) for label in sample_runs()]
    at.button(key="pick_gpu-public").click().run()
    assert table(at, "tbl_overview")["run"].tolist() == list(gpu_runs())
    assert at.selectbox(key="baseline").value == gpu_ids()[0]


def test_overview_numbers_equal_the_engines(trace_of, app):
    at = app(params=cpu_link())
    shown = table(at, "tbl_overview").set_index("run")
    traces = {label: trace_of(path) for label, path in sample_runs().items()}
    base = step_time(traces[cpu("naive")]).median_us
    for label, trace in traces.items():
        row = shown.loc[label]
        steps = per_step(trace)
        found = copies(trace)
        st = step_time(trace)
        assert row["steps"] == trace.steps.height
        assert close(row["median_step_us"], st.median_us)
        assert st.source == "step span"
        assert close(row["work_per_step"], steps["work"].median())
        assert row["work_unit"] == "leaf cpu_op"
        assert close(row["copies_per_step"], found.height / trace.steps.height)
        assert close(row["hidden_copies_per_step"], found["hidden"].sum() / trace.steps.height)
        assert row["backends"] == ", ".join(detect_backends(trace).backends)
        assert close(row["speedup"], base / st.median_us)
        assert bool(row["parity_passed"]) == trace.collector["parity"]["passed"]


def test_overview_makes_the_naive_hidden_copy_an_alarm(app):
    at = app(params=cpu_link())
    alarms = [t for t in texts(at.get_by_key("findings").error) if t.startswith(f"**{cpu('naive')}: hidden copy")]
    assert len(alarms) == 1
    assert "aten::masked_fill > aten::clone > aten::copy_" in alarms[0]
    shape = manifest()["shape"]
    scores = shape["batch"] * shape["heads"] * shape["seq"] * shape["seq"] * 4  # fp32 scores tensor
    assert f"{scores / 1e6:.1f} MB per step" in alarms[0]
    assert not any(t.startswith(f"**{cpu('naive_inplace')}:") for t in texts(at.error))


def test_overview_on_a_real_gpu_trace_counts_kernels(trace_of, app):
    at = app(params={"run": ["file/" + H100.name]}, traces=[H100])
    row = table(at, "tbl_overview").iloc[0]
    trace = trace_of(H100)
    steps = per_step(trace)
    assert row["run"] == "tracelens_h100_bert_sdpa_flash"
    assert row["work_unit"] == "kernel"
    assert close(row["work_per_step"], steps["work"].median())
    assert close(row["median_step_us"], step_time(trace).median_us)
    assert step_time(trace).source == "device busy"
    assert "NVIDIA H100" in row["device_label"]
    assert row["backends"] == "flash"
    assert row["parity_passed"] is None or pd.isna(row["parity_passed"])  # no collector metadata: an empty cell...
    assert at.get_by_key("tbl_overview").dataframe[0].proto.placeholder == "—"  # ...drawn as a dash, not "None"


def test_the_gpu_sample_collection_is_what_its_manifest_says(app):
    at = app(params={"run": gpu_ids()})
    shown = table(at, "tbl_overview").set_index("run")
    for label, path in gpu_runs().items():
        doc = oracle.raw(path)
        row = shown.loc[label]
        assert row["steps"] == len(oracle.step_spans(doc)) or (row["steps"] == 1 and not oracle.step_spans(doc))
        props = doc.get("deviceProperties") or [{}]
        if props[0].get("name"):
            assert props[0]["name"] in row["device_label"]
    bert = oracle.complete(oracle.raw(gpu_runs()["h100-bert-flash"]))
    flash = [e["name"] for e in bert if e.get("cat") == "kernel" and "flash_fwd_kernel" in e["name"]]
    assert len(flash) == 4 and shown.loc["h100-bert-flash", "backends"] == "flash"
    readme = (GPU_SAMPLE / "README.md").read_text()
    for entry in gpu_manifest()["runs"]:
        assert entry["trace"] in readme and entry["source"] in readme and entry["licence"] in readme
    assert sum(p.stat().st_size for p in GPU_SAMPLE.iterdir()) < 1_000_000  # the repository stays small


def test_cpu_and_gpu_runs_are_separate_groups_each_against_its_own_baseline(trace_of, app):
    chosen = [sample_id("naive"), gpu_ids()[0], sample_id("sdpa"), gpu_ids()[1]]
    at = app(params={"run": chosen, "baseline": sample_id("naive")})
    why = texts(at.get_by_key("device_groups").info)
    assert len(why) == 1 and "measured differently" in why[0] and "naive" in why[0]
    cpu_rows, gpu = table(at, "tbl_overview_cpu").set_index("run"), table(at, "tbl_overview_gpu").set_index("run")
    assert list(cpu_rows.index) == [cpu("naive"), cpu("sdpa")] and list(gpu.index) == list(gpu_runs())[:2]
    naive, sdpa = trace_of(sample_runs()[cpu("naive")]), trace_of(sample_runs()[cpu("sdpa")])
    bert, qwen = (trace_of(p) for p in list(gpu_runs().values())[:2])
    # each group against its own baseline: naive for the CPU runs, the first GPU run for the GPU ones
    assert close(cpu_rows.loc[cpu("sdpa"), "speedup"], step_time(naive).median_us / step_time(sdpa).median_us)
    # BERT and Qwen chat do different work (their SDPA ops' Input Dims differ in the JSON): no speedup between them
    dims = [
        {
            json.dumps(e["args"]["Input Dims"][0])
            for e in oracle.complete(oracle.raw(p))
            if e.get("name") == "aten::scaled_dot_product_attention"
        }
        for p in list(gpu_runs().values())[:2]
    ]
    assert dims[0] and dims[1] and not dims[0] & dims[1]
    assert math.isnan(gpu.loc["h100-qwen-chat-flash", "speedup"]) and gpu.loc[
        "h100-qwen-chat-flash", "relation"
    ].startswith("different workload")
    assert step_time(bert).median_us > 0 and step_time(qwen).median_us > 0
    assert close(gpu.loc["h100-bert-flash", "speedup"], 1.0)
    notes = texts(at.get_by_key("findings").warning)
    more = [t for t in notes if "more copies" in t]
    # a 'more copies' note only ever names a baseline of the run's own group
    assert all("'naive'" not in t for t in more if t.startswith("h100")) and all(
        "h100" not in t.split("baseline")[-1] for t in more if t.startswith("sdpa")
    )
    for tab, keys in (
        ("Speedups", ("tbl_speed_cpu", "tbl_speed_gpu")),
        ("Kernels", ("chart_kernels_count_cpu", "chart_kernels_count_gpu")),
    ):
        at = app(tab, params={"run": chosen, "baseline": sample_id("naive")})
        for key in keys:
            assert at.get_by_key(key) is not None
    speed = table(
        at := app("Speedups", params={"run": chosen, "baseline": sample_id("naive")}), "tbl_speed_gpu"
    ).set_index("run")
    assert math.isnan(speed.loc["h100-qwen-chat-flash", "speedup"])
    fig = figure(at, "chart_speedup_gpu")["data"][0]
    assert fig["y"] == list(gpu_runs())[:2] and fig["text"] == ["baseline", "different workload: no speedup"]


def test_a_link_restores_runs_baseline_and_tab(app):
    chosen = [sample_id("sdpa"), sample_id("naive"), sample_id("naive_inplace")]
    at = app("Kernels", params={"run": chosen, "baseline": sample_id("naive")})
    assert at.multiselect[0].value == chosen
    assert at.selectbox(key="baseline").value == sample_id("naive")
    assert at.get_by_key("tbl_kernels") is not None  # the Kernels tab is the one drawn
    with pytest.raises(KeyError):
        at.get_by_key("tbl_overview")
    assert at.query_params["run"] == chosen
    assert at.query_params["baseline"] == sample_id("naive")


def test_a_link_naming_a_run_that_is_not_loaded_says_so(app):
    at = app(params={"run": ["upload/theirs.json.gz", sample_id("sdpa")]})
    assert at.multiselect[0].value == [sample_id("sdpa")]
    assert any("upload/theirs.json.gz" in t for t in texts(at.sidebar.info))


def test_a_bad_upload_shows_its_error_and_the_good_one_joins_the_comparison(app):
    at = app()
    before, baseline = at.multiselect[0].value, at.selectbox(key="baseline").value
    send(
        at,
        [
            ("broken.json.gz", b"\x1f\x8b this is not gzip", "application/gzip"),
            (H100.name, H100.read_bytes(), "application/gzip"),
        ],
    )
    assert not at.exception
    errors = texts(at.sidebar.error)
    assert len(errors) == 1 and "broken.json.gz" in errors[0]
    assert at.multiselect[0].value == before + ["upload/" + H100.name]  # the runs on screen stay, the upload joins
    assert at.selectbox(key="baseline").value == baseline == "h200/naive"
    assert table(at, "tbl_overview")["run"].tolist()[-1] == "tracelens_h100_bert_sdpa_flash"
    assert {"tracelens_h100_bert_sdpa_flash", "h100-bert-flash", cpu("naive")} <= set(
        at.multiselect[0].options
    )  # all on offer


def test_uploads_join_the_comparison_the_baseline_stays_and_into_an_empty_one_the_first_is_the_baseline(trace_of, app):
    first, second = DATA / "tracelens_h100_qwen_chat_sdpa_flash.json.gz", A100
    at = app(params={**cpu_link(), "baseline": sample_id("sdpa")})
    chosen = at.multiselect[0].value
    assert len(chosen) == len(sample_runs()) and at.selectbox(key="baseline").value == sample_id("sdpa")
    send(at, [(p.name, p.read_bytes(), "application/gzip") for p in (first, second)])
    assert not at.exception
    ids = ["upload/" + first.name, "upload/" + second.name]
    assert at.multiselect[0].value == chosen + ids  # the review stays; the uploads join it, in upload order
    assert at.selectbox(key="baseline").value == sample_id("sdpa")  # the user's baseline stays
    assert as_list(at.query_params["run"]) == chosen + ids and at.query_params["baseline"] == sample_id("sdpa")
    # GPU uploads beside CPU runs: their own group, against the first GPU run
    gpu = table(at, "tbl_overview_gpu").set_index("run")
    assert list(gpu.index) == [first.name.removesuffix(".json.gz"), second.name.removesuffix(".json.gz")]
    # into an empty comparison, the first upload is the baseline
    at = app()
    at.multiselect[0].set_value([]).run()
    send(at, [(p.name, p.read_bytes(), "application/gzip") for p in (first, second)])
    assert at.multiselect[0].value == ids and at.selectbox(key="baseline").value == ids[0]
    # a Qwen chat server on an H100 against HTA's recommendation model on an A100 (deviceProperties):
    # not one workload, so no speedup, and the tab says why before anything else
    names = [oracle.raw(p)["deviceProperties"][0]["name"] for p in (first, second)]
    assert names[0] != names[1]
    shown = table(at, "tbl_overview").set_index("run")
    assert math.isnan(shown.iloc[1]["speedup"]) and shown.iloc[1]["relation"] == "different workload: no speedup"
    said = texts(at.get_by_key("relation-overview").warning)  # (one per tab: views/tab_set.keyed)
    assert len(said) == 1 and "Not the same work" in said[0] and "no speedup is set" in said[0]
    assert second.name.removesuffix(".json.gz") in said[0]
    findings = texts(at.get_by_key("findings").warning) if at.get_by_key("findings").warning else []
    assert not any("different workload" in f for f in findings)  # said once, first
    at.button(key="pick_cpu").click().run()  # the samples, one click away
    assert at.multiselect[0].value == [sample_id(label) for label in sample_runs()]


def test_a_runs_json_that_is_not_an_object_is_an_error_naming_it_and_the_other_runs_stay(app, tmp_path):
    folder = tmp_path / "listed"
    folder.mkdir()
    (folder / "runs.json").write_text(json.dumps([{"trace": "naive.json.gz"}]))  # valid JSON, but a list
    at = app(params={"run": [sample_id("naive"), "file/" + H100.name]}, traces=[folder, H100])
    errors = texts(at.sidebar.error)
    assert len(errors) == 1 and str(folder / "runs.json") in errors[0] and "a list" in errors[0]
    assert table(at, "tbl_overview_cpu")["run"].tolist() == [cpu("naive")]  # a CPU-only and a GPU run: two groups
    assert table(at, "tbl_overview_gpu")["run"].tolist() == ["tracelens_h100_bert_sdpa_flash"]
    assert (
        len(at.multiselect[0].options)
        == len(sample_runs()) + len(gpu_runs()) + len(h200_ids()) + len(rank_run_ids()) + 1
    )  # every bundled run, and the good extra file


def test_an_extra_path_that_does_not_exist_is_an_error_naming_it(app, tmp_path):
    gone = tmp_path / "nowhere" / "trace.json.gz"
    at = app(params={"run": ["file/" + H100.name]}, traces=[gone, H100])
    errors = texts(at.sidebar.error)
    assert errors == [f"{gone}: no such file or folder"]
    assert table(at, "tbl_overview")["run"].tolist() == ["tracelens_h100_bert_sdpa_flash"]
    assert (
        len(at.multiselect[0].options)
        == len(sample_runs()) + len(gpu_runs()) + len(h200_ids()) + len(rank_run_ids()) + 1
    )


def test_a_manifest_run_whose_trace_is_missing_is_an_error_and_similar_names_keep_their_own_ids(app, tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "a.json.gz").write_bytes(H100.read_bytes())
    (folder / "a.json").write_bytes(gzip.decompress(H100.read_bytes()))
    (folder / "runs.json").write_text(
        json.dumps(
            {
                "collection": "mine",
                "runs": [
                    {"variant": "gz", "trace": "a.json.gz"},
                    {"variant": "plain", "trace": "a.json"},
                    {"variant": "gone", "trace": "gone.json.gz"},
                ],
            }
        )
    )
    at = app(params={"run": ["mine/a", "mine/a.json"]}, traces=[folder])
    errors = texts(at.sidebar.error)
    assert len(errors) == 1 and errors[0].startswith("gone.json.gz") and str(folder / "runs.json") in errors[0]
    assert at.multiselect[0].value == ["mine/a", "mine/a.json"]  # two runs, two ids
    assert table(at, "tbl_overview")["run"].tolist() == ["gz", "plain"]


def test_a_tab_the_engine_fails_on_shows_one_error_and_the_rest_of_the_app_stays(app, monkeypatch):
    from dashboard.engine.compare import review

    def broken(runs):
        raise ValueError("no backend table today\nsecond line")

    monkeypatch.setattr(review, "backend_table", broken)
    at = app("Backends", allow_tab_errors=True)
    errors = [t for t in texts(at.main.error) if " tab could not be drawn" in t]
    assert len(errors) == 1
    assert (
        errors[0].startswith("The Backends tab could not be drawn")
        and "ValueError: no backend table today" in errors[0]
    )
    assert "second line" not in errors[0] and "Traceback" not in errors[0]
    assert at.multiselect[0].value == [
        i for i in h200_ids() if "." not in i.removeprefix("h200/")
    ]  # the sidebar is intact
    at = app()  # and the other tabs draw as before
    assert len(table(at, "tbl_overview")) == 7  # the article's path, eager (issue item 6)


def test_discovery_names_every_source_it_cannot_open_and_opens_a_file_named_twice_once(tmp_path):
    from dashboard.catalog import discover

    cut, odd, empty = tmp_path / "cut", tmp_path / "odd", tmp_path / "empty"
    for folder in (cut, odd, empty):
        folder.mkdir()
    (cut / "runs.json").write_text('{"runs": [')
    (odd / "runs.json").write_text('{"runs": {"trace": "a.json"}}')
    collections, loose, failures = discover(root=tmp_path / "no-bundled", extra=[cut, odd, empty, H100, H100])
    assert collections == [] and [s.path for s in loose] == [H100]
    messages = [f.message for f in failures]
    assert len(messages) == 3
    assert messages[0].startswith(f"{cut / 'runs.json'}: ")
    assert messages[1] == f"{odd / 'runs.json'}: 'runs' should be a list, found an object"
    assert messages[2].startswith(f"{empty}: no trace files")


def test_labels_default_to_the_variant_and_can_be_edited(app):
    at = app(params=cpu_link())
    row = 0  # the rename table lists every loaded run: the CPU collection's first
    at.session_state["label_editor_0"] = {
        "edited_rows": {row: {"label": "masked_fill out of place"}},
        "added_rows": [],
        "deleted_rows": [],
    }
    at.run()
    assert not at.exception
    runs = table(at, "tbl_overview")["run"].tolist()
    assert runs[0] == "masked_fill out of place"
    assert runs[1:] == list(sample_runs())[1:]
    assert at.query_params["run"][0] == sample_id("naive")  # links keep the stable id, not the label
    assert as_list(at.query_params["label"]) == [
        f"{sample_id('naive')}=masked_fill out of place"
    ]  # and carry the label


def test_a_renamed_run_keeps_its_name_after_a_reload_and_in_a_shared_link(app):
    at = app(params=cpu_link())
    row = 0
    at.session_state["label_editor_0"] = {
        "edited_rows": {row: {"label": "scores = q·kᵀ *clone*"}},
        "added_rows": [],
        "deleted_rows": [],
    }
    at.run()
    link = {"run": at.query_params["run"], "baseline": at.query_params["baseline"], "label": at.query_params["label"]}
    reloaded = app(params=link)  # a new session from the same URL: a reload, or a colleague's browser
    assert table(reloaded, "tbl_overview")["run"].tolist()[0] == "scores = q·kᵀ *clone*"
    assert as_list(reloaded.query_params["label"]) == as_list(link["label"])
    assert literal(reloaded.selectbox(key="baseline").format_func(sample_id("naive"))) == "scores = q·kᵀ *clone*"


def test_a_link_label_for_an_upload_waits_for_the_upload(app):
    ident = "upload/" + H100.name
    at = app(params={"run": [ident], "baseline": ident, "label": [f"{ident}=their H100 run"]})
    assert any(ident in t for t in texts(at.sidebar.info))
    send(at, [(H100.name, H100.read_bytes(), "application/gzip")])
    assert table(at, "tbl_overview")["run"].tolist() == ["their H100 run"]
    assert as_list(at.query_params["label"]) == [f"{ident}=their H100 run"]


def test_a_run_keeps_its_colour_whatever_else_is_selected(app):
    ids = [sample_id("naive"), sample_id("sdpa"), sample_id("sdpa-math")]
    colours = []
    for chosen in (ids, ids[1:], [ids[2], ids[0]]):  # the roofline's markers: bars have one colour
        at = app("Speedups", params={"run": chosen})
        points = [t for t in figure(at, "chart_roofline")["data"] if t.get("legendgroup")]
        colours.append({t["legendgroup"]: t["marker"]["color"] for t in points})
    labels = [cpu("naive"), cpu("sdpa"), cpu("sdpa-math")]
    for label in labels:
        seen = {c[label] for c in colours if label in c}
        assert len(seen) == 1, (label, colours)
    assert len({colours[0][label] for label in labels}) == 3


def test_switching_tabs_never_parses_again(app):
    app()
    parses = trace_cache().parses
    for tab in ("Kernels", "Copies", "Timeline diff", "Speedups", "Backends", "Overview"):
        app(tab)
    assert trace_cache().parses == parses


# ---------------------------------------------------------------- kernels


def test_kernels_tab_shows_counts_and_times_per_family_and_every_kernel(trace_of, app):
    at = app("Kernels", params=cpu_link())
    traces = {label: trace_of(path) for label, path in sample_runs().items()}
    # ten runs: one flat bar per run, stacked by family (a trace per family and facet), no colour per run
    seen = 0
    for key, column in (("chart_kernels_count", "count"), ("chart_kernels_time", "total_ns")):
        for bar in (t for t in figure(at, key)["data"] if t["type"] == "bar"):
            family = bar["name"]
            assert bar["orientation"] == "h"
            for label, value in zip(bar["y"], bar["x"]):
                mine = family_per_step(traces[label]).filter(pl.col("family") == family)
                want = mine[column].sum() / traces[label].steps.height / (1000.0 if column == "total_ns" else 1.0)
                assert close(value, want), (key, label, family)
                seen += 1
    assert seen >= 2 * len(traces)
    shown = table(at, "tbl_kernels")
    for label, trace in traces.items():
        expect = kernel_table(trace)
        got = shown[shown["run"] == label]
        assert got["name"].tolist() == expect["name"].to_list()
        assert got["count"].tolist() == expect["count"].to_list()
        assert all(close(a, b / 1000.0) for a, b in zip(got["total_us"], expect["total_ns"]))


def test_kernels_tab_lists_the_difference_to_the_baseline_ranked_by_time(trace_of, app):
    at = app(
        "Kernels", params={"run": [sample_id("naive"), sample_id("naive_inplace")], "baseline": sample_id("naive")}
    )
    # by default template instances fold into their base name (the toggle is on)
    assert at.toggle(key="kd_base").value is True
    expect = kernel_diff(
        trace_of(sample_runs()[cpu("naive")]), trace_of(sample_runs()[cpu("naive_inplace")]), by="base"
    )
    changed = expect.filter(pl.col("change") != "same")
    shown = table(at, "tbl_kernels_delta")
    assert list(zip(shown["name"], shown["change"])) == list(
        zip(changed["name"], changed["change"])
    )  # in the engine's order
    deltas = shown["delta_us_per_step"].abs().tolist()
    assert deltas == sorted(deltas, reverse=True)  # largest effect on step time first
    assert all(close(a, b / 1000.0) for a, b in zip(shown["delta_us_per_step"], changed["delta_ns_per_step"]))
    # the out-of-place masked_fill's copy is gone in the in-place variant
    copy_row = shown[shown["name"] == "aten::copy_"].iloc[0]
    assert copy_row["delta_per_step"] < 0 and copy_row["delta_us_per_step"] < 0


def test_the_kernel_change_summary_counts_each_kind_of_change_per_run(trace_of, app):
    base, others = cpu("naive"), [cpu("naive_inplace"), cpu("sdpa")]
    at = app("Kernels", params={"run": [sample_id(base)] + [sample_id(o) for o in others], "baseline": sample_id(base)})
    shown = table(at, "tbl_kernels_change_summary").set_index("run")
    assert shown.index.tolist() == others
    for label in others:
        expect = kernel_diff(trace_of(sample_runs()[base]), trace_of(sample_runs()[label]), by="base")
        counted: dict[str, int] = {}
        for change in expect["change"].to_list():
            if change != "same":
                counted[change] = counted.get(change, 0) + 1
        got = {k: int(v) for k, v in shown.loc[label].items() if v}
        assert got == counted, label


def _launched_in(doc: dict, step: str) -> list[dict]:
    """json oracle: the step's GPU events (kernel, memcpy, memset) whose launch call lies in its CPU span."""
    events = oracle.complete(doc)
    launches = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") in oracle.LAUNCH_CATS and "correlation" in e.get("args", {})
    }
    ((start, end),) = [(a, b) for name, a, b in oracle.step_spans(doc) if name == step]
    return [
        e
        for e in events
        if e.get("cat") in oracle.GPU_CATS
        and (call := launches.get(e.get("args", {}).get("correlation"))) is not None
        and start <= call["ts"] < end
    ]


def _ops_in(doc: dict, step: str) -> dict[str, int]:
    """json oracle: names of CPU ops, annotations and runtime calls starting in the step's span, by count."""
    ((start, end),) = [(a, b) for name, a, b in oracle.step_spans(doc) if name == step]
    names: dict[str, int] = {}
    for e in oracle.complete(doc):
        if e.get("cat") in ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver") and not e["name"].startswith(
            "ProfilerStep#"
        ):
            if start <= e["ts"] < end:
                names[e["name"]] = names.get(e["name"], 0) + 1
    return names


def test_kernels_tab_on_the_hta_pair_explains_the_change_by_time_for_the_steps_picked(app):
    ids = ["file/" + A100.name, "file/" + V100.name]
    step = "ProfilerStep#1009"
    at = app(
        "Kernels",
        params={"run": ids, "names": "full", "kstep": [f"{ids[0]}=1009", f"{ids[1]}=1009"]},
        traces=[A100, V100],
    )
    assert at.toggle(key="kd_base").value is False  # full names, as the link asked
    assert (
        at.selectbox(key="kd_step").value != "all"
    )  # one step picker for every run (issue item 7), on the linked step
    assert any("step 1009, " in t and t.endswith("step 1009.") for t in texts(at.caption))
    assert (
        sorted(as_list(at.query_params["kstep"])) == sorted([f"{ids[0]}=1009", f"{ids[1]}=1009"])
        and at.query_params["names"] == "full"
    )
    cdoc, tdoc = oracle.raw(A100), oracle.raw(V100)
    before: dict[str, float] = {}
    after: dict[str, float] = {}
    for doc, into in ((cdoc, before), (tdoc, after)):
        for e in _launched_in(doc, step):
            into[e["name"]] = into.get(e["name"], 0.0) + e.get("dur", 0)  # µs in the one step
    want = sorted(((after.get(n, 0) - before.get(n, 0), n) for n in set(before) | set(after)), key=lambda d: -abs(d[0]))
    shown = table(at, "tbl_kernels_delta")
    assert shown["name"].head(8).tolist() == [n for _, n in want[:8]]
    assert all(close(a, d, rel=1e-6) for a, (d, _) in zip(shown["delta_us_per_step"].head(8), want))
    top3 = shown["name"].head(3).tolist()
    assert any(n.startswith("ncclKernel_SendRecv") for n in top3) and any(
        n.startswith("ncclKernel_AllReduce") for n in top3
    )
    both = ("base_us_per_step", "other_us_per_step")
    for _, row in shown.head(8).iterrows():
        assert close(row[both[0]], before.get(row["name"], 0), rel=1e-6) and close(
            row[both[1]], after.get(row["name"], 0), rel=1e-6
        )
    line = texts(at.get_by_key("kernels_explained").markdown)[0]
    top12, total = sum(d for d, _ in want[:12]), sum(after.values()) - sum(before.values())
    assert line.startswith("Step 1009 against the baseline's step 1009: the top 12 changed rows account for")
    assert f"**{top12 / 1000:+,.2f} ms** of the **{total / 1000:+,.2f} ms** change" in line
    # the CPU side: what only one run has
    ops_before, ops_after = _ops_in(cdoc, step), _ops_in(tdoc, step)
    ops = table(at, "tbl_ops_delta")
    assert set(ops[ops["change"] == "added"]["name"]) == set(ops_after) - set(ops_before)
    assert set(ops[ops["change"] == "removed"]["name"]) == set(ops_before) - set(ops_after)
    assert {"CompiledFunction", "cudaGraphLaunch"} <= set(ops[ops["change"] == "added"]["name"])
    # the readings, above the tables
    (readings,) = texts(at.get_by_key("kernels_readings").info)
    gone = len(set(ops_before) - set(ops_after))
    assert (
        f"compiled: CompiledFunction, CompiledFunctionBackward appear (torch.compile); {gone} op names of the baseline are gone"
        in readings
    )
    launches = [sum(n for name, n in o.items() if name == "cudaLaunchKernel") for o in (ops_before, ops_after)]
    graphs = ops_after.get("cudaGraphLaunch", 0)
    assert (
        f"CUDA graphs: {graphs:.4g} graph launch{' per step replays' if graphs == 1 else 'es per step replay'} kernels; "
        f"kernel launches fell from {launches[0]:,} to {launches[1]:,} per step" in readings
    )


def test_kernels_tab_folds_template_instances_by_default_and_shows_full_names_one_click_away(app):
    ids = ["file/" + A100.name, "file/" + V100.name]
    at = app("Kernels", params={"run": ids}, traces=[A100, V100])
    prefix = "void split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_cta_per_row_1<"
    folded = table(at, "tbl_kernels_delta")
    assert not folded["name"].str.startswith(prefix).any()  # one base-name row, not an added and a removed one
    assert (
        folded["name"] == "split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_cta_per_row_1"
    ).sum() == 1
    assert "names" not in at.query_params and "kstep" not in at.query_params  # the defaults leave the link clean
    at.toggle(key="kd_base").set_value(False).run()
    full = table(at, "tbl_kernels_delta")
    changes = sorted(full[full["name"].str.startswith(prefix)]["change"])
    assert changes == ["added", "removed"]  # one template instance in each run
    assert at.query_params["names"] == "full"


# ---------------------------------------------------------------- copies


def test_copies_tab_makes_the_naive_masked_fill_copy_stand_out(trace_of, app):
    at = app("Copies", params=cpu_link())
    alarms = texts(at.get_by_key("copies_alarms").error)
    assert len(alarms) == 1 and alarms[0].startswith(f"**{cpu('naive')}: hidden cpu copy**")
    assert "aten::masked_fill > aten::clone > aten::copy_" in alarms[0]
    every = table(at, "tbl_copies")
    expect = copies(trace_of(sample_runs()[cpu("naive")]))
    naive = every[every["run"] == cpu("naive")]
    assert len(naive) == expect.height == trace_of(sample_runs()[cpu("naive")]).steps.height  # one per step
    shape = manifest()["shape"]
    assert set(naive["bytes"]) == {shape["batch"] * shape["heads"] * shape["seq"] ** 2 * 4}  # the fp32 scores tensor
    assert naive["hidden"].all()
    assert set(naive["chain"]) == {"aten::masked_fill > aten::clone > aten::copy_"}
    assert set(every["run"]) == {cpu("naive")}  # no other variant of the collection copies a tensor


def test_copies_tab_on_the_gpu_pair_shows_every_memcpy(trace_of, app):
    at = app("Copies", params={"run": ["file/" + A100.name, "file/" + V100.name]}, traces=[A100, V100])
    every = table(at, "tbl_copies")
    for path in (A100, V100):
        expect = copies(trace_of(path))
        got = every[every["run"] == path.name.removesuffix(".json.gz")]
        assert len(got) == expect.height
        assert got["kind"].value_counts().to_dict() == dict(expect.group_by("kind").len().iter_rows())


def test_a_long_table_drops_its_row_colours_and_says_so(trace_of, app, monkeypatch):
    """Row colours (a pandas Styler) cost seconds on thousands of rows: a table over
    HIGHLIGHT_MAX_ROWS keeps every row, without colours, and says why; one at the cap keeps them."""
    from dashboard.views import tables as tables_view

    expect = copies(trace_of(A100)).height  # 468 memcpys
    hidden_rows = int(copies(trace_of(A100))["hidden"].sum())
    for cap, coloured in ((expect, True), (expect - 1, False)):
        monkeypatch.setattr(tables_view, "HIGHLIGHT_MAX_ROWS", cap)
        at = app("Copies", traces=[A100])
        block = at.get_by_key("tbl_copies")
        assert len(block.dataframe[0].value) == expect
        styles = block.dataframe[0].proto.arrow_data.styler.styles
        captions = [c.value for c in block.caption]
        if coloured:
            assert captions == [] and hidden_rows > 0 and styles != ""
        else:
            assert styles == "" and captions == [
                f"{expect:,} rows: rows are coloured in tables of up to {cap:,} rows only "
                "(a pandas Styler takes seconds per few thousand rows); the columns still say everything."
            ]


def test_a_kernel_diff_row_is_coloured_on_its_change_and_name_cells_only(trace_of, app):
    """Each coloured cell is a selector the browser's grid searches per drawn cell: the diff colours
    the change and the kernel's name (columns 'change' and 'name' of the data sent), every changed
    row, nothing else."""
    import re

    at = app(
        "Kernels", params={"run": [sample_id("naive"), sample_id("naive_inplace")], "baseline": sample_id("naive")}
    )
    frame = table(at, "tbl_kernels_delta")
    styles = at.get_by_key("tbl_kernels_delta").dataframe[0].proto.arrow_data.styler.styles
    cells = {(int(r), int(c)) for r, c in re.findall(r"_row(\d+)_col(\d+)", styles)}
    painted = {list(frame.columns).index("change"), list(frame.columns).index("name")}
    assert cells == {(r, c) for r in range(len(frame)) for c in painted}  # every row changed (only changes shown)


# ---------------------------------------------------------------- timeline diff


def test_timeline_tab_draws_both_steps_and_diffs_their_kernel_sequences(trace_of, app):
    a_path, b_path = sample_runs()[cpu("naive")], sample_runs()[cpu("sdpa")]
    a, b = trace_of(a_path), trace_of(b_path)
    step_a, step_b = a.steps["step"][1], b.steps["step"][2]
    at = app(
        "Timeline diff",
        params={
            "run": [sample_id("naive"), sample_id("sdpa")],
            "a": sample_id("naive"),
            "b": sample_id("sdpa"),
            "step_a": str(step_a),
            "step_b": str(step_b),
        },
    )
    drawn = timeline_drawn(at)
    titles = [panel["title"] for panel in drawn["panels"]]
    assert titles[0] == f"A: {cpu('naive')} step {step_a}: {timeline(a, step_a).height:,} events"
    assert titles[1] == f"B: {cpu('sdpa')} step {step_b}: {timeline(b, step_b).height:,} events"
    for panel, (trace, step) in zip(drawn["panels"], ((a, step_a), (b, step_b))):
        expect = timeline(trace, step)
        assert set(panel["lanes"]) == set(expect["lane"].to_list())
        assert len(panel["start"]) == expect.height  # every event drawn as itself
        got = sorted(
            zip((panel["lanes"][i] for i in panel["lane"]), panel["start"], (panel["names"][i] for i in panel["name"]))
        )
        assert got == sorted(
            zip(expect["lane"].to_list(), expect["start_us"].round(3).to_list(), expect["name"].to_list())
        )

    diff = sequence_diff(a, step_a, b, step_b)
    metrics = {m.label: m.value for m in at.get_by_key("timeline_counts").metric}
    assert int(metrics["same in both"]) == diff.filter(pl.col("op") == "equal").height
    assert int(metrics["only in A (removed in B)"]) == diff.filter(pl.col("op") == "delete").height
    assert int(metrics["only in B (added in B)"]) == diff.filter(pl.col("op") == "insert").height
    shown = table(at, "tbl_sequence")
    assert len(shown) == diff.filter(pl.col("op") != "equal").height

    fam = family_time_diff(a, step_a, b, step_b)
    got = table(at, "tbl_family_diff").set_index("family")
    for row in fam.iter_rows(named=True):
        assert close(got.loc[row["family"], "a_us"], row["a_ns"] / 1000.0)
        assert close(got.loc[row["family"], "b_us"], row["b_ns"] / 1000.0)


def test_timeline_tab_on_the_gpu_pair_has_gpu_stream_lanes(trace_of, app):
    ids = ["file/" + A100.name, "file/" + V100.name]
    at = app("Timeline diff", params={"run": ids, "a": ids[0], "b": ids[1]}, traces=[A100, V100])
    drawn = timeline_drawn(at)
    a = trace_of(A100)
    shown = representative_step(a)  # the default step: the one closest to the median
    lanes = drawn["panels"][0]["lanes"]
    assert lanes[0].startswith("GPU ")  # streams on top
    assert set(lanes) == set(timeline(a, shown)["lane"].to_list())
    assert drawn["panels"][0]["title"] == f"A: hta_a100_control step {shown}: {timeline(a, shown).height:,} events"
    assert int({m.label: m.value for m in at.get_by_key("timeline_counts").metric}["same in both"]) > 0


def _busy_trace(path: Path, ops: int) -> None:
    """A GPU-style trace with one ProfilerStep holding `ops` CPU ops, each launching one kernel:
    3 x ops + 1 complete events."""
    events = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": ops * 10 + 10,
        }
    ]
    for i in range(ops):
        ts = 5 + i * 10
        events.append({"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 50}", "pid": 1, "tid": 1, "ts": ts, "dur": 8})
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": ts + 1,
                "dur": 2,
                "args": {"correlation": i + 1},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": f"elementwise_kernel_{i % 40}",
                "pid": 0,
                "tid": 7,
                "ts": ts + 4,
                "dur": 3,
                "args": {"correlation": i + 1, "stream": 7, "device": 0},
            }
        )
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))


def test_timeline_stays_responsive_for_a_step_with_100k_events(app, tmp_path):
    busy = tmp_path / "busy.json.gz"
    _busy_trace(busy, 33_400)
    trace = load_trace(busy)
    events = timeline(trace, 1).height
    assert events >= 100_000
    ident = "file/busy.json.gz"
    app(params={"run": [ident]}, traces=[busy])  # parse once
    at = app("Timeline diff", params={"run": [ident], "a": ident, "b": ident}, traces=[busy])
    panel = timeline_drawn(at)["panels"][0]
    title = panel["title"]
    assert title.startswith(f"A: busy step 1: {events:,} events, short events merged into")
    drawn = int(title.split("merged into ")[1].split(" ")[0].replace(",", ""))
    assert drawn == len(panel["start"]) < events / 2
    assert sum(panel["merged"]) == events  # every event is in one bar


# ---------------------------------------------------------------- speedups


def test_speedups_tab_equals_the_speed_table_at_the_chosen_price(trace_of, app):
    at = app("Speedups", params={**cpu_link(), "usd_cpu": "3.5"})
    traces = {label: trace_of(path) for label, path in sample_runs().items()}
    expect = speed_table(traces, "naive", None, 3.5)
    shown = table(at, "tbl_speed")
    assert shown["run"].tolist() == expect["run"].to_list()
    for column in ("median_us", "p10_us", "p90_us", "speedup", "tokens_per_s"):
        assert all(close(a, b) for a, b in zip(shown[column], expect[column])), column
    # cost per billion tokens (the chart's unit): the speed table's $ per million tokens x 1000
    assert all(close(a, b * 1000) for a, b in zip(shown["usd_per_btok"], expect["usd_per_mtok"]))
    shape = manifest()["shape"]
    assert set(shown["tokens_per_step"]) == {shape["batch"] * shape["seq"]}
    drawn = bar_values(figure(at, "chart_speed_time"))  # ten runs: flat bars, sorted, one facet per mode
    assert all(close(drawn[run], median) for run, median in zip(expect["run"], expect["median_us"]))
    assert at.number_input(key="usd_per_cpu_hour").value == 3.5
    with pytest.raises(KeyError):  # CPU-only runs: no GPU-hour price is offered, none applied
        at.number_input(key="usd_per_hour")


def test_speedups_tab_says_when_tokens_are_unknown(app):
    at = app("Speedups", params={"run": ["file/" + H100.name]}, traces=[H100])
    shown = table(at, "tbl_speed")
    assert shown["tokens_per_s"].isna().all()
    assert any("No tokens per step" in t for t in texts(at.info))


# ---------------------------------------------------------------- backends


def test_backends_tab_shows_requested_detected_and_evidence(trace_of, app):
    at = app("Backends", params={"run": cpu_link()["run"] + ["file/" + H100.name]}, traces=[H100])
    shown = table(at, "tbl_backends").set_index("run")
    for label, path in sample_runs().items():
        trace = trace_of(path)
        found = detect_backends(trace)
        row = shown.loc[label]
        assert row["detected"] == ", ".join(found.backends)
        assert list(row["evidence"]) == found.all_evidence
        assert (None if pd.isna(row["requested"]) else row["requested"]) == trace.collector.get("backend_requested")
    h100 = shown.loc["tracelens_h100_bert_sdpa_flash"]
    assert h100["detected"] == "flash"
    assert any("pytorch_flash::flash_fwd_kernel" in name for name in h100["evidence"])
    assert shown.loc[cpu("sdpa-flash")]["verdict"] == "as requested"


def test_a_forced_backend_that_did_not_run_raises_the_fallback_alarm(app, tmp_path):
    # the flash trace of the collection, relabelled as if 'efficient' had been forced
    raw = json.loads(gzip.decompress((SAMPLE / "sdpa-flash.json.gz").read_bytes()))
    raw["attnscope"]["backend_requested"] = "efficient"
    raw["attnscope"]["variant"] = "sdpa-efficient"
    forged = tmp_path / "forced-efficient.json.gz"
    forged.write_bytes(gzip.compress(json.dumps(raw).encode()))
    ident = "file/" + forged.name
    at = app("Backends", params={"run": [ident]}, traces=[forged])
    alarms = texts(at.get_by_key("backend_alarms").error)
    assert len(alarms) == 1 and "sdpa-efficient [files]: backend fallback" in alarms[0] and "cpu_flash" in alarms[0]
    at = app(params={"run": [ident]}, traces=[forged])
    assert any("backend fallback" in t for t in texts(at.get_by_key("findings").error))


# ---------------------------------------------------------------- downloads


def test_the_share_buttons_make_the_report_and_summary_of_the_selected_runs(app, monkeypatch):
    made: dict[str, tuple] = {}  # deferred file id -> (file name, mime type, the callable the button runs)
    register = MediaFileManager.add_deferred

    def record(self, data_callable, mimetype, coordinates, file_name=None, **kwargs):
        file_id = register(self, data_callable, mimetype, coordinates, file_name, **kwargs)
        made[file_id] = (file_name, mimetype, data_callable)
        return file_id

    monkeypatch.setattr(MediaFileManager, "add_deferred", record)
    at = app(params={"run": [sample_id("naive_inplace"), sample_id("sdpa-flash")], "baseline": sample_id("sdpa-flash")})
    buttons = {b.proto.label: made[b.proto.deferred_file_id] for b in at.get("download_button")}
    html = next(v for k, v in buttons.items() if k.startswith("HTML report"))
    markdown = next(v for k, v in buttons.items() if k.startswith("Markdown summary"))
    assert html[0].endswith(".html") and html[1] == "text/html"
    assert markdown[0].endswith(".md") and markdown[1] == "text/markdown"
    text = literal(markdown[2]())
    assert "sdpa-flash" in text.splitlines()[0]  # the baseline is named at the top
    assert "naive_inplace" in text and "sdpa-math" not in text  # the selected runs, and only those
    page = html[2]()
    assert "<html" in page.lower() and "sdpa-flash" in page and "sdpa-math" not in page


def test_the_share_buttons_follow_a_choice_made_in_a_tab_just_before(app, monkeypatch):
    """A download made right after a choice in a tab (no other run between) reports that choice: the
    Kernels tab's step, the Speedups tab's price. The button's file is made when it is clicked, from
    the comparison the page's last run left, the choices it wrote to the link included."""
    made: dict[str, object] = {}  # deferred file id -> the callable the button runs
    register = MediaFileManager.add_deferred

    def record(self, data_callable, mimetype, coordinates, file_name=None, **kwargs):
        file_id = register(self, data_callable, mimetype, coordinates, file_name, **kwargs)
        made[file_id] = data_callable
        return file_id

    def summary(at: AppTest) -> str:
        (button,) = [b for b in at.get("download_button") if b.proto.label.startswith("Markdown summary")]
        return made[button.proto.deferred_file_id]().replace("\\", "")  # (Markdown's escapes dropped)

    monkeypatch.setattr(MediaFileManager, "add_deferred", record)
    naive, flash = sample_id("naive"), sample_id("sdpa-flash")
    pair = {"run": [naive, flash], "baseline": flash}
    at = app("Kernels", params=pair)
    assert "Over all steps (per-step figures are totals / steps)" in summary(at)
    at.selectbox(key="kd_step").set_value(1).run()
    linked = dict(raw.rsplit("=", 1) for raw in at.query_params["kstep"])  # run id -> its second step
    assert sorted(linked) == sorted([naive, flash]), linked
    text = summary(at)
    assert f"The run's step {linked[naive]} against the baseline's step {linked[flash]}" in text, text[:1500]
    assert "Over all steps" not in text

    at = app("Speedups", params=pair)  # CPU runs: the CPU-hour price, empty until set
    assert "$7.25 per CPU-hour" not in summary(at)
    at.number_input(key="usd_per_cpu_hour").set_value(7.25).run()
    assert "$7.25 per CPU-hour" in summary(at)


def test_parsing_reports_progress_with_each_files_size_and_parses_once():
    from dashboard.catalog import TraceCache, file_source, open_all, pending_file

    cache = TraceCache()
    pending = [pending_file(file_source(p), cache) for p in (sample_runs()[cpu("naive")], H100)]
    seen: list[tuple[float, str]] = []
    runs, failures = open_all(pending, progress=lambda frac, text: seen.append((frac, text)), cache=cache)
    assert not failures and [r.label for r in runs] == ["naive", "tracelens_h100_bert_sdpa_flash"]
    sizes = [p.stat().st_size for p in (sample_runs()[cpu("naive")], H100)]
    texts = list(dict.fromkeys(text for _, text in seen))  # several updates per file, in order
    assert f"Parsing naive.json.gz ({sizes[0] / 1000:.1f} kB), file 1 of 2" == texts[0]
    assert texts[1].startswith(f"Parsing {H100.name} ({sizes[1] / 1000:.1f} kB), file 2 of 2")
    assert [frac for frac, _ in seen] == sorted(frac for frac, _ in seen) and seen[-1][0] == 1.0
    assert cache.parses == 2
    seen.clear()
    open_all(
        [pending_file(file_source(H100), cache)], progress=lambda frac, text: seen.append((frac, text)), cache=cache
    )
    assert cache.parses == 2 and seen == []  # cached by content: no parse, no progress


# ---------------------------------------------------------------- cut files, efficiency, launch order, labels


def test_a_cut_gpu_trace_that_lost_its_device_events_is_an_alarm_and_never_reads_as_a_cpu_run(app, tmp_path):
    full = gzip.decompress(A100.read_bytes())
    doc = oracle.raw(A100)
    first = next(
        e for e in doc["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime")
    )
    text = full.decode()
    cut_at = text.index(json.dumps(first["name"])) // 2  # well before the first device event or launch
    path = tmp_path / "early.json"
    path.write_bytes(full[:cut_at])
    at = app(params={"run": ["file/early.json"]}, traces=[path])
    alarms = texts(at.get_by_key("findings").error)
    (cut,) = [t for t in alarms if t.startswith("**early: cut trace.**")]
    assert "this cuda trace lost every device event, so it is counted as a CPU-only run" in cut
    assert "none survived, so this cuda trace reads as CPU-only" in cut  # the loader's own line follows
    assert not any("No cut-off file" in t for t in texts(at.get_by_key("findings").success))
    row = table(at, "tbl_overview").iloc[0]
    assert row["device_label"] == f"cuda trace, cut: device events lost · {doc['deviceProperties'][0]['name']}"
    assert row["cut"] == "device events lost"
    notes = at.get_by_key("findings").warning
    assert not any("cut off" in t for t in texts(notes))  # said once, as the alarm, not again as a folded note


def test_a_file_cut_after_its_events_is_a_milder_warning_shown_open(app, tmp_path):
    full = gzip.decompress(H100.read_bytes())
    path = tmp_path / "tail.json"
    path.write_bytes(full[:-60])  # inside the metadata written after traceEvents
    at = app(params={"run": ["file/tail.json"]}, traces=[path])
    findings = at.get_by_key("findings")
    assert not any("cut trace" in t for t in texts(findings.error))
    warned = [t for t in texts(findings.warning) if t.startswith("**tail: cut trace.**")]
    assert len(warned) == 1 and "every event was read" in warned[0]
    assert not findings.expander or not any("cut trace" in t for e in findings.expander for t in texts(e.warning))
    row = table(at, "tbl_overview").iloc[0]
    assert row["cut"] == "metadata after the events lost" and row["device_label"].startswith("cuda · NVIDIA H100")


def test_speedups_tab_shows_attention_efficiency_and_the_roofline(app):
    qwen = DATA / "tracelens_h100_qwen_chat_sdpa_flash.json.gz"
    ids = ["file/" + H100.name, "file/" + qwen.name, sample_id("naive")]
    at = app("Speedups", params={"run": ids}, traces=[H100, qwen])
    gpu = table(at, "tbl_speed_gpu").set_index("run")
    doc = oracle.raw(H100)
    kernels = [e for e in oracle.complete(doc) if e.get("cat") == "kernel" and "flash_fwd_kernel" in e["name"]]
    ((b, s, h, d),) = {
        tuple(o["args"]["Input Dims"][0])
        for o in oracle.complete(doc)
        if o.get("name") == "aten::_flash_attention_forward"
    }
    achieved = 4 * b * h * s * s * d * len(kernels) / (sum(k["dur"] for k in kernels) * 1e-6) / 1e12
    bert = gpu.loc["tracelens_h100_bert_sdpa_flash"]
    assert close(bert["attn_tflops"], achieved, rel=1e-6) and bert["attn_pct"] > 0 and pd.isna(bert["attn_reason"])
    assert "10 of 34 calls not measured" in gpu.loc["tracelens_h100_qwen_chat_sdpa_flash", "attn_reason"]
    naive = table(at, "tbl_speed_cpu").set_index("run").loc[cpu("naive")]
    assert pd.isna(naive["attn_pct"]) and "CPU trace" in naive["attn_reason"]  # a reason, never a percentage
    fig = figure(at, "chart_roofline")
    assert fig["layout"]["xaxis"]["type"] == "log" and fig["layout"]["yaxis"]["type"] == "log"
    roofs = [t for t in fig["data"] if t["mode"] == "lines"]
    assert [t["name"] for t in roofs] == ["H100 SXM5 80GB bf16 roof"]
    markers = {t["name"]: t for t in fig["data"] if t["mode"] == "markers"}
    assert close(markers["tracelens_h100_bert_sdpa_flash (attention ops)"]["y"][0], achieved, rel=1e-6)
    assert f"{cpu('naive')} (whole step)" in markers  # the CPU run's step, drawn with no roof
    rows = table(at, "tbl_attention_efficiency")
    assert set(rows["run"]) == {"tracelens_h100_bert_sdpa_flash", "tracelens_h100_qwen_chat_sdpa_flash", cpu("naive")}


def test_timeline_sequence_is_in_launch_order_with_the_stream_of_each_kernel(app):
    ids = ["file/" + A100.name, "file/" + V100.name]
    at = app(
        "Timeline diff",
        params={"run": ids, "a": ids[0], "b": ids[1], "step_a": "1009", "step_b": "1009"},
        traces=[A100, V100],
    )
    doc = oracle.raw(A100)
    found = _launched_in(doc, "ProfilerStep#1009")
    launches = {
        e["args"]["correlation"]: e
        for e in oracle.complete(doc)
        if e.get("cat") in oracle.LAUNCH_CATS and "correlation" in e.get("args", {})
    }
    found.sort(key=lambda e: (launches[e["args"]["correlation"]]["ts"], e["args"]["correlation"]))
    at.toggle(key="tl_only_diff").set_value(False).run()
    shown = table(at, "tbl_sequence")
    a = shown[shown["a_pos"].notna()].sort_values("a_pos")
    assert a["a_name"].tolist() == [e["name"] for e in found]
    assert a["a_stream"].astype(int).tolist() == [e["args"]["stream"] for e in found]
    assert len({e["args"]["stream"] for e in found}) > 1
    assert any("more than one stream" in t for t in texts(at.caption))


def test_a_collectors_cuda_graphs_run_is_labelled_so(app):
    from dashboard.views.overview import _how

    doc = oracle.raw(H200_SAMPLE / "sdpa.graphs.json.gz")
    assert doc["attnscope"]["cuda_graphs"] is True and doc["attnscope"]["compiled"] is True
    at = app(params={"run": ["h200/sdpa.graphs", "h200/sdpa.compiled"]})
    # a collection's name is on all of its labels or none (issue item 11), not on some
    assert table(at, "tbl_overview")["run"].tolist() == ["sdpa (CUDA graphs) [h200]", "sdpa (compiled) [h200]"]
    # a skip in a collection's manifest is named the same way
    assert [
        _how(skip) for skip in ({"compiled": True, "cuda_graphs": True}, {"compiled": True}, {"compiled": False})
    ] == [" (CUDA graphs)", " (compiled)", ""]
