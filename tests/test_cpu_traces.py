"""CPU-only traces written here by torch.profiler: leaf ops as the unit of work, CPU copies with
their op chain, scalar conversions left out, and the CPU attention backends."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest

torch = pytest.importorskip("torch")

from dashboard.engine import load_trace, summarize  # noqa: E402
from dashboard.engine.analyses.copies import copies  # noqa: E402
from dashboard.engine.analyses.kernels import per_step, work_events, work_unit  # noqa: E402


def _profile(fn, path: Path, steps: int = 2) -> Path:
    """Run fn under torch.profiler with a schedule, record_shapes on, and export a Chrome trace."""
    from torch.profiler import ProfilerActivity, profile, schedule

    fn()
    sched = schedule(wait=0, warmup=1, active=steps)
    with profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=True,
        schedule=sched,
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    ) as prof:
        for _ in range(1 + steps):
            with torch.no_grad():
                fn()
            prof.step()
    return path


def _qkv():
    torch.manual_seed(0)
    return [torch.randn(1, 2, 16, 8) for _ in range(3)]


@pytest.fixture(scope="module")
def naive_trace(tmp_path_factory) -> Path:
    q, k, v = _qkv()
    mask = torch.triu(torch.ones(16, 16, dtype=torch.bool), diagonal=1)

    def naive():
        scores = (q @ k.transpose(-2, -1)) * 0.125
        scores = scores.masked_fill(mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v

    return _profile(naive, tmp_path_factory.mktemp("cpu") / "naive.json")


@pytest.fixture(scope="module")
def sdpa_trace(tmp_path_factory) -> Path:
    q, k, v = _qkv()
    return _profile(
        lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
        tmp_path_factory.mktemp("cpu") / "sdpa.json",
    )


def _raw_ops(path: Path) -> list[dict]:
    return [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"]


def _holds(outer: dict, inner: dict) -> bool:
    return (
        outer["tid"] == inner["tid"]
        and outer["ts"] <= inner["ts"]
        and outer["ts"] + outer["dur"] >= inner["ts"] + inner["dur"]
        and outer is not inner
    )


def test_the_out_of_place_masked_fill_copies_the_scores_through_clone(naive_trace):
    ops = _raw_ops(naive_trace)
    # oracle: every aten::copy_ held by an aten::clone held by an aten::masked_fill
    hidden = [
        c
        for c in ops
        if c["name"] == "aten::copy_"
        and any(
            o["name"] == "aten::clone"
            and _holds(o, c)
            and any(m["name"] == "aten::masked_fill" and _holds(m, o) for m in ops)
            for o in ops
        )
    ]
    steps = sum(
        1
        for e in json.loads(naive_trace.read_text())["traceEvents"]
        if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"
    )
    assert len(hidden) == steps == 2
    table = copies(load_trace(naive_trace))
    flagged = table.filter(pl.col("hidden"))
    assert flagged.height == len(hidden)
    assert set(map(tuple, flagged["op_chain"].to_list())) == {("aten::masked_fill", "aten::clone", "aten::copy_")}
    # bytes from Input Dims x element size: the scores tensor, 1x2x16x16 float32
    dims = hidden[0]["args"]["Input Dims"][1]
    assert flagged["bytes"].to_list() == [4 * dims[0] * dims[1] * dims[2] * dims[3]] * 2 == [2048, 2048]


def test_the_scalar_conversion_of_scores_times_a_float_is_not_flagged(naive_trace):
    ops = _raw_ops(naive_trace)
    scalar_copies = [c for c in ops if c["name"] == "aten::copy_" and c["args"]["Input Dims"][1] == []]
    assert scalar_copies, "the trace really holds the 0-dim copy from `scores * 0.125`"
    table = copies(load_trace(naive_trace))
    assert table.height == len([c for c in ops if c["name"] == "aten::copy_"]) - len(scalar_copies)


def test_a_cpu_only_trace_counts_the_ops_that_do_work_and_hold_no_other(naive_trace):
    trace = load_trace(naive_trace)
    assert work_unit(trace) == "leaf cpu_op"
    ops = _raw_ops(naive_trace)
    spans = sorted(
        (
            e
            for e in json.loads(naive_trace.read_text())["traceEvents"]
            if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
        ),
        key=lambda s: s["ts"],
    )
    # Q@K^T and @V are aten::bmm under aten::matmul; `* 0.125` is aten::mul holding the scalar's
    # copy_; masked_fill is clone > copy_ then masked_fill_; softmax is aten::_softmax. Views,
    # allocations and the ops that only hold these are not work.
    expected = ["aten::bmm", "aten::copy_", "aten::copy_", "aten::masked_fill_", "aten::_softmax", "aten::bmm"]
    for span in spans:
        in_step = [
            o["name"] for o in sorted(ops, key=lambda o: o["ts"]) if span["ts"] <= o["ts"] < span["ts"] + span["dur"]
        ]
        for name in set(expected):
            assert in_step.count(name) >= expected.count(name)
    work = work_events(trace)
    for step in per_step(trace)["step"].to_list():
        assert work.filter(pl.col("step") == step).sort("ts_ns")["name"].cast(pl.String).to_list() == expected
    summary = summarize(trace)
    assert [s["work"] for s in summary["steps"]] == [len(expected)] * len(spans)
    assert summary["device"]["type"] == "cpu" and summary["work_unit"] == "leaf cpu_op"
    assert summary["attention"]["backends"] == ["eager"]


def test_sdpa_on_cpu_is_the_cpu_flash_kernel_and_copies_nothing(sdpa_trace):
    ops = _raw_ops(sdpa_trace)
    fused = [o for o in ops if o["name"] == "aten::_scaled_dot_product_flash_attention_for_cpu"]
    trace = load_trace(sdpa_trace)
    summary = summarize(trace)
    assert summary["attention"]["backends"] == ["cpu_flash"]
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in summary["attention"]["evidence"]
    assert len(fused) == 2  # one per profiled step
    assert not [c for c in summary["copies"] if c["hidden"]]


def test_a_gzipped_export_reads_the_same(naive_trace, tmp_path):
    gz = tmp_path / "naive.pt.trace.json.gz"
    gz.write_bytes(gzip.compress(naive_trace.read_bytes()))
    assert summarize(load_trace(gz))["steps"] == summarize(load_trace(naive_trace))["steps"]


SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces" / "cpu"


def test_a_compiled_hand_written_attention_is_named_inductor_and_its_bookkeeping_is_not_work(trace_of):
    path = SAMPLES / "naive.compiled.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()))
    ops = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    fused = {o["name"] for o in ops if "cpp_fused" in o["name"] and "softmax" in o["name"]}
    assert fused, "inductor fused the softmax into a generated kernel"
    summary = summarize(trace_of(path))
    assert summary["attention"]["backends"] == ["inductor"]
    assert fused <= set(summary["attention"]["evidence"])
    # The compiled naive attention: two bmm around one generated kernel; Dynamo's markers
    # (TorchDynamo Cache Lookup, Torch-Compiled Region, ...) are bookkeeping, not work.
    assert any(o["name"].startswith("TorchDynamo Cache Lookup") for o in ops)
    spans = [e for e in doc["traceEvents"] if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
    assert [s["work"] for s in summary["steps"]] == [3] * len(spans)
    work = work_events(trace_of(path))
    first = work.filter(pl.col("step") == work["step"].min()).sort("ts_ns")["name"].cast(pl.String).to_list()
    assert first[0] == first[2] == "aten::bmm" and first[1] in fused
