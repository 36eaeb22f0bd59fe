"""The trace health check: each fault injected into a real trace (our H200 naive run, read and
written back with the json module) is found and counted, and the untouched trace is healthy.

The oracle is the injection itself (how many events were changed, by hand) plus plain-loop
readings of the untouched JSON that show the fault was not there before.
"""

from __future__ import annotations

import copy
import gzip
import json
import re
from pathlib import Path

import pytest

import oracle
from dashboard.cli import main as cli
from dashboard.engine import load_trace
from dashboard.engine.analyses.health import HEALTH_CHECKS, health

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


def launched_in(doc: dict, start: float, end: float) -> list[dict]:
    """The device events whose launch call starts inside [start, end), in time order."""
    corr = {
        e["args"]["correlation"]
        for e in oracle.complete(doc)
        if e.get("cat") in LAUNCH and start <= float(e["ts"]) < end and "correlation" in e.get("args", {})
    }
    return [e for e in device_events(doc) if e["args"].get("correlation") in corr]


def longest_gap(events: list[dict]) -> tuple[float, float]:
    """(longest idle stretch between the merged intervals, first start to last end), µs: a plain walk."""
    spans = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events)
    gap, reach = 0.0, spans[0][1]
    for a, b in spans[1:]:
        gap = max(gap, a - reach)
        reach = max(reach, b)
    return gap, reach - spans[0][0]


def test_no_idle_gap_where_the_device_runs_the_steps_work_back_to_back(doc):
    for name, start, end in oracle.step_spans(doc):
        gap, span = longest_gap(launched_in(doc, start, end))
        assert gap < 0.5 * span, name
    assert "idle_gap" not in found(load_trace(NAIVE))


def test_a_step_where_the_device_idles_most_of_the_time(doc, tmp_path):
    """Half of a step's device work runs late (a host stall between its launches): the longest
    stretch without the step's work is most of the span of that work."""
    d = copy.deepcopy(doc)
    name, start, end = oracle.step_spans(d)[1]
    work = launched_in(d, start, end)
    _, span = longest_gap(work)
    for e in work[len(work) // 2 :]:
        e["ts"] = float(e["ts"]) + 3 * span
    gap, new_span = longest_gap(work)
    assert gap > 0.5 * new_span  # the oracle's reading of the injected fault
    result = found(load(d, tmp_path, "idle"))
    assert result.get("idle_gap") == 1 and "duration_overflow" not in result


def test_a_step_that_runs_past_every_event_is_an_overflow_measured_by_its_events(doc, tmp_path):
    """HTA's Triton example's fault on our trace: the last step's span as written runs 20x past
    its own events and past every other event. It is duration_overflow, not idle time, and the
    step is measured by the events it holds (the plain reading: the last end of the events that
    start inside the written span)."""
    d = copy.deepcopy(doc)
    name, start, end = oracle.step_spans(d)[-1]
    last = [e for e in oracle.complete(d) if e.get("name") == name and e.get("cat") != "gpu_user_annotation"]
    for step in last:
        step["dur"] = float(step["dur"]) * 20
    written_end = start + float(last[0]["dur"])
    held_end = max(
        float(e["ts"]) + float(e.get("dur", 0))
        for e in oracle.complete(d)
        if start <= float(e["ts"]) < written_end and not e["name"].startswith("ProfilerStep#")
    )
    trace = load(d, tmp_path, "overflowed-step")
    result = found(trace)
    assert result.get("duration_overflow") == 1 and "idle_gap" not in result
    measured = trace.steps.filter(trace.steps["name"] == name).row(0, named=True)
    assert measured["dur_ns"] == pytest.approx((held_end - start) * 1000, abs=1)


def _pdl(doc: dict, device_name: str | None, pairs: int) -> dict:
    """The trace with the second kernel of a repeated kernel pair starting 1 µs... under the first's
    tail, `pairs` times (one pair per step), and the device renamed when device_name is given."""
    d = copy.deepcopy(doc)
    if device_name is not None:
        d["deviceProperties"][0]["name"] = device_name
        d["deviceProperties"][0]["computeMajor"], d["deviceProperties"][0]["computeMinor"] = 8, 0
    done = 0
    for name, start, end in oracle.step_spans(d):
        work = [e for e in launched_in(d, start, end) if e.get("cat") == "kernel"]
        first, second = next(
            (a, b)
            for a, b in zip(work, work[1:])
            if min(float(a["dur"]), float(b["dur"])) > 6.0  # room for a 2 µs overlap under half of each
        )
        second["ts"] = float(first["ts"]) + float(first["dur"]) - 2.0
        done += 1
        if done == pairs:
            break
    return d


def test_a_repeated_small_overlap_on_hopper_is_dependent_launch_not_a_fault(doc, tmp_path):
    steps = len(oracle.step_spans(doc))
    result = found(load(_pdl(doc, None, steps), tmp_path, "pdl"))
    assert result.get("dependent_launch_overlap") == steps and "overlapping_kernels" not in result


def test_the_same_overlaps_on_an_a100_stay_faults(doc, tmp_path):
    steps = len(oracle.step_spans(doc))
    result = found(load(_pdl(doc, "NVIDIA A100-SXM4-80GB", steps), tmp_path, "a100"))
    assert result.get("overlapping_kernels") == steps and "dependent_launch_overlap" not in result


def test_an_overlap_that_hides_a_kernel_inside_another_stays_a_fault(doc, tmp_path):
    d = copy.deepcopy(doc)
    for name, start, end in oracle.step_spans(d):
        work = [e for e in launched_in(d, start, end) if e.get("cat") == "kernel"]
        a, b = next((a, b) for a, b in zip(work, work[1:]) if float(a["dur"]) > 3 * float(b["dur"]) + 2)
        b["ts"] = float(a["ts"]) + 1.5  # b runs wholly inside a: time counted twice
    result = found(load(d, tmp_path, "nested"))
    assert result.get("overlapping_kernels") == len(oracle.step_spans(doc))
    assert "dependent_launch_overlap" not in result


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


def test_the_bundled_article_path_shows_no_idle_gap_that_is_not_there():
    """The H200 sdpa runs launch a memset and one fused kernel a step: the device's gap between
    them is under half of the span of their work (oracle below), so no idle_gap is claimed, though
    the CPU step is longer than the device work (that is the host's time, not an idle device)."""
    for run in ("sdpa", "sdpa-flash", "naive"):
        path = NAIVE.parent / f"{run}.json.gz"
        if not path.is_file():
            continue
        d = oracle.raw(path)
        for name, start, end in oracle.step_spans(d):
            gap, span = longest_gap(launched_in(d, start, end))
            assert gap < 0.5 * span, (run, name)
    at = _overview()
    assert not [w for w in at.warning if "Trace health" in w.value]
    assert not [e for e in at.expander if e.label.startswith("How the device ran")]


def test_the_overview_keeps_how_the_device_ran_apart_from_trace_faults():
    """HTA's MI250 toy: device 2 idles for one stretch of most of its step's work (the oracle's
    plain walk below): a fact of the run, shown folded after the alarms, not the yellow "read these
    numbers with care" that lost or overlapping events deserve."""
    d = oracle.raw(Path(__file__).parent / "data" / "hta_mi250_rocm_minitoy.json.gz")
    (name, start, end), *_ = oracle.step_spans(d)
    on_2 = [e for e in launched_in_any(d, start, end) if e.get("args", {}).get("device") == 2]
    gap, span = longest_gap(on_2)
    assert gap > 0.5 * span
    run = "gpu-public/hta_mi250_rocm_minitoy"
    at = _overview({"run": [run], "baseline": run})
    assert not [w for w in at.warning if "Trace health" in w.value]
    (box,) = [e for e in at.expander if e.label.startswith("How the device ran")]
    text = " ".join(m.value for m in box.markdown)
    assert "idle gap" in text and f"{gap:,.1f}".split(".")[0] in text  # µs, as the oracle reads it


def launched_in_any(doc: dict, start: float, end: float) -> list[dict]:
    """launched_in for traces with several devices and streams: every device event, any lane."""
    corr = {
        e["args"]["correlation"]
        for e in oracle.complete(doc)
        if e.get("cat") in LAUNCH and start <= float(e["ts"]) < end and "correlation" in e.get("args", {})
    }
    return [e for e in oracle.complete(doc) if e.get("cat") in DEVICE and e.get("args", {}).get("correlation") in corr]


def test_a_trace_with_lost_launches_is_read_with_care_first():
    run = "gpu-public/tracelens_h100_qwen_chat_sdpa_flash"
    at = _overview({"run": [run], "baseline": run})
    (warning,) = [w for w in at.warning if "Trace health" in w.value]
    assert "device event without launch" in warning.value


def test_every_registered_check_is_documented_and_has_an_injected_fault_test():
    """One registry (constants.HEALTH_KINDS, one registered function each): every check is defined in
    docs/analysis.md's health tables and found by a test of this file on a trace built to hold it."""
    from dashboard.engine.analyses import health as module
    from dashboard.engine.model.constants import HEALTH_KINDS, WAITING_CHECKS

    assert set(module._REGISTRY) == set(HEALTH_KINDS) and HEALTH_CHECKS == tuple(HEALTH_KINDS)
    assert set(WAITING_CHECKS) == {n for n, kind in HEALTH_KINDS.items() if kind == "fact"}
    docs = (Path(__file__).parent.parent / "docs" / "analysis.md").read_text()
    tests = Path(__file__).read_text()
    for name in HEALTH_KINDS:
        assert f"| `{name}` |" in docs, f"{name} is not defined in docs/analysis.md"
        # a fault found, not one absent: `.get(name) == 0` or `== None` would not count
        assert re.search(rf'\.get\("{name}"\) == (?!0\b|None\b)', tests), f"{name} has no injected-fault test here"


def test_device_events_the_device_queues_itself_are_no_lost_launches(tmp_path):
    """An MTIA trace (Kineto's shape, written here: no public MTIA trace exists): dma_request and
    pe_exe events with no correlation are queued by the device itself; only the kernel that lost
    its launch call is device_event_without_launch. The oracle counts the written events."""
    from test_load_devices import vendor_trace, write

    doc = vendor_trace("mtia_runtime", "mtia_ccp_events")
    ccp = [e for e in doc["traceEvents"] if e.get("cat") == "mtia_ccp_events"]
    queued = [("dma_request", 0, 3), ("dma_request", 1, 4), ("pe_exe", 2, 2)]  # (name, ts offset, dur)
    base = max(float(e["ts"]) + float(e["dur"]) for e in ccp)
    for name, offset, dur in queued:
        doc["traceEvents"].append(
            {
                "ph": "X",
                "cat": "mtia_ccp_events",
                "name": name,
                "pid": 0,
                "tid": 3,
                "ts": base + 10 * (offset + 1),
                "dur": dur,
                "args": {"device": 0},
            }
        )
    lost_corr = ccp[-1]["args"]["correlation"]
    doc["traceEvents"] = [
        e for e in doc["traceEvents"] if not (e.get("cat") == "mtia_runtime" and e["args"]["correlation"] == lost_corr)
    ]
    no_corr = [
        e["name"] for e in doc["traceEvents"] if e.get("cat") == "mtia_ccp_events" and "correlation" not in e["args"]
    ]
    assert sorted(no_corr) == ["dma_request", "dma_request", "pe_exe"]
    result = {f["check"]: f for f in health(load_trace(write(tmp_path, doc)))}
    assert result.get("device_event_without_launch", {}).get("count") == 1  # the kernel's lost launch only
    example = result["device_event_without_launch"]["example"]
    assert "not counted: 2 dma_request, 1 pe_exe events" in example and "mtia" in example
    # the same queued events with every launch present: no finding at all
    whole = vendor_trace("mtia_runtime", "mtia_ccp_events")
    whole["traceEvents"] += [
        e for e in doc["traceEvents"] if e.get("cat") == "mtia_ccp_events" and "correlation" not in e["args"]
    ]
    assert "device_event_without_launch" not in found(load_trace(write(tmp_path, whole, "whole.json")))
