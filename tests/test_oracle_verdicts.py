"""The summary's numbers against json-module oracles (tests/oracle.py), on every committed real trace:
the step spans, each device's busy time, idle gaps and collectives' share, overlapping kernels, the
memory peaks, the kernel families' times and the attention time. A golden summary records what the
engine said; these say what the trace says (issue 37 item 11)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

import oracle
from dashboard.engine import load_trace, summarize

REPO = Path(__file__).resolve().parent.parent
TRACES = sorted((REPO / "tests" / "data").glob("*.json.gz")) + sorted((REPO / "sample_traces").glob("*/*.json.gz"))


def trace_id(path: Path) -> str:
    return f"{path.parent.name}/{path.name.removesuffix('.json.gz')}"


@pytest.fixture(scope="module")
def verdicts(trace_of):
    """verdicts(path) -> (the engine's summary as `summary --json` prints it, the oracle's facts)."""
    cache: dict[Path, tuple[dict, dict]] = {}

    def get(path: Path) -> tuple[dict, dict]:
        if path not in cache:
            summary = json.loads(json.dumps(summarize(trace_of(path))))
            cache[path] = (summary, oracle.facts(path.resolve()))
        return cache[path]

    return get


def only(lines: list[str], *fields: str) -> list[str]:
    """The disagreement lines about the named fields."""
    return [line for line in lines if any(field in line.split(":")[0] for field in fields)]


@pytest.mark.parametrize("path", TRACES, ids=trace_id)
def test_each_step_is_its_profiler_step_span_clamped_where_it_overflowed(verdicts, path):
    summary, found = verdicts(path)
    assert only(oracle.step_disagreements(summary, found), "steps[].name", ".dur_us") == []


@pytest.mark.parametrize("path", TRACES, ids=trace_id)
def test_a_steps_busy_time_is_the_union_of_its_device_work_on_the_busiest_device(verdicts, path):
    summary, found = verdicts(path)
    assert only(oracle.step_disagreements(summary, found), ".busy_us") == []


@pytest.mark.parametrize("path", TRACES, ids=trace_id)
def test_a_steps_device_work_is_what_its_launch_calls_queued(verdicts, path):
    summary, found = verdicts(path)
    assert only(oracle.step_disagreements(summary, found), ".kernel", ".gpu_memcpy", ".gpu_memset", ".work") == []


@pytest.mark.parametrize("path", TRACES, ids=trace_id)
def test_idle_gap_only_where_a_device_idles_over_half_its_span_in_the_step(verdicts, path):
    summary, found = verdicts(path)
    assert only(oracle.health_disagreements(summary, found), "idle_gap") == []


@pytest.mark.parametrize("path", TRACES, ids=trace_id)
def test_comm_dominated_only_where_collectives_are_over_half_a_devices_busy_time(verdicts, path):
    summary, found = verdicts(path)
    assert only(oracle.health_disagreements(summary, found), "comm_dominated") == []


@pytest.mark.parametrize("path", TRACES, ids=trace_id)
def test_overlapping_kernels_counts_the_events_that_start_before_their_stream_is_free(verdicts, path):
    summary, found = verdicts(path)
    assert only(oracle.health_disagreements(summary, found), "overlapping_kernels", "duration_overflow") == []


@pytest.mark.parametrize("path", TRACES, ids=trace_id)
def test_no_share_is_above_100_percent(verdicts, path):
    summary, found = verdicts(path)
    assert only(oracle.family_disagreements(summary, found), ".share") == []
    assert only(oracle.attention_disagreements(summary, found), "measured_share") == []
    for finding in summary["health"]:
        if finding["check"] in ("idle_gap", "comm_dominated"):
            assert all(int(p) <= 100 for p in re.findall(r"(\d+)%", finding["example"])), finding


@pytest.mark.parametrize("path", TRACES, ids=trace_id)
def test_the_families_times_add_up_to_the_steps_device_work(verdicts, path):
    summary, found = verdicts(path)
    assert oracle.family_disagreements(summary, found) == []


@pytest.mark.parametrize("path", TRACES, ids=trace_id)
def test_the_memory_peaks_are_the_memory_events_totals(verdicts, path):
    summary, found = verdicts(path)
    assert oracle.memory_disagreements(summary, found) == []


@pytest.mark.parametrize("path", TRACES, ids=trace_id)
def test_attention_time_is_the_attention_kernels_and_the_work_sdpa_launched(verdicts, path):
    summary, found = verdicts(path)
    assert oracle.attention_disagreements(summary, found) == []


# ---------------------------------------------------------------- the oracles' own positive cases


def test_the_rocm_minitoy_idles_over_half_its_first_step_on_the_oracle_and_the_engine(verdicts):
    """A real trace over the idle_gap threshold: 6.63 ms of an 8.91 ms device span on device 2."""
    summary, found = verdicts(REPO / "tests" / "data" / "hta_mi250_rocm_minitoy.json.gz")
    assert oracle.idle_gap_steps(found) == [1]
    assert [f["count"] for f in summary["health"] if f["check"] == "idle_gap"] == [1]


def test_the_triton_example_step_overflowed_and_is_measured_to_its_held_extent(verdicts):
    """ProfilerStep#1 lasts 13,336,316 µs in a trace whose other events span 355 ms: held to the last
    end of what started inside it (cudaDeviceSynchronize), 1,530.844 µs."""
    summary, found = verdicts(REPO / "tests" / "data" / "hta_triton_example.json.gz")
    (step,) = found["windows"]
    assert step["overflowed"] and step["end"] - step["start"] == 13_336_315_805
    assert step["stop"] - step["start"] == 1_530_844
    assert summary["steps"][0]["dur_us"] == 1530.844
    assert any(f["check"] == "duration_overflow" for f in summary["health"])


def _made_up_trace(path: Path) -> Path:
    """Three steps on device 0, µs: step 1 collectives 60 of 75 busy (comm_dominated); step 2 a gap of
    80 in a device span of 100 (idle_gap); step 3 a gap of exactly half its span (neither)."""
    kernels = [  # (step start, kernel name, ts, dur)
        (0, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 10, 60),
        (0, "ampere_sgemm_128x64_nn", 75, 15),
        (200, "ampere_sgemm_128x64_nn", 200, 10),
        (200, "ampere_sgemm_128x64_nn", 290, 10),
        (400, "ampere_sgemm_128x64_nn", 400, 25),
        (400, "ampere_sgemm_128x64_nn", 475, 25),
    ]
    base = 1_000_000
    events = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": f"ProfilerStep#{n + 1}",
            "pid": 1,
            "tid": 1,
            "ts": base + s,
            "dur": 150,
        }
        for n, s in enumerate((0, 200, 400))
    ]
    for corr, (start, name, ts, dur) in enumerate(kernels, start=1):
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": base + start + corr,
                "dur": 1,
                "args": {"correlation": corr},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": name,
                "pid": 0,
                "tid": 7,
                "ts": base + ts,
                "dur": dur,
                "args": {"device": 0, "stream": 7, "correlation": corr},
            }
        )
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    return path


def test_a_made_up_trace_fires_comm_dominated_and_idle_gap_where_the_oracle_does(tmp_path):
    path = _made_up_trace(tmp_path / "made_up.json.gz")
    found = oracle.facts(path)
    assert oracle.comm_dominated_steps(found) == [1]
    assert oracle.idle_gap_steps(found) == [2]
    summary = json.loads(json.dumps(summarize(load_trace(path))))
    assert oracle.summary_disagreements(summary, path) == []
