"""Copy classes: every copy is hidden, requested, autograd, communication or unattributed, and
only hidden copies are alarms (in the summary and in the gate's "new copy" rule)."""

from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict

import polars as pl
import pytest

import oracle
from dashboard.engine import load_trace
from dashboard.engine.analyses.copies import classify_chain, copies
from dashboard.engine.compare.gate import Rules, check

SAMPLES = oracle.DATA.parent.parent / "sample_traces" / "cpu"


@pytest.mark.parametrize(
    "chain, origin, copy_class",
    [
        # the article's hidden copy, and layer_norm's
        ("aten::masked_fill > aten::clone > aten::copy_", "aten::masked_fill", "hidden"),
        (
            "aten::layer_norm > aten::native_layer_norm > aten::contiguous > aten::clone > aten::copy_",
            "aten::layer_norm",
            "hidden",
        ),
        ("nn.Module: Attention_0 > aten::masked_fill > aten::clone > aten::copy_", "aten::masked_fill", "hidden"),
        ("Optimizer.step#AdamW.step > aten::reshape > aten::clone > aten::copy_", "aten::reshape", "hidden"),
        ("sglang_profiler::apply_qk_norm_1 > aten::reshape > aten::clone > aten::copy_", "aten::reshape", "hidden"),
        # the op's job is to move data, or the user reads a value back
        ("aten::to > aten::_to_copy > aten::copy_", "aten::to", "requested"),
        ("aten::contiguous > aten::clone > aten::copy_", "aten::contiguous", "requested"),
        ("aten::cat", "aten::cat", "requested"),
        ("aten::is_nonzero > aten::item > aten::_local_scalar_dense", "aten::is_nonzero", "requested"),
        ("CompiledFunction > aten::clone > aten::copy_", "aten::clone", "requested"),
        # autograd: gradient accumulation and backward formulas
        (
            "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad > torch::autograd::AccumulateGrad > aten::copy_",
            "aten::copy_",
            "autograd",
        ),
        (
            "autograd::engine::evaluate_function: SliceBackward0 > SliceBackward0 > aten::slice_backward > aten::copy_",
            "aten::slice_backward",
            "autograd",
        ),
        ("autograd::engine::evaluate_function: CompiledFunctionBackward > CompiledFunctionBackward", None, "autograd"),
        # communication, even when autograd hooks run it
        (
            "torch.distributed.ddp.reducer::copy_bucket_to_grad > aten::copy_",
            "torch.distributed.ddp.reducer::copy_bucket_to_grad",
            "communication",
        ),
        (
            "autograd::engine::evaluate_function: AddBackward0 > c10d::allreduce_ > record_param_comms > aten::copy_",
            "c10d::allreduce_",
            "communication",
        ),
        # nothing to blame
        ("", None, "unattributed"),
        ("CompiledFunction", None, "unattributed"),
    ],
)
def test_each_chain_gets_the_class_a_reader_would_give_it(chain, origin, copy_class):
    assert classify_chain(chain.split(" > ") if chain else []) == (origin, copy_class)


def _gpu_trace(chain: list[str]) -> bytes:
    """One ProfilerStep holding the ops of `chain` (nested), a cudaMemcpyAsync in the innermost,
    and its DtoD memcpy on the device."""
    events = [{"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 1000}]
    for depth, name in enumerate(chain):
        events.append(
            {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": 10 + depth, "dur": 500 - 2 * depth}
        )
    events += [
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaMemcpyAsync",
            "pid": 1,
            "tid": 1,
            "ts": 100,
            "dur": 5,
            "args": {"correlation": 7},
        },
        {
            "ph": "X",
            "cat": "gpu_memcpy",
            "name": "Memcpy DtoD (Device -> Device)",
            "pid": 0,
            "tid": 7,
            "ts": 110,
            "dur": 3,
            "args": {"correlation": 7, "device": 0, "stream": 7, "bytes": 4096},
        },
    ]
    return json.dumps({"traceEvents": events}).encode()


def test_gradient_accumulation_is_autograd_work_not_a_hidden_copy():
    chain = [
        "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad",
        "torch::autograd::AccumulateGrad",
        "aten::copy_",
    ]
    table = copies(load_trace(_gpu_trace(chain)))
    assert table.select("kind", "op_chain", "copy_class", "hidden").rows() == [("DtoD", chain, "autograd", False)]


def _memcpy_chains(path) -> Counter:
    """(memcpy kind, outermost-first names of the cpu_ops whose span holds its launch) -> count,
    read with the json module: ops found by plain containment on the launch's thread."""
    doc = oracle.raw(path)
    events = oracle.complete(doc)
    ops = defaultdict(list)
    for e in events:
        if e.get("cat") == "cpu_op" and not e["name"].startswith("ProfilerStep#"):
            ops[(e["pid"], e["tid"])].append(e)
    launch = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") in oracle.LAUNCH_CATS and "correlation" in e.get("args", {})
    }
    found = Counter()
    for e in events:
        if e.get("cat") != "gpu_memcpy":
            continue
        call = launch.get(e["args"].get("correlation"))
        if call is None:
            continue
        holders = [
            o
            for o in ops[(call["pid"], call["tid"])]
            if o["ts"] <= call["ts"] and call["ts"] + call.get("dur", 0) <= o["ts"] + o.get("dur", 0)
        ]
        holders.sort(key=lambda o: (o["ts"], -o.get("dur", 0)))
        found[(e["name"].split()[1], tuple(o["name"] for o in holders))] += 1
    return found


def test_ddp_bucket_copies_are_communication_and_raise_no_alarm(trace_of):
    path = oracle.DATA / "hta_v100_ns_resolution.pt.trace.json.gz"
    want = sum(
        n
        for (kind, chain), n in _memcpy_chains(path).items()
        if "torch.distributed.ddp.reducer::copy_bucket_to_grad" in chain
    )
    assert want > 0
    table = copies(trace_of(path))
    comm = table.filter(pl.col("copy_class") == "communication")
    assert comm.height == want
    assert not comm["hidden"].any()
    assert set(comm["origin"]) == {"torch.distributed.ddp.reducer::copy_bucket_to_grad"}


def test_memcpys_launched_by_aten_to_and_cat_are_requested_and_none_is_blamed_on_detach(trace_of):
    path = oracle.DATA / "hta_a100_control.json.gz"
    chains = _memcpy_chains(path)
    table = copies(trace_of(path)).filter(pl.col("name").str.starts_with("Memcpy"))
    got = Counter(
        (kind, tuple(chain), cls) for kind, chain, cls in table.select("kind", "op_chain", "copy_class").iter_rows()
    )
    to_htod = chains[("HtoD", ("aten::to", "aten::_to_copy", "aten::copy_"))]
    assert to_htod == 150
    assert got[("HtoD", ("aten::to", "aten::_to_copy", "aten::copy_"), "requested")] == to_htod
    cat_dtod = sum(n for (kind, chain), n in chains.items() if kind == "DtoD" and chain[:1] == ("aten::cat",))
    assert cat_dtod > 0
    assert got[("DtoD", ("aten::cat",), "requested")] == cat_dtod
    assert not any("aten::detach" in chain for (_, chain, _) in got)
    # every memcpy has the op chain the json containment gives
    assert Counter({(kind, chain): n for (kind, chain, _), n in got.items()}) == +Counter(
        {key: n for key, n in chains.items()}
    )


def _with_requested_copy(tmp_path):
    """naive_inplace with one more aten::contiguous > aten::clone > aten::copy_ inside each step."""
    doc = json.loads(gzip.decompress((SAMPLES / "naive_inplace.json.gz").read_bytes()))
    steps = [e for e in doc["traceEvents"] if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
    thread = {"pid": steps[0]["pid"], "tid": steps[0]["tid"]}
    for step in steps:
        end = step["ts"] + step["dur"]
        for depth, name in enumerate(["aten::contiguous", "aten::clone", "aten::copy_"]):
            doc["traceEvents"].append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": name,
                    **thread,
                    "ts": end - 0.9 + 0.1 * depth,
                    "dur": 0.5 - 0.1 * depth,
                }
            )
    path = tmp_path / "naive_inplace_contiguous.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_new_requested_copy_holds_the_gate_and_a_new_hidden_copy_fails_it(trace_of, tmp_path):
    base = trace_of(SAMPLES / "naive_inplace.json.gz")
    contiguous = load_trace(_with_requested_copy(tmp_path))
    assert set(copies(contiguous)["copy_class"]) == {"requested"}
    rules = Rules(max_kernel_increase_pct=100)
    assert check(base, contiguous, rules) == []
    problems = check(base, trace_of(SAMPLES / "naive.json.gz"), rules)
    assert problems == ["new copies: cpu from aten::masked_fill > aten::clone > aten::copy_"]
