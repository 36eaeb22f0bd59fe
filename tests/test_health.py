"""The trace health check: each fault injected into a real trace (our H200 naive run, read and
written back with the json module) is found and counted, and the untouched trace is healthy.

The oracle is the injection itself (how many events were changed, by hand) plus plain-loop
readings of the untouched JSON that show the fault was not there before.
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import pytest

import oracle
from dashboard.cli import main as cli
from dashboard.engine import load_trace
from dashboard.engine.health import HEALTH_CHECKS, health

NAIVE = Path(__file__).parent.parent / "sample_traces" / "h200" / "naive.json.gz"
DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH = ("cuda_runtime", "cuda_driver")

pytestmark = pytest.mark.skipif(not NAIVE.is_file(), reason="the bundled H200 collection is missing")


@pytest.fixture(scope="module")
def doc() -> dict:
    return oracle.raw(NAIVE)


def device_events(doc: dict) -> list[dict]:
    """Device events in time order (one device, one stream in this trace)."""
    return sorted((e for e in oracle.complete(doc) if e.get("cat") in DEVICE), key=lambda e: float(e["ts"]))


def load(doc: dict, tmp_path: Path, name: str):
    path = tmp_path / f"{name}.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump(doc, fh)
    return load_trace(path)


def found(trace) -> dict[str, int]:
    return {f["check"]: f["count"] for f in health(trace)}


def test_the_untouched_trace_is_healthy(doc):
    events = device_events(doc)
    # plain readings: no two device events overlap on the stream, every one has a launch before it
    ends = [float(e["ts"]) + float(e["dur"]) for e in events]
    assert all(float(b["ts"]) >= a - 1e-3 for a, b in zip(ends, events[1:]))
    launch_ts = {e["args"]["correlation"]: float(e["ts"]) for e in oracle.complete(doc) if e.get("cat") in LAUNCH}
    assert all(launch_ts[e["args"]["correlation"]] <= float(e["ts"]) for e in events)
    assert health(load_trace(NAIVE)) == []


def test_two_kernels_overlapping_on_one_stream(doc, tmp_path):
    d = copy.deepcopy(doc)
    events = device_events(d)
    second = events[5]
    prev_end = float(events[4]["ts"]) + float(events[4]["dur"])
    second["ts"] = prev_end - 5.0  # starts 5 µs before its predecessor ends
    assert found(load(d, tmp_path, "overlap")).get("overlapping_kernels") == 1


def test_a_duration_longer_than_the_trace_and_a_negative_one(doc, tmp_path):
    d = copy.deepcopy(doc)
    ops = [e for e in oracle.complete(d) if e.get("cat") == "cpu_op"]
    starts = [float(e["ts"]) for e in oracle.complete(d)]
    ends = [float(e["ts"]) + float(e.get("dur", 0)) for e in oracle.complete(d)]
    ops[3]["dur"] = 10 * (max(ends) - min(starts))
    ops[7]["dur"] = -4.0
    trace = load(d, tmp_path, "overflow")
    assert found(trace).get("duration_overflow") == 2


def test_a_kernel_whose_launch_was_lost(doc, tmp_path):
    d = copy.deepcopy(doc)
    kernel = device_events(d)[2]
    corr = kernel["args"]["correlation"]
    d["traceEvents"] = [
        e for e in d["traceEvents"] if not (e.get("cat") in LAUNCH and e.get("args", {}).get("correlation") == corr)
    ]
    assert found(load(d, tmp_path, "nolaunch")).get("device_event_without_launch") == 1


def test_a_kernel_that_starts_before_its_launch(doc, tmp_path):
    d = copy.deepcopy(doc)
    first = device_events(d)[0]  # nothing before it on the stream: no overlap is made
    launch = next(
        e
        for e in oracle.complete(d)
        if e.get("cat") in LAUNCH and e["args"].get("correlation") == first["args"]["correlation"]
    )
    first["ts"] = float(launch["ts"]) - 50.0
    result = found(load(d, tmp_path, "skew"))
    assert result.get("device_before_launch") == 1 and "overlapping_kernels" not in result


def test_a_step_whose_launches_have_no_device_events(doc, tmp_path):
    d = copy.deepcopy(doc)
    name, start, end = oracle.step_spans(d)[1]
    corr = {
        e["args"]["correlation"]
        for e in oracle.complete(d)
        if e.get("cat") in LAUNCH and start <= float(e["ts"]) <= end and "correlation" in e.get("args", {})
    }
    d["traceEvents"] = [
        e for e in d["traceEvents"] if not (e.get("cat") in DEVICE and e.get("args", {}).get("correlation") in corr)
    ]
    assert found(load(d, tmp_path, "missing")).get("missing_device_events") == 1


def test_a_step_where_the_device_idles_most_of_the_time(doc, tmp_path):
    d = copy.deepcopy(doc)
    last = [
        e
        for e in oracle.complete(d)
        if e.get("name") == oracle.step_spans(d)[-1][0] and e.get("cat") != "gpu_user_annotation"
    ]
    for step in last:
        step["dur"] = float(step["dur"]) * 20  # the span grows; its device work does not
    result = found(load(d, tmp_path, "idle"))
    assert result.get("idle_gap") == 1


def test_a_step_where_collectives_are_most_of_the_device_time(doc, tmp_path):
    d = copy.deepcopy(doc)
    name, start, end = oracle.step_spans(d)[0]
    corr = {
        e["args"]["correlation"]
        for e in oracle.complete(d)
        if e.get("cat") in LAUNCH and start <= float(e["ts"]) <= end and "correlation" in e.get("args", {})
    }
    in_step = [e for e in device_events(d) if e["args"].get("correlation") in corr]
    total = sum(float(e["dur"]) for e in in_step)
    renamed = 0.0
    for e in sorted(in_step, key=lambda e: -float(e["dur"])):  # the longest first, until past half
        if renamed > total / 2:
            break
        e["name"], e["cat"] = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "kernel"
        renamed += float(e["dur"])
    assert found(load(d, tmp_path, "comm")).get("comm_dominated") == 1


def test_summary_json_puts_the_health_list_first_and_the_text_says_it(doc, tmp_path, capsys):
    d = copy.deepcopy(doc)
    device_events(d)[5]["ts"] = float(device_events(d)[4]["ts"]) + float(device_events(d)[4]["dur"]) - 5.0
    path = tmp_path / "bad.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump(d, fh)
    assert cli(["summary", "--json", "--no-store", str(path)]) == 0
    (summary,) = json.loads(capsys.readouterr().out)
    assert summary["health"][0]["check"] == "overlapping_kernels" and summary["health"][0]["count"] == 1
    assert set(summary["health"][0]) == {"check", "count", "example"}
    assert cli(["summary", "--no-store", str(path)]) == 0
    text = capsys.readouterr().out
    assert "health: overlapping_kernels 1" in text
    assert {f["check"] for f in summary["health"]} <= set(HEALTH_CHECKS)


def _overview(params: dict | None = None):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(Path(__file__).parent.parent / "dashboard" / "app.py"), default_timeout=120)
    for key, value in (params or {}).items():
        at.query_params[key] = value
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_overview_keeps_where_the_device_waits_apart_from_trace_faults():
    """The bundled H200 article path: the sdpa runs' devices idle most of a step (a fused kernel of
    tens of µs, launched from Python) is a fact of the run, shown folded after the alarms, not the
    yellow "read these numbers with care" that lost or overlapping events deserve."""
    at = _overview()
    assert not [w for w in at.warning if "Trace health" in w.value]
    (box,) = [e for e in at.expander if e.label.startswith("Where the device waits")]
    text = " ".join(m.value for m in box.markdown)
    assert "idle gap" in text and "sdpa \\[h200\\]" in text
    assert "naive \\[h200\\]" not in text  # naive's device is busy most of its step


def test_a_trace_with_lost_launches_is_read_with_care_first():
    run = "gpu-public/tracelens_h100_qwen_chat_sdpa_flash"
    at = _overview({"run": [run], "baseline": run})
    (warning,) = [w for w in at.warning if "Trace health" in w.value]
    assert "device event without launch" in warning.value
