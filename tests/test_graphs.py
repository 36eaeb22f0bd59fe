"""CUDA/HIP graph replays: the kernels one graph launch replays are counted in its step and blamed
on the op that holds the launch; when no op does, a warning gives the number."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest

import oracle
from test_golden_summaries import GOLDEN, TRACES, golden_name
from dashboard.engine import summarize
from dashboard.engine.analyses.graphs import graph_replays

GRAPH_CALLS = {"cudaGraphLaunch", "hipGraphLaunch"}


def _replayed(name: str) -> tuple[int, Counter]:
    """(graph launches, device events per launch correlation) read with the json module."""
    events = oracle.complete(oracle.raw(oracle.DATA / name))
    graphs = {
        e["args"]["correlation"] for e in events if e.get("name") in GRAPH_CALLS and "correlation" in e.get("args", {})
    }
    per = Counter(
        e["args"]["correlation"]
        for e in events
        if e.get("cat") in oracle.GPU_CATS and e.get("args", {}).get("correlation") in graphs
    )
    return len(graphs), per


def _replayed_time(name: str) -> tuple[int, int]:
    """(ns of device events a graph launch replayed, ns of every device event), with the json module."""
    doc = oracle.raw(oracle.DATA / name)
    events = oracle.events_ns(doc)
    graphs = {e["args"]["correlation"] for e in events if e["name"] in GRAPH_CALLS and "correlation" in e["args"]}
    device = [e for e in events if oracle.is_device(e)]
    replayed = sum(e["end"] - e["ts"] for e in device if e["args"].get("correlation") in graphs)
    return replayed, sum(e["end"] - e["ts"] for e in device)


def test_vllm_decode_replays_its_kernels_from_one_graph_launch_under_no_op(trace_of):
    name = "tracelens_vllm_decode_graph_unified_attention.json.gz"
    launches, per = _replayed(name)
    trace = trace_of(oracle.DATA / name)
    summary = summarize(trace)
    replayed, total = _replayed_time(name)
    assert summary["graphs"] == {
        "launches": launches,
        "kernels": sum(per.values()),
        "without_op": sum(per.values()),
        "ops": {},
        "device_us": pytest.approx(replayed / 1e3, abs=1e-3),
        "share": pytest.approx(replayed / total, abs=1e-4),
    }
    assert launches == 1 and sum(per.values()) == 421
    assert any(
        f"{sum(per.values()):,} device events replayed by 1 graph launch sit under no CPU op" in w
        for w in summary["warnings"]
    )
    # the replayed kernels count in the (implicit) step with the others
    all_gpu = sum(1 for e in oracle.complete(oracle.raw(oracle.DATA / name)) if e.get("cat") in oracle.GPU_CATS)
    assert summary["steps"][0]["work"] == all_gpu


def test_the_summary_line_says_1_launch_not_1_launches():
    name = "tracelens_vllm_decode_graph_unified_attention.json.gz"
    launches, per = _replayed(name)
    result = subprocess.run(
        [sys.executable, "-m", "dashboard.cli", "summary", "--no-store", str(oracle.DATA / name)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert result.returncode == 0, result.stderr
    assert launches == 1
    replayed, total = _replayed_time(name)
    assert (
        f"  graph replays: 1 launch replayed {sum(per.values()):,} device events, {replayed / total:.0%} of the device "
        "time (no op holds it)\n" in result.stdout
    )


def test_compiled_cuda_graphs_are_blamed_on_the_compiled_function_that_replays_them(trace_of):
    name = "hta_v100_test.json.gz"
    launches, per = _replayed(name)
    table = graph_replays(trace_of(oracle.DATA / name))
    assert table.height == launches == 12
    assert sorted(table["kernels"].to_list()) == sorted(per.values())
    assert set(table["op"]) == {"CompiledFunction", "CompiledFunctionBackward"}
    assert table.group_by("step").len()["len"].to_list() == [2] * 6
    assert summarize(trace_of(oracle.DATA / name))["graphs"]["without_op"] == 0


@pytest.mark.parametrize("trace", TRACES, ids=golden_name)
def test_every_stored_summary_gives_the_replayed_share_the_json_gives(trace):
    """The graphs block of each stored golden summary against the json module: the device time the
    graph launches replayed, and its share of all device time (the golden is a record; this is the proof)."""
    (stored,) = (s["graphs"] for s in json.loads((GOLDEN / golden_name(trace)).read_text()))
    doc = oracle.raw(trace, parse_float=Decimal)
    events = oracle.events_ns(doc)
    graphs = {e["args"]["correlation"] for e in events if e["name"] in GRAPH_CALLS and "correlation" in e["args"]}
    device = [e for e in events if oracle.is_device(e)]
    replayed = sum(e["end"] - e["ts"] for e in device if e["args"].get("correlation") in graphs)
    total = sum(e["end"] - e["ts"] for e in device)
    if not graphs:
        assert stored["launches"] == 0 and "share" not in stored
        return
    assert stored["launches"] == len(graphs)
    assert stored["device_us"] == pytest.approx(replayed / 1e3, abs=1e-3)
    assert stored["share"] == pytest.approx(replayed / total, abs=1e-4)
