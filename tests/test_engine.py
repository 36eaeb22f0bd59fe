"""The trace engine against real GPU traces, checked with json-module oracles (tests/oracle.py)."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from decimal import Decimal

import polars as pl
import pytest

import oracle
from dashboard.engine import TraceError, load_trace, summarize
from dashboard.engine.analyses.backends import detect_backends
from dashboard.engine.analyses.copies import copies
from dashboard.engine.analyses.kernels import kernel_table, per_step, work_unit

DATA = oracle.DATA
GPU_TRACES = [
    "hta_a100_control.json.gz",
    "hta_v100_test.json.gz",
    "hta_v100_ns_resolution.pt.trace.json.gz",
    "kineto_legacy_resnet50_v100.pt.trace.json.gz",
    "tracelens_h100_bert_sdpa_flash.json.gz",
    "hta_mi250_rocm_minitoy.json.gz",
]


@pytest.fixture(scope="module")
def loaded(trace_of) -> dict:
    cache: dict = {}

    def get(name: str):
        if name not in cache:
            cache[name] = (trace_of(DATA / name), oracle.raw(DATA / name))
        return cache[name]

    return get


@pytest.mark.parametrize("name", GPU_TRACES)
def test_kernels_memcpy_memset_per_step_match_the_launches_in_each_step(loaded, name):
    trace, doc = loaded(name)
    expected = oracle.gpu_per_step(doc)
    table = per_step(trace)
    assert table["name"].to_list() == [n for n, _, _ in oracle.step_spans(doc)]
    for row in table.iter_rows(named=True):
        want = expected[row["name"]]
        assert (row["kernel"], row["gpu_memcpy"], row["gpu_memset"]) == (
            want["kernel"],
            want["gpu_memcpy"],
            want["gpu_memset"],
        ), row["name"]


@pytest.mark.parametrize("name", GPU_TRACES)
def test_memcpy_kinds_and_category_counts(loaded, name):
    trace, doc = loaded(name)
    summary = summarize(trace)
    assert summary["memcpy"] == dict(oracle.memcpy_kinds(doc))
    assert summary["events"] == len(oracle.complete(doc))
    raw_counts = oracle.category_counts(doc)
    for raw_cat, norm in (
        ("kernel", "kernel"),
        ("Kernel", "kernel"),
        ("cpu_op", "cpu_op"),
        ("Operator", "cpu_op"),
        ("Runtime", "cuda_runtime"),
        ("cuda_runtime", "cuda_runtime"),
    ):
        if raw_counts.get(raw_cat):
            assert summary["counts"][norm] == raw_counts[raw_cat]


def test_legacy_2021_schema_normalizes_categories_streams_and_external_ids(loaded):
    trace, doc = loaded("kineto_legacy_resnet50_v100.pt.trace.json.gz")
    kernels = trace.events.filter(pl.col("cat") == "kernel")
    raw_kernels = [e for e in oracle.complete(doc) if e["cat"] == "Kernel"]
    assert kernels.height == len(raw_kernels) == 8772
    # tid "stream 7" -> stream 7; lower-case "external id" is read
    assert set(kernels["stream"].unique().to_list()) == {int(e["tid"].split()[-1]) for e in raw_kernels}
    assert kernels["external_id"].null_count() == sum("external id" not in e["args"] for e in raw_kernels)
    # integer epoch µs become ns from the first event
    first = min(e["ts"] for e in oracle.complete(doc))
    assert sorted(kernels["ts_ns"].to_list()) == sorted((e["ts"] - first) * 1000 for e in raw_kernels)


def test_rocm_trace_links_hip_calls_and_takes_memcpy_bytes_from_the_call(loaded):
    trace, doc = loaded("hta_mi250_rocm_minitoy.json.gz")
    summary = summarize(trace)
    assert summary["device"]["type"] == "rocm"
    assert [s["kernel"] for s in summary["steps"]] == [c["kernel"] for c in oracle.gpu_per_step(doc).values()]
    hip_sizes = sorted(int(e["args"]["size"]) for e in oracle.complete(doc) if e["name"].startswith("hipMemcpy"))
    memcpy = trace.events.filter(pl.col("cat") == "gpu_memcpy")
    assert sorted(memcpy["bytes"].to_list()) == hip_sizes


def test_h100_sdpa_trace_is_detected_as_flash_with_the_kernel_as_evidence(loaded):
    trace, doc = loaded("tracelens_h100_bert_sdpa_flash.json.gz")
    found = detect_backends(trace)
    raw_flash = {e["name"] for e in oracle.complete(doc) if "flash_fwd" in e["name"]}
    assert found.backends == ["flash"]
    assert raw_flash and raw_flash <= set(found.evidence["flash"])
    assert (
        sum(1 for e in oracle.complete(doc) if e.get("cat") == "kernel" and "pytorch_flash::flash_fwd" in e["name"])
        == 4
    )
    table = kernel_table(trace)
    flash = table.filter(pl.col("name").str.contains("pytorch_flash::flash_fwd"))
    assert flash["count"].sum() == 4 and set(flash["family"].to_list()) == {"fused attention"}


def test_timestamps_are_integer_ns_from_the_trace_start_without_float_drift():
    path = DATA / "hta_v100_ns_resolution.pt.trace.json.gz"
    text = gzip.decompress(path.read_bytes()).decode()
    doc = json.loads(text, parse_float=Decimal)
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    origin = min(Decimal(e["ts"]) for e in events)
    want = sorted(int((Decimal(e["ts"]) - origin) * 1000) for e in events)
    trace = load_trace(path)
    assert trace.events["ts_ns"].dtype == pl.Int64
    assert sorted(trace.events["ts_ns"].to_list()) == want
    assert any(w % 1000 for w in want), "the trace really has sub-µs timestamps"


def test_all_top_level_metadata_is_kept(loaded):
    trace, doc = loaded("tracelens_h100_bert_sdpa_flash.json.gz")
    for key, value in doc.items():
        if key != "traceEvents":
            assert trace.meta[key] == value


def test_busy_time_is_the_union_of_gpu_intervals_on_the_busiest_device(loaded):
    trace, _ = loaded("hta_v100_ns_resolution.pt.trace.json.gz")
    doc = oracle.raw(DATA / "hta_v100_ns_resolution.pt.trace.json.gz", parse_float=Decimal)
    spans = oracle.step_spans(doc)
    launch_ts = {
        e["args"]["correlation"]: e["ts"]
        for e in oracle.complete(doc)
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    gpu = [e for e in oracle.complete(doc) if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    table = per_step(trace)
    for (name, start, end), row in zip(spans, table.iter_rows(named=True)):
        in_step = [e for e in gpu if start <= launch_ts.get(e["args"].get("correlation"), -1) < end]
        want_us = max(oracle.union_us(iv) for iv in oracle.by_device(in_step).values())  # the busiest device
        assert row["busy_ns"] == int(want_us * 1000), name


def test_copies_are_attributed_to_the_ops_that_launched_them(loaded):
    trace, doc = loaded("tracelens_h100_bert_sdpa_flash.json.gz")
    runtime = {
        e["args"]["correlation"]: e
        for e in oracle.complete(doc)
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    table = copies(trace)
    memcpys = [e for e in oracle.complete(doc) if e.get("cat") == "gpu_memcpy"]
    assert table.filter(pl.col("kind") != "kernel").height == len(memcpys) == 1
    launch = runtime[memcpys[0]["args"]["correlation"]]
    chain = [
        e["name"]
        for e in oracle.enclosing_ops(
            doc, launch["pid"], launch["tid"], float(launch["ts"]), float(launch["ts"]) + float(launch["dur"])
        )
    ]
    row = table.filter(pl.col("kind") == "DtoH").row(0, named=True)
    assert row["op_chain"] == chain
    assert row["bytes"] == memcpys[0]["args"]["bytes"]


def test_gzip_is_recognised_by_content_whatever_the_name(tmp_path):
    src = DATA / "hta_triton_example.json.gz"
    odd = tmp_path / "trace.bin"
    odd.write_bytes(src.read_bytes())
    plain = tmp_path / "trace.json.gz"  # plain JSON under a .gz name
    plain.write_bytes(gzip.decompress(src.read_bytes()))
    a, b, c = load_trace(odd), load_trace(plain), load_trace(src.read_bytes(), name="upload.json.gz")
    assert a.events.height == b.events.height == c.events.height == len(oracle.complete(oracle.raw(src)))
    assert c.source == "upload.json.gz"


def test_a_trace_without_profiler_steps_gets_one_implicit_step(tmp_path):
    doc = oracle.raw(DATA / "hta_triton_example.json.gz")
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep")]
    path = tmp_path / "nosteps.json"
    path.write_text(json.dumps(doc))
    trace = load_trace(path)
    summary = summarize(trace)
    assert summary["implicit_step"] is True
    assert len(summary["steps"]) == 1
    assert summary["steps"][0]["kernel"] == sum(1 for e in oracle.complete(doc) if e.get("cat") == "kernel")


def test_pid_and_tid_may_be_strings_and_unknown_categories_are_kept(tmp_path):
    events = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#3",
            "pid": "host",
            "tid": "main",
            "ts": 10.5,
            "dur": 100,
        },
        {
            "ph": "X",
            "cat": "CPU_OP",
            "name": "aten::mm",
            "pid": "host",
            "tid": "main",
            "ts": 11,
            "dur": 5,
            "args": {"External id": 7},
        },
        {"ph": "X", "cat": "my_custom_cat", "name": "thing", "pid": "host", "tid": "main", "ts": 20, "dur": 1},
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events, "custom": {"k": 1}}))
    trace = load_trace(path)
    summary = summarize(trace)
    assert summary["counts"] == {"cpu_op": 1, "my_custom_cat": 1, "user_annotation": 1}
    assert trace.meta["custom"] == {"k": 1}
    assert trace.events.filter(pl.col("name") == "aten::mm")["ts_ns"].item() == 500
    assert work_unit(trace) == "leaf cpu_op"


def test_a_trace_cut_off_mid_write_is_salvaged_with_a_warning(tmp_path):
    text = gzip.decompress((DATA / "hta_mi250_rocm_minitoy.json.gz").read_bytes()).decode()
    cut = text[: int(len(text) * 0.6)]
    path = tmp_path / "killed.json"
    path.write_text(cut)
    # oracle: the complete events that fit before the cut
    start = cut.index("[", cut.index('"traceEvents"')) + 1
    decoder, pos, events = json.JSONDecoder(), start, []
    while True:
        while pos < len(cut) and cut[pos] in " \n\r\t,":
            pos += 1
        try:
            obj, pos = decoder.raw_decode(cut, pos)
        except json.JSONDecodeError:
            break
        events.append(obj)
    trace = load_trace(path)
    assert trace.events.height == sum(1 for e in events if e.get("ph") == "X")
    assert len(trace.warnings) == 1 and "cut off" in trace.warnings[0] and "killed.json" in trace.warnings[0]
    assert trace.meta["deviceProperties"][0]["name"] == "AMD Radeon Graphics"


@pytest.mark.parametrize(
    "content, problem",
    [
        (b"", "empty"),
        (b"hello world", "not JSON"),
        (b'{"a": 1}', "not a trace"),
        (b"[1, 2", "not a trace"),
        (b'{"traceEvents": []}', "empty"),
        (b'{"traceEvents": 5}', "not a list"),
        (gzip.compress(b'{"traceEvents": []}' * 200, mtime=0)[:40], "truncated"),
        (b"\x1f\x8bnot really gzip", "gzip"),
    ],
)
def test_bad_input_raises_one_line_naming_the_file(tmp_path, content, problem):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(TraceError) as info:
        load_trace(path)
    message = str(info.value)
    assert message.startswith("bad.json: ") and "\n" not in message
    assert problem in message


def test_reading_a_value_back_to_python_is_not_a_hidden_copy(loaded):
    trace, doc = loaded("tracelens_h100_bert_sdpa_flash.json.gz")
    memcpy = [e for e in oracle.complete(doc) if e.get("cat") == "gpu_memcpy"]
    assert len(memcpy) == 1 and memcpy[0]["args"]["bytes"] == 1  # `if tensor:` reads one bool back
    row = copies(trace).row(0, named=True)
    assert "aten::item" in row["op_chain"] and row["hidden"] is False


def test_a_forced_math_backend_compiled_by_inductor_is_not_a_fallback():
    from dashboard.engine.analyses.backends import fallback

    assert fallback("math", ["inductor"]) is False
    assert fallback("flash", ["math"]) is True
    assert fallback("flash", ["cpu_flash"]) is False


def test_progress_reports_the_fraction_decoded(monkeypatch):
    from dashboard.engine.load import decode as load_decode

    monkeypatch.setattr(load_decode, "ONE_BATCH_BYTES", 0)  # decode in batches, as for files over 48 MB
    seen: list[float] = []
    load_trace(DATA / "hta_a100_control.json.gz", progress=seen.append)
    assert seen[0] == 0.0 and all(a < b for a, b in zip(seen, seen[1:])) and seen[-1] < 1.0
    assert len(seen) == -(-len(oracle.raw(DATA / "hta_a100_control.json.gz")["traceEvents"]) // 25_000)


def test_a_two_gpu_step_takes_the_busiest_gpus_time_not_the_sum(tmp_path):
    launch = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "dur": 1}
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "tid": 7}
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 1000}]
    for corr, (device, ts, dur) in enumerate([(0, 10, 100), (0, 50, 100), (1, 10, 80)]):
        events.append({**launch, "ts": 5 + corr, "args": {"correlation": corr}})
        events.append({**kernel, "pid": device, "ts": ts, "dur": dur, "args": {"correlation": corr, "device": device}})
    path = tmp_path / "two_gpus.json"
    path.write_text(json.dumps({"traceEvents": events}))
    assert per_step(load_trace(path))["busy_ns"].to_list() == [140_000]  # GPU 0: 10..150 us; GPU 1: 80 us


def test_without_profiler_steps_gpu_events_without_launch_still_count(tmp_path):
    events = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "pid": 0,
            "tid": 7,
            "ts": 10 * i,
            "dur": 5,
            "args": {"correlation": i},
        }
        for i in range(4)
    ]
    path = tmp_path / "kernels_only.json"
    path.write_text(json.dumps({"traceEvents": events}))
    summary = summarize(load_trace(path))
    assert summary["implicit_step"] is True and summary["steps"][0]["kernel"] == 4


def test_gpu_events_without_a_launch_belong_to_no_step_and_say_so(loaded):
    trace, doc = loaded("hta_v100_test.json.gz")
    launches = {
        e["args"]["correlation"]
        for e in oracle.complete(doc)
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    orphans = [
        e
        for e in oracle.complete(doc)
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
        and e.get("args", {}).get("correlation") not in launches
    ]
    assert trace.events.filter(
        pl.col("cat").is_in(["kernel", "gpu_memcpy", "gpu_memset"]) & pl.col("step").is_null()
    ).height == len(orphans)
    assert any(f"{len(orphans):,} GPU events have no launch" in w for w in trace.warnings)


def test_a_tiny_gpu_memcpy_is_a_copy_even_when_its_source_is_0_dim(loaded):
    trace, doc = loaded("hta_v100_test.json.gz")
    memcpy = [e for e in oracle.complete(doc) if e.get("cat") == "gpu_memcpy"]
    table = copies(trace)
    assert table.filter(pl.col("kind") != "kernel").height == len(memcpy)
    assert (
        table.filter((pl.col("kind") == "DtoD") & (pl.col("bytes") == 4)).height
        == sum(1 for e in memcpy if e["name"].startswith("Memcpy DtoD") and e["args"].get("bytes") == 4)
        > 0
    )


def test_a_copy_under_autograd_or_compiled_wrappers_takes_its_origin_from_the_first_real_op(loaded):
    trace, _ = loaded("hta_v100_test.json.gz")
    table = copies(trace)
    wrapped = table.filter(pl.col("op_chain").list.first() == "CompiledFunction")
    assert wrapped.height > 0
    for chain, origin in zip(wrapped["op_chain"].to_list(), wrapped["origin"].to_list()):
        assert origin == next((op for op in chain if op != "CompiledFunction"), None)


@pytest.mark.parametrize(
    "name, family",
    [
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::masked_fill_kernel(at::TensorIterator&, c10::Scalar const&)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(c10::BFloat16, bool)#1}, at::detail::Array<char*, 3> >(int, at::native::(anonymous namespace)::masked_fill_kernel(at::TensorIterator&, c10::Scalar const&)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(c10::BFloat16, bool)#1}, at::detail::Array<char*, 3>)",  # noqa: E501 (a real name, kept whole)
            "elementwise",
        ),
        (
            "void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4, at::native::templates::cuda::normal_and_transform<float, float, at::native::(anonymous namespace)::normal_kernel(at::TensorBase const&, double, double, at::CUDAGeneratorImpl*)>",  # noqa: E501 (a real name, kept whole)
            "elementwise",
        ),
        (
            "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, float const*, float const*, float const*, float*, float*, float*)",  # noqa: E501 (a real name, kept whole)
            "reduction",
        ),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",  # noqa: E501 (a real name, kept whole)
            "elementwise",
        ),
        ("Memset (Device)", "memset"),
        (
            "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t> >(pytorch_flash::Flash_fwd_params)",  # noqa: E501 (a real name, kept whole)
            "fused attention",
        ),
        (
            "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)",  # noqa: E501 (a real name, kept whole)
            "fused attention",
        ),
        (
            "cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_3_64x64x64_4x1x1_kernel0_0",
            "fused attention",
        ),
        ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn", "gemm"),
        (
            "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 10, false, false>(c10::BFloat16*, c10::BFloat16 const*, int, int, int, bool const*, int, bool)",  # noqa: E501 (a real name, kept whole)
            "softmax",
        ),
        (
            "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}> >(int, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}>)",  # noqa: E501 (a real name, kept whole)
            "copy",
        ),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "communication"),
    ],
)
def test_kernel_families_of_real_kernel_names(name, family):
    from dashboard.engine.analyses.kernels import family_expr

    assert pl.select(family_expr(pl.lit(name), pl.lit("kernel"))).item() == family


def test_long_kernel_sequences_align_window_by_window():
    import random

    from dashboard.engine.compare.diff import aligned_opcodes

    rng = random.Random(0)
    a = [f"k{rng.randint(0, 30)}" for _ in range(30_000)]
    b = list(a)
    for k in rng.sample(range(len(a)), 3_000):
        b[k] = f"new{k}"
    del b[10_000:10_500]
    ops = aligned_opcodes(a, b)
    i = j = 0
    for op, i1, i2, j1, j2 in ops:  # contiguous cover of both sequences; equal blocks are equal
        assert (i1, j1) == (i, j)
        assert op != "equal" or a[i1:i2] == b[j1:j2]
        i, j = i2, j2
    assert (i, j) == (len(a), len(b))
    assert sum(i2 - i1 for op, i1, i2, _, _ in ops if op == "equal") >= 0.95 * (len(a) - 3_500)
    assert aligned_opcodes(a, a) == [("equal", 0, len(a), 0, len(a))] or all(
        op == "equal" for op, *_ in aligned_opcodes(a, a)
    )


def _check_alignment(a, b, ops):
    i = j = 0
    for op, i1, i2, j1, j2 in ops:  # contiguous cover of both sequences; equal blocks are equal
        assert (i1, j1) == (i, j) and i2 >= i1 and j2 >= j1 and (i2, j2) != (i1, j1)
        assert op != "equal" or a[i1:i2] == b[j1:j2]
        i, j = i2, j2
    assert (i, j) == (len(a), len(b))
    assert all(not (x[0] == y[0] == "equal") for x, y in zip(ops, ops[1:]))  # equal blocks merged


def test_long_steps_with_a_common_head_and_tail_align_in_linear_time():
    import random

    from dashboard.engine.compare.diff import aligned_opcodes

    rng = random.Random(1)
    a = [f"k{rng.randint(0, 3)}" for _ in range(90_000)]  # few names, each repeated a lot
    assert aligned_opcodes(a, list(a)) == [("equal", 0, len(a), 0, len(a))]
    b = a[:45_000] + ["new"] + a[45_000:]
    ops = aligned_opcodes(a, b)
    _check_alignment(a, b, ops)
    assert ops == [
        ("equal", 0, 45_000, 0, 45_000),
        ("insert", 45_000, 45_000, 45_000, 45_001),
        ("equal", 45_000, 90_000, 45_001, 90_001),
    ]
    c = list(a)
    changed = sorted(rng.sample(range(1, len(a) - 1), 20))
    for k in changed:
        c[k] = "new"  # a name a never has: each change is exactly one replaced kernel
    ops = aligned_opcodes(a, c)
    _check_alignment(a, c, ops)
    assert [(i1, i2, j1, j2) for op, i1, i2, j1, j2 in ops if op != "equal"] == [(k, k + 1, k, k + 1) for k in changed]


def test_aligned_opcodes_cover_both_sequences_whatever_their_heads_and_tails():
    import random

    from dashboard.engine.compare.diff import aligned_opcodes

    rng = random.Random(2)
    for _ in range(400):
        a = [rng.choice("abc") for _ in range(rng.randint(0, 120))]
        b = list(a)
        for _ in range(rng.randint(0, 6)):
            k = rng.randint(0, len(b))
            if rng.random() < 0.5 and k < len(b):
                del b[k]
            else:
                b.insert(k, rng.choice("abcd"))
        _check_alignment(a, b, aligned_opcodes(a, b, window=rng.randint(2, 40)))


def test_a_cut_far_from_any_event_boundary_is_salvaged_event_by_event(tmp_path):
    doc = oracle.raw(DATA / "hta_triton_example.json.gz")
    events = doc.pop("traceEvents")
    huge = {"ph": "X", "cat": "cpu_op", "name": "x" * 3_000_000, "pid": 1, "tid": 1, "ts": 1, "dur": 1}
    text = json.dumps({**doc, "traceEvents": events + [huge]})
    cut = text[: text.index("x" * 1000) + 2_500_000]  # inside the last event, 2.5 MB past its start
    path = tmp_path / "killed_late.json"
    path.write_text(cut)
    trace = load_trace(path)
    assert trace.events.height == sum(1 for e in events if e.get("ph") == "X")
    assert len(trace.warnings) == 1 and f"salvaged {len(events):,} complete events" in trace.warnings[0]


@pytest.mark.parametrize(
    "name", ["hta_a100_control.json.gz", "hta_v100_test.json.gz", "kineto_legacy_resnet50_v100.pt.trace.json.gz"]
)
def test_copy_chains_on_real_training_traces_match_the_ops_that_hold_each_launch(loaded, name):
    trace, doc = loaded(name)
    events = oracle.complete(doc)
    launches = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver", "Runtime") and "correlation" in e.get("args", {})
    }
    memcpy = [
        e for e in events if e.get("cat") in ("gpu_memcpy", "Memcpy") and e["args"].get("correlation") in launches
    ]
    table = copies(trace)
    assert table.filter(pl.col("kind") != "kernel").height == len(
        [e for e in events if e.get("cat") in ("gpu_memcpy", "Memcpy")]
    )
    origin = min(float(e["ts"]) for e in events)
    by_start = {(row["ts_ns"], row["name"]): row["op_chain"] for row in table.iter_rows(named=True)}
    for e in memcpy[:: max(1, len(memcpy) // 15)]:  # a spread of the memcpys, each checked by hand
        launch = launches[e["args"]["correlation"]]
        held = oracle.enclosing_ops(
            doc, launch["pid"], launch["tid"], float(launch["ts"]), float(launch["ts"]) + float(launch.get("dur", 0))
        )
        want = [op["name"] for op in held if not op["name"].startswith("ProfilerStep#")]
        key = (round((float(e["ts"]) - origin) * 1000), e["name"])
        assert by_start[key] == want, e["name"]


@pytest.mark.parametrize("name", GPU_TRACES)
def test_attention_is_detected_only_where_attention_ops_ran(loaded, name):
    trace, doc = loaded(name)
    names = {e["name"] for e in oracle.complete(doc) if e.get("cat") in ("cpu_op", "Operator", "kernel", "Kernel")}
    fused = {n for n in names if "scaled_dot_product" in n or "flash_fwd" in n or "fmha" in n}
    softmax = {n for n in names if n in ("aten::softmax", "aten::_softmax")}
    found = detect_backends(trace)
    if fused:
        assert found.backends and set(found.all_evidence) & fused
    elif not softmax:
        assert found.backends == []


def test_name_predicates_per_distinct_name_match_the_per_event_version():
    """names_matching tests each distinct name once; the obvious version casts every event's
    name to text and tests it. Every predicate the analyses use, on every real trace."""
    from dashboard.engine.analyses.copies import KV_CACHE_WRITE
    from dashboard.engine.rules import GRAPH_LAUNCH
    from dashboard.engine.rules.ops import BOOKKEEPING_OPS, METADATA_OPS
    from dashboard.engine.model.trace import names_matching

    predicates = [
        lambda n: n.str.contains(KV_CACHE_WRITE),
        lambda n: n.str.starts_with("ProfilerStep#"),
        lambda n: n.str.contains(GRAPH_LAUNCH),
        lambda n: n.str.contains(BOOKKEEPING_OPS),
        lambda n: n.str.contains(METADATA_OPS),
    ]
    frames = [load_trace(path).events.select("name") for path in sorted(DATA.glob("*.json.gz"))]
    frames.append(
        pl.DataFrame(
            {"name": pl.Series(["ProfilerStep#3", None, "Memcpy DtoD", "cudaGraphLaunch", ""], dtype=pl.Categorical)}
        )
    )
    frames.append(frames[-1].with_columns(pl.col("name").cast(pl.String)))  # a String column works too
    for frame in frames:
        for predicate in predicates:
            fast = frame.select(names_matching(frame["name"], predicate)).to_series()
            slow = frame.select(predicate(pl.col("name").cast(pl.String))).to_series()
            assert fast.to_list() == slow.to_list()


@pytest.mark.parametrize(
    "name",
    [
        "hta_mi250_rocm_minitoy.json.gz",
        "kineto_legacy_resnet50_v100.pt.trace.json.gz",
        "tracelens_h100_bert_sdpa_flash.json.gz",
    ],
)
def test_repeated_text_columns_are_categorical_and_hold_each_events_text(loaded, name):
    """pid, tid, the memcpy kind and the shape texts are Categorical (a 4-byte code per row, where a
    String column held a 16-byte view per row, nulls included) and read as the json module reads
    each complete event; the rows stay sorted by pid and tid as text."""
    trace, doc = loaded(name)
    ev = trace.events
    for column in ("pid", "tid", "kind", "input_dims", "input_types", "concrete_inputs"):
        assert ev.schema[column] == pl.Categorical, column
    for column in ("name", "ph", "pid", "tid"):
        assert trace.flows.schema[column] == pl.Categorical, column
    expected = Counter(
        (str(e["pid"]), str(e["tid"]), json.dumps(e.get("args", {}).get("Input Dims"), separators=(",", ":")))
        for e in oracle.complete(doc)
        if "ts" in e
    )
    got = Counter(
        zip(
            ev["pid"].cast(pl.String).to_list(),
            ev["tid"].cast(pl.String).to_list(),
            [
                json.dumps(json.loads(d) if d is not None else None, separators=(",", ":"))
                for d in ev["input_dims"].cast(pl.String).to_list()
            ],
        )
    )
    assert got == expected
    threads = ev.select(pl.col("pid", "tid").cast(pl.String)).rows()
    assert threads == sorted(threads)
    kinds = Counter(ev.filter(pl.col("cat") == "gpu_memcpy")["kind"].cast(pl.String).to_list())
    assert kinds == oracle.memcpy_kinds(doc)


REAL_AND_BUNDLED = sorted(DATA.glob("*.json.gz")) + sorted((DATA.parent.parent / "sample_traces").glob("*/*.json.gz"))


@pytest.mark.parametrize("path", REAL_AND_BUNDLED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_distinct_names_per_category_are_what_a_filter_per_category_finds(path):
    """names_by_category answers with one query what each analysis asked with a query of its own
    (the obvious version: filter a category, take its distinct names). On every real and bundled
    trace; and on the tests/data traces every name of a complete event in the JSON is found."""
    from dashboard.engine.model.trace import names_by_category, names_in

    trace = load_trace(path)
    by_cat = names_by_category(trace)
    cats = trace.events["cat"].cast(pl.String).unique().to_list()
    assert sorted(by_cat) == sorted(cats)
    for cat in cats:
        slow = trace.events.filter(pl.col("cat") == cat)["name"].cast(pl.String).drop_nulls().unique().sort().to_list()
        assert by_cat[cat] == slow
    assert names_in(trace, "cpu_op", "kernel") == sorted(set(by_cat.get("cpu_op", [])) | set(by_cat.get("kernel", [])))
    if path.parent == DATA:
        assert {n for names in by_cat.values() for n in names} == {
            e.get("name", "") for e in oracle.complete(oracle.raw(path))
        }


@pytest.mark.parametrize("path", REAL_AND_BUNDLED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_small_tables_one_gather_sorts_as_the_column_by_column_gather_does(path, monkeypatch):
    """Below NORMALIZE_WHOLE_ROWS events the table is gathered in one query; above it, one column
    at a time (the memory-lean way large files take). Both give the same table on every trace."""
    from polars.testing import assert_frame_equal

    from dashboard.engine.load import frames as load_frames

    whole = load_trace(path)
    assert whole.events.height < load_frames.NORMALIZE_WHOLE_ROWS  # the path under test
    monkeypatch.setattr(load_frames, "NORMALIZE_WHOLE_ROWS", 0)
    by_column = load_trace(path)
    assert_frame_equal(whole.events, by_column.events, categorical_as_str=True)
    assert summarize(whole) == summarize(by_column)


def test_unreadable_times_negative_and_endless_durations_are_each_counted_once(tmp_path):
    """The three checks of the loaded events run as one query: each warning counts its own events,
    and an event skipped for its timestamp is not counted again for its duration. Counted by hand:
    two timestamps out of range (one of them with a negative duration too), one negative duration,
    one duration over 36 years."""
    years_40_us = 40 * 365 * 86400 * 10**6
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "ok", "pid": 1, "tid": 1, "ts": 10, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": "negative", "pid": 1, "tid": 1, "ts": 20, "dur": -3},
        {"ph": "X", "cat": "cpu_op", "name": "endless", "pid": 1, "tid": 2, "ts": 30, "dur": years_40_us},
        {"ph": "X", "cat": "cpu_op", "name": "far", "pid": 1, "tid": 1, "ts": 5 * 10**15, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "far and negative", "pid": 1, "tid": 1, "ts": -2 * 10**15, "dur": -7},
    ]
    path = tmp_path / "odd_times.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = load_trace(path)
    assert sorted(trace.events["name"].cast(pl.String).to_list()) == ["endless", "negative", "ok"]
    said = [w.removeprefix("odd_times.json: ") for w in trace.warnings]
    assert "2 events with a missing or unreadable timestamp were skipped" in said
    assert "1 events with a negative duration were read as zero-length" in said
    assert "1 events with a duration over 36 years were read as zero-length" in said
    durations = dict(zip(trace.events["name"].cast(pl.String).to_list(), trace.events["dur_ns"].to_list()))
    assert durations == {"ok": 5000, "negative": 0, "endless": 0}


@pytest.mark.parametrize("path", REAL_AND_BUNDLED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_tables_with_ties_sort_fully(path):
    """Rows that tie on the ranked value (equal total time, equal copy time: common at µs
    resolution) come in a fixed order, not the one a group_by happened to give: each table's sort
    key covers its group key, so the order is total."""
    from dashboard.engine.analyses.copies import copy_summary
    from dashboard.engine.compare.review import copy_groups

    trace = load_trace(path)
    table = kernel_table(trace)
    assert table.select("name", "family").is_unique().all()
    assert table.equals(table.sort(["total_ns", "name", "family"], descending=[True, False, False], nulls_last=True))
    summary = copy_summary(copies(trace)).with_columns(pl.col("op_chain").list.join(" > ").alias("chain"))
    assert summary.select("kind", "chain", "copy_class", "hidden").is_unique().all()
    assert summary.equals(
        summary.sort(
            ["hidden", "count", "kind", "chain", "copy_class"],
            descending=[True, True, False, False, False],
            nulls_last=True,
        )
    )
    launches = detect_backends(trace).launches
    assert launches.select("backend", "kernel", "op", "launch").is_unique().all()
    assert launches.equals(launches.sort("backend", "kernel", "op", "launch", nulls_last=True))
    groups = copy_groups({"a": trace, "b": trace})
    assert groups.select("run", "kind", "op_chain", "origin", "hidden", "copy_class").is_unique().all()
    assert groups["run"].to_list() == sorted(groups["run"].to_list())
    assert groups.equals(
        groups.sort(
            ["run", "hidden", "us_per_step", "kind", "op_chain", "origin", "copy_class"],
            descending=[False, True, True, False, False, False, False],
            nulls_last=True,
        )
    )


def test_steps_that_start_together_come_in_number_order(tmp_path):
    """find_steps orders the ProfilerStep spans by start, then by number: two that start at the same
    microsecond (a hand-made trace) do not come in the order a unique() happened to leave them."""
    events = [
        {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1, "ts": 100, "dur": d}
        for n, d in ((9, 50), (4, 40), (7, 30))
    ]
    events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 110, "dur": 5})
    path = tmp_path / "together.json"
    path.write_text(json.dumps({"traceEvents": events}))
    steps = load_trace(path).steps
    assert steps["step"].to_list() == [4, 7, 9]
    assert steps["name"].to_list() == ["ProfilerStep#4", "ProfilerStep#7", "ProfilerStep#9"]
