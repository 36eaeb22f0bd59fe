"""CUDA-graph kernels attributed to the ops that launched them (compare/graph_source.py), against a
json-module reading: every kernel a graph launch replayed in a bundled H200 `.graphs` run gets the
op chain its compiled twin's kernel at the same place carries in the compiled trace itself."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

import oracle
from dashboard.engine import load_trace
from dashboard.engine.compare.graph_source import CHAIN_SEP, graph_attribution, replay_chains, replay_share

H200 = Path(__file__).resolve().parent.parent / "sample_traces" / "h200"
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
