"""CUDA-graph kernels attributed to the ops that launched them (compare/graph_source.py), against a
json-module reading: every kernel a graph launch replayed in a bundled H200 `.graphs` run gets the
op chain its compiled twin's kernel at the same place carries in the compiled trace itself."""

from __future__ import annotations

import gzip
import html
import json
import os
import shutil
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

import oracle
from dashboard.engine import load_trace
from dashboard.engine.compare.graph_source import CHAIN_SEP, graph_attribution, replay_chains, replay_share

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "sample_traces" / "h200"
VARIANTS = ("naive", "naive_inplace", "sdpa", "sdpa-cudnn", "sdpa-flash", "sdpa-efficient", "sdpa-math")


def _device_by_launch(doc: dict) -> tuple[list[dict], dict]:
    """(the device events in device order, correlation -> the launch call with it)."""
    events = oracle.events_ns(doc)
    device = sorted((e for e in events if oracle.is_device(e)), key=lambda e: (e["ts"], e["i"]))
    return device, oracle.launches(events)


def _chain(doc: dict, launch: dict) -> str:
    """The cpu_ops whose span holds the launch call on its thread, outermost first, as one string."""
    ops = oracle.enclosing_ops(doc, launch["pid"], launch["tid"], float(launch["ts"]), float(launch["end"]))
    names = [o["name"] for o in ops if not o["name"].startswith("ProfilerStep#")]
    return CHAIN_SEP.join(names)


def _source_steps(doc: dict) -> list[list[tuple[str, str]]]:
    """Per ProfilerStep of the compiled trace, its device events as (name, op chain) in device order."""
    device, launch_of = _device_by_launch(doc)
    windows = [
        (oracle.ns(e["ts"]), oracle.ns(e["ts"]) + oracle.ns(e["dur"]))
        for e in oracle.complete(doc)
        if e["name"].startswith("ProfilerStep#") and e.get("cat") != "gpu_user_annotation"
    ]
    steps: list[list[tuple[str, str]]] = [[] for _ in windows]
    for e in device:
        launch = launch_of.get(e["args"].get("correlation"))
        for at, (start, end) in enumerate(windows):
            if launch is not None and start <= launch["ts"] < end:
                steps[at].append((e["name"], _chain(doc, _us(launch))))
    return [s for s in steps if s]


def _us(e: dict) -> dict:
    """An events_ns event with ts/end back in µs, as enclosing_ops compares them with the file's µs."""
    return {**e, "ts": Decimal(e["ts"]) / 1000, "end": Decimal(e["end"]) / 1000}


def _replays(doc: dict) -> list[list[str]]:
    """Per cudaGraphLaunch, in launch order, the names of the device events it replayed, in device order."""
    device, launch_of = _device_by_launch(doc)
    graph = sorted(
        (e for e in launch_of.values() if e["name"].startswith("cudaGraphLaunch")), key=lambda e: (e["ts"], e["i"])
    )
    return [[d["name"] for d in device if d["args"].get("correlation") == g["args"]["correlation"]] for g in graph]


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_replayed_kernel_gets_its_compiled_twins_op_chain(variant):
    graphs_doc = oracle.raw(H200 / f"{variant}.graphs.json.gz", parse_float=Decimal)
    source_doc = oracle.raw(H200 / f"{variant}.compiled.json.gz", parse_float=Decimal)
    source = _source_steps(source_doc)
    replays = _replays(graphs_doc)
    assert replays and source
    want = []
    for names in replays:
        # the graph captured one compiled call: its replay is a step of the compiled run, kernel for kernel
        twin = next(step for step in source if [n for n, _ in step] == names)
        want += [(name, chain) for name, (_, chain) in zip(names, twin)]
    assert all(chain for _, chain in want)
    table = replay_chains(
        load_trace(H200 / f"{variant}.graphs.json.gz"), load_trace(H200 / f"{variant}.compiled.json.gz")
    )
    assert list(zip(table["name"].to_list(), table["chain"].to_list())) == want


@pytest.mark.parametrize("variant", ["naive", "sdpa-flash"])
def test_the_attribution_sums_the_replayed_time_by_chain(variant):
    graphs_doc = oracle.raw(H200 / f"{variant}.graphs.json.gz", parse_float=Decimal)
    device, launch_of = _device_by_launch(graphs_doc)
    graph_corr = {c for c, e in launch_of.items() if e["name"].startswith("cudaGraphLaunch")}
    replayed = sum(d["end"] - d["ts"] for d in device if d["args"].get("correlation") in graph_corr)
    total = sum(d["end"] - d["ts"] for d in device)
    graphs = load_trace(H200 / f"{variant}.graphs.json.gz")
    found = graph_attribution(graphs, load_trace(H200 / f"{variant}.compiled.json.gz"))
    assert found["attributed"] == found["kernels"] == sum(map(len, _replays(graphs_doc)))
    assert found["attributed_share"] == 1.0 and found["unaligned"] == [] and found["without_op"] == 0
    assert sum(o["kernels"] for o in found["ops"]) == found["kernels"]
    assert found["device_us"] == pytest.approx(replayed / 1e3, abs=1e-3)
    share = replay_share(graphs)
    assert share["device_us"] == pytest.approx(replayed / 1e3, abs=1e-3)
    assert share["share"] == pytest.approx(replayed / total, abs=1e-4)


def test_a_source_of_other_work_attributes_only_what_aligns_and_names_the_rest():
    graphs = load_trace(H200 / "naive.graphs.json.gz")  # memset, two gemms, one Triton kernel per replay
    found = graph_attribution(graphs, load_trace(H200 / "sdpa-cudnn.compiled.json.gz"))  # memset, cuDNN
    assert found["kernels"] == 12
    assert found["attributed"] == 3  # each replay's memset: the one name both runs share
    assert found["unaligned"] == sorted(
        {
            n
            for replay in _replays(oracle.raw(H200 / "naive.graphs.json.gz"))
            for n in replay
            if not n.startswith("Memset")
        }
    )
    assert 0 < found["attributed_share"] < 0.01


def test_a_trace_without_graphs_has_nothing_replayed():
    trace = load_trace(H200 / "naive.compiled.json.gz")
    assert replay_share(trace) == {"kernels": 0, "device_us": 0.0, "share": 0.0}
    assert replay_chains(trace, trace).height == 0


# ---------------------------------------------------------------- the command line and the Kernels tab


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dashboard", *args], capture_output=True, text=True, timeout=300, cwd=ROOT
    )


def test_summary_attributes_the_replays_through_the_source_given():
    done = _cli(
        "summary",
        "--no-store",
        "--json",
        str(H200 / "naive.graphs.json.gz"),
        "--graph-source",
        str(H200 / "naive.compiled.json.gz"),
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)[0]["graphs"]["attribution"]
    want = _source_steps(oracle.raw(H200 / "naive.compiled.json.gz", parse_float=Decimal))[0]
    # by chain, the kernels the oracle's first compiled step launched under it, three replays of them
    per_chain: dict[str, int] = {}
    for _, chain in want:
        per_chain[chain] = per_chain.get(chain, 0) + 3
    assert {o["chain"]: o["kernels"] for o in found["ops"]} == per_chain
    assert found["attributed"] == found["kernels"] == 12 and found["source"].endswith("naive.compiled.json.gz")
    text = _cli(
        "summary",
        "--no-store",
        str(H200 / "naive.graphs.json.gz"),
        "--graph-source",
        str(H200 / "naive.compiled.json.gz"),
    ).stdout
    assert "attributed through naive.compiled.json.gz: 12 of 12 device events, 100% of the replayed time" in text
    assert "9 x  Torch-Compiled Region: 0/0 > aten::bmm" in text


def test_without_a_source_the_summary_says_what_is_replayed_and_how_to_attribute_it():
    text = _cli("summary", "--no-store", str(H200 / "sdpa-flash.graphs.json.gz")).stdout
    graphs = oracle.raw(H200 / "sdpa-flash.graphs.json.gz")
    device = [e for e in oracle.events_ns(graphs) if oracle.is_device(e)]
    graph_corr = {e["args"]["correlation"] for e in oracle.complete(graphs) if e["name"] == "cudaGraphLaunch"}
    share = sum(d["end"] - d["ts"] for d in device if d["args"].get("correlation") in graph_corr) / sum(
        d["end"] - d["ts"] for d in device
    )
    assert f"replayed 3 device events, {share:.0%} of the device time" in text
    assert "the ops that launched them are not in this trace: --graph-source TRACE" in text


def test_a_graphs_trace_that_names_its_source_is_attributed_without_the_flag(tmp_path):
    doc = oracle.raw(H200 / "naive.graphs.json.gz")
    doc["attnscope"]["graph_source"] = "twin.json.gz"
    with gzip.open(tmp_path / "naive.graphs.json.gz", "wt") as fh:
        json.dump(doc, fh)
    shutil.copy(H200 / "naive.compiled.json.gz", tmp_path / "twin.json.gz")
    done = _cli("summary", "--no-store", "--json", str(tmp_path / "naive.graphs.json.gz"))
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)[0]["graphs"]["attribution"]
    assert found["attributed"] == 12 and found["source"].endswith("twin.json.gz")


def test_a_source_that_cannot_be_read_is_one_line_naming_it_and_the_summary_still_comes(tmp_path):
    done = _cli(
        "summary", "--no-store", str(H200 / "naive.graphs.json.gz"), "--graph-source", str(tmp_path / "missing.json")
    )
    assert done.returncode == 2
    assert "graph replays: 3 launches replayed 12 device events" in done.stdout
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "--graph-source" in errors[0] and "missing.json" in errors[0], done.stderr
    assert "Traceback" not in done.stderr


def test_compare_attributes_a_graph_run_through_its_compiled_twin_among_the_runs():
    done = _cli("compare", "--no-store", str(H200 / "naive.compiled.json.gz"), str(H200 / "naive.graphs.json.gz"))
    assert done.returncode == 0, done.stderr
    section = done.stdout.split("CUDA graph replays\n", 1)[1]
    assert section.startswith("naive (CUDA graphs):\n")
    assert "attributed through naive.compiled.json.gz: 12 of 12 device events" in section
    assert section.rstrip().splitlines()[-1].startswith("attnscope ")  # the footer stays last


def test_the_kernels_tab_shows_a_graph_runs_kernels_by_op_through_its_compiled_twin(monkeypatch):
    from streamlit.testing.v1 import AppTest

    from dashboard.runs import ENV_TRACES

    runs = [H200 / "naive.compiled.json.gz", H200 / "naive.graphs.json.gz"]
    monkeypatch.setenv(ENV_TRACES, os.pathsep.join(str(p) for p in runs))
    at = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=120)
    at.query_params["tab"] = "Kernels"
    at.query_params["run"] = ["file/" + p.name for p in runs]
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    shown = at.get_by_key("tbl_graph_ops").dataframe[0].value
    assert shown["run"].nunique() == 1  # one run replays graphs: its rows alone, under its label
    want = graph_attribution(load_trace(runs[1]), load_trace(runs[0]))
    assert list(shown["chain"]) == [o["chain"] for o in want["ops"]]
    assert list(shown["kernels"]) == [o["kernels"] for o in want["ops"]] and sum(shown["kernels"]) == 12
    said = " ".join(m.value for m in at.markdown)
    assert "attributed through" in said and "12 of 12" in said


def test_check_puts_the_attribution_in_its_json_and_markdown(tmp_path):
    compiled, graphs = H200 / "naive.compiled.json.gz", H200 / "naive.graphs.json.gz"
    args = ["check", "--no-store", str(compiled), str(graphs), "--graph-source", str(compiled)]
    done = _cli(*args, "--json", str(tmp_path / "v.json"), "--markdown", str(tmp_path / "v.md"))
    assert done.returncode in (0, 1), done.stderr  # the verdict is the rules' business, not the attribution's
    record = json.loads((tmp_path / "v.json").read_text())
    assert list(record["graphs"]) == ["candidate"]  # the baseline replays nothing
    want = graph_attribution(load_trace(graphs), load_trace(compiled))
    assert record["graphs"]["candidate"]["ops"] == want["ops"]
    table = (tmp_path / "v.md").read_text().split("CUDA graph replays by op (through their source):", 1)[1]
    assert "| candidate | Torch-Compiled Region: 0/0 > aten::bmm | 9 |" in table


def test_the_html_report_holds_the_graph_and_phase_sections_the_text_has(tmp_path):
    done = _cli(
        "compare",
        "--no-store",
        str(H200 / "naive.compiled.json.gz"),
        str(H200 / "naive.graphs.json.gz"),
        "--html",
        str(tmp_path / "g.html"),
    )
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "g.html").read_text()
    assert "<h2>CUDA graph replays</h2>" in page and "Torch-Compiled Region: 0/0 &gt; aten::bmm" in page
    assert page.rstrip().endswith("</body></html>")
    data = oracle.DATA
    serving = [data / "tracelens_vllm_decode_graph_unified_attention.json.gz"]
    serving.append(data / "tracelens_mi300x_sglang_qwen3_prefilldecode_ck_fmha.json.gz")
    done = _cli("compare", "--no-store", *map(str, serving), "--html", str(tmp_path / "s.html"))
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "s.html").read_text()
    text = _cli("compare", "--no-store", *map(str, serving)).stdout
    decode = next(line for line in text.splitlines() if line.startswith("  decode: "))
    assert "<h2>Serving phases</h2>" in page and html.escape(decode) in page
