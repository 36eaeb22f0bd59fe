"""How close attention runs to the hardware: FLOPs and bytes from shapes, the peaks table, and the
achieved rates on real traces. Expected numbers come from hand counts (brute-force enumeration of
the unmasked score pairs) and from json-module readings of the trace files, never from the engine."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest

from dashboard.engine.analyses.efficiency import (
    BOTTOM_RIGHT,
    CONCRETE_COLUMN,
    TOP_LEFT,
    AttentionShape,
    attention_work,
    causal_pairs,
    efficiency,
    efficiency_block,
    kernel_causal,
    read_shape,
    step_efficiency,
)
from dashboard.engine.rules.peaks import PEAK_TABLE, DevicePeak, match_device, with_override
from oracle import DATA, complete, raw

SAMPLES = Path(__file__).parent.parent / "sample_traces" / "cpu"
H100_TRACES = ("tracelens_h100_bert_sdpa_flash.json.gz", "tracelens_h100_qwen_chat_sdpa_flash.json.gz")


def brute_pairs(sq: int, sk: int, align: str) -> int:
    """Unmasked (query, key) pairs, one by one: top-left keeps j <= i, bottom-right j <= i + sk - sq."""
    shift = 0 if align == TOP_LEFT else sk - sq
    return sum(1 for i, j in itertools.product(range(sq), range(sk)) if j <= i + shift)


# --- formulas against hand counts ---------------------------------------------------------------


@pytest.mark.parametrize("align", [TOP_LEFT, BOTTOM_RIGHT])
def test_causal_pairs_equal_a_brute_force_count_also_when_query_and_key_lengths_differ(align):
    for sq, sk in itertools.product(range(1, 13), range(1, 13)):
        assert causal_pairs(sq, sk, align) == brute_pairs(sq, sk, align), (sq, sk, align)


def test_top_left_and_bottom_right_differ_exactly_where_pytorch_and_flash_attn_disagree():
    # 3 queries over 5 keys: PyTorch's is_causal (top-left) sees 1+2+3 keys; FlashAttention's
    # causal (bottom-right) lets the last query see all 5: 3+4+5.
    assert causal_pairs(3, 5, TOP_LEFT) == 6
    assert causal_pairs(3, 5, BOTTOM_RIGHT) == 12
    # 5 queries over 3 keys: top-left 1+2+3+3+3; bottom-right leaves the first two queries nothing.
    assert causal_pairs(5, 3, TOP_LEFT) == 12
    assert causal_pairs(5, 3, BOTTOM_RIGHT) == 6


def test_forward_flops_and_bytes_of_a_full_batch_are_4BHSSD_and_qkvo():
    work = attention_work([(8, 8)] * 2, 4, 4, 16, elem_bytes=2)
    assert work.flops == 4 * 2 * 4 * 8 * 8 * 16
    assert work.bytes == 4 * (2 * 8 * 4 * 16) * 2  # Q, K, V, O in bf16
    with_lse = attention_work([(8, 8)] * 2, 4, 4, 16, elem_bytes=2, lse=True)
    assert with_lse.bytes - work.bytes == 2 * 4 * 8 * 4  # one fp32 per query row and head


def test_causal_flops_count_only_unmasked_pairs_with_different_lengths():
    sq, sk, h, d = 3, 7, 2, 8
    for align in (TOP_LEFT, BOTTOM_RIGHT):
        work = attention_work([(sq, sk)], h, h, d, causal=True, align=align)
        assert work.flops == 4 * h * d * brute_pairs(sq, sk, align)


def test_grouped_query_attention_counts_query_heads_for_flops_and_kv_heads_for_bytes():
    b, s, hq, hkv, d = 2, 16, 8, 2, 64
    work = attention_work([(s, s)] * b, hq, hkv, d, elem_bytes=2)
    assert work.flops == 4 * b * hq * s * s * d
    q_and_o = 2 * b * s * hq * d * 2
    k_and_v = 2 * b * s * hkv * d * 2
    assert work.bytes == q_and_o + k_and_v


def test_varlen_batch_sums_its_sequences():
    h, d = 4, 32
    work = attention_work([(3, 3), (5, 5), (1, 4)], h, h, d, causal=True, elem_bytes=2)
    pairs = brute_pairs(3, 3, TOP_LEFT) + brute_pairs(5, 5, TOP_LEFT) + brute_pairs(1, 4, TOP_LEFT)
    assert work.flops == 4 * h * d * pairs
    tokens_q, tokens_k = 3 + 5 + 1, 3 + 5 + 4
    assert work.bytes == 2 * (2 * tokens_q * h * d + 2 * tokens_k * h * d)


def test_backward_is_two_and_a_half_forwards_when_head_dims_agree():
    fwd = attention_work([(64, 64)] * 3, 8, 8, 64, causal=True)
    bwd = attention_work([(64, 64)] * 3, 8, 8, 64, causal=True, backward=True)
    assert bwd.flops * 2 == fwd.flops * 5


def test_the_articles_workload_is_17_2_gflop_forward():
    # DESIGN.md: 8x16x1024x64 causal, forward FLOPs = 4*B*H*N^2*D halved ~ 17.2 GFLOP
    work = AttentionShape(8, 1024, 1024, 16, 16, 64, 64, "c10::BFloat16", True, lse=True).work()
    assert work.flops == 4 * 8 * 16 * 64 * (1024 * 1025 // 2)
    assert work.flops == pytest.approx(17.2e9, rel=0.005)


# --- reading shapes -----------------------------------------------------------------------------


def test_efficient_attention_forward_reads_custom_mask_type_and_layout():
    dims = json.dumps([[2, 5, 4, 32], [2, 9, 1, 32], [2, 9, 1, 32], [], [], [], [], [], [], [], [], [], [], []])
    types = json.dumps(["c10::Half"] * 3 + [""] * 11)
    concrete = json.dumps(["", "", "", "", "", "", "", "", "0.", "2", "True", "", "", ""])
    shape = read_shape("aten::_efficient_attention_forward", dims, types, concrete)
    assert isinstance(shape, AttentionShape)
    assert (shape.batch, shape.sq, shape.sk, shape.heads_q, shape.heads_kv, shape.head_dim) == (2, 5, 9, 4, 1, 32)
    assert shape.causal and shape.align == BOTTOM_RIGHT and shape.lse
    assert shape.work().flops == 4 * 2 * 4 * 32 * brute_pairs(5, 9, BOTTOM_RIGHT)


def test_varlen_flash_is_counted_only_when_the_trace_determines_every_length():
    def varlen(total_q: int, batch: int, max_q: int) -> AttentionShape | str:
        dims = json.dumps([[total_q, 8, 64], [total_q, 8, 64], [total_q, 8, 64], [batch + 1], [batch + 1]] + [[]] * 10)
        types = json.dumps(["c10::BFloat16"] * 3 + ["int"] * 2 + [""] * 10)
        concrete = json.dumps(["", "", "", "", "", str(max_q), str(max_q), "0.", "True", "False", "", "", "", "", ""])
        return read_shape("aten::_flash_attention_forward", dims, types, concrete)

    uniform = varlen(4 * 100, 4, 100)  # four sequences of at most 100 tokens, 400 in all: all 100
    assert isinstance(uniform, AttentionShape) and (uniform.batch, uniform.sq, uniform.sk) == (4, 100, 100)
    unknown = varlen(350, 4, 100)
    assert isinstance(unknown, str) and "per-sequence lengths" in unknown


def test_missing_shapes_and_unknown_ops_give_reasons_not_numbers():
    assert "record_shapes" in read_shape("aten::_scaled_dot_product_flash_attention", None, None)
    assert "no shape reader" in read_shape("aiter::mha_batch_prefill", "[[1]]", "[]")
    dims = json.dumps([[1, 2, 8, 16]] * 3 + [[]] * 4)
    types = json.dumps(["float"] * 3 + ["Scalar"] * 4)
    assert "is_causal" in read_shape("aten::_scaled_dot_product_flash_attention", dims, types)


def _profiled_sdpa(tmp_path: Path, sq: int, sk: int, hq: int, hkv: int, causal: bool) -> dict:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    q, k, v = torch.randn(2, hq, sq, 16), torch.randn(2, hkv, sk, 16), torch.randn(2, hkv, sk, 16)
    path = tmp_path / "sdpa.json"
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hq != hkv)
    prof.export_chrome_trace(str(path))
    return raw(path)


def test_shapes_read_from_a_real_profiler_trace_with_causal_sq_ne_sk_and_gqa(tmp_path):
    doc = _profiled_sdpa(tmp_path, sq=12, sk=7, hq=4, hkv=2, causal=True)
    ops = [e for e in complete(doc) if e["name"] == "aten::scaled_dot_product_attention"]
    assert ops
    args = ops[0]["args"]
    shape = read_shape(
        ops[0]["name"],
        json.dumps(args["Input Dims"]),
        json.dumps(args["Input type"]),
        json.dumps(args.get("Concrete Inputs")),
    )
    assert isinstance(shape, AttentionShape)
    assert (shape.heads_q, shape.heads_kv, shape.sq, shape.sk, shape.causal) == (4, 2, 12, 7, True)
    assert shape.work().flops == 4 * 2 * 4 * 16 * brute_pairs(12, 7, TOP_LEFT)


def test_is_causal_from_the_flash_kernel_template_agrees_with_concrete_inputs():
    for name in H100_TRACES:
        doc = raw(DATA / name)
        flags = {
            e["args"]["Concrete Inputs"][8] == "True"
            for e in complete(doc)
            if e["name"] == "aten::_flash_attention_forward"
        }
        kernels = {e["name"] for e in complete(doc) if e.get("cat") == "kernel" and "flash_fwd_kernel" in e["name"]}
        assert {kernel_causal(k) for k in kernels} == flags


# --- real H100 traces: FLOPs from Input Dims, time from the kernels launched inside the op -------


def _flash_calls_by_json(doc: dict) -> tuple[list[int], list[float]]:
    """Per aten::_flash_attention_forward call whose kernel is in the trace: FLOPs computed by hand
    from its Input Dims ([B, S, H, D]) and Concrete Inputs, and the kernel's duration (µs)."""
    events = complete(doc)
    ops = [e for e in events if e["name"] == "aten::_flash_attention_forward"]
    launches = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    flops, durations = [], []
    for kernel in (e for e in events if e.get("cat") == "kernel" and "flash_fwd_kernel" in e["name"]):
        launch = launches.get(kernel["args"]["correlation"])
        if launch is None:
            continue
        op = next(o for o in ops if o["tid"] == launch["tid"] and o["ts"] <= launch["ts"] <= o["ts"] + o["dur"])
        (b, sq, h, d), (_, sk, _, _) = op["args"]["Input Dims"][0], op["args"]["Input Dims"][1]
        causal = op["args"]["Concrete Inputs"][8] == "True"
        pairs = sq * (sq + 1) // 2 if causal else sq * sk  # sq == sk in these traces
        assert sq == sk
        flops.append(4 * b * h * d * pairs)
        durations.append(kernel["dur"])
    return flops, durations


@pytest.mark.parametrize("name", H100_TRACES)
def test_h100_flash_kernels_achieve_the_rate_their_input_dims_and_durations_give(trace_of, name):
    flops, durations = _flash_calls_by_json(raw(DATA / name))
    table = efficiency(trace_of(DATA / name))
    measured = table.filter(table["flops"].is_not_null())
    assert int(measured["count"].sum()) == len(flops)
    assert sorted(set(measured["flops"].to_list())) == sorted(set(flops))
    expected_tflops = sum(flops) / sum(durations) / 1e6  # FLOP per µs -> TFLOP/s
    achieved = float((measured["tflops"] * measured["total_us"]).sum() / measured["total_us"].sum())
    assert achieved == pytest.approx(expected_tflops, rel=1e-6)
    assert measured["backend"].to_list() == ["flash"] * measured.height


@pytest.mark.parametrize("name", H100_TRACES)
def test_nothing_runs_above_the_roofline_on_the_h100_traces(trace_of, name):
    table = efficiency(trace_of(DATA / name))
    pct = table["pct_of_roofline"].drop_nulls()
    assert pct.len() > 0 and float(pct.max()) < 100
    assert (table["tflops"].drop_nulls() < 989.5).all()


def test_qwen_kernels_launched_before_the_cpu_window_are_listed_with_a_reason(trace_of):
    doc = raw(DATA / "tracelens_h100_qwen_chat_sdpa_flash.json.gz")
    correlations = {
        e["args"]["correlation"]
        for e in complete(doc)
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    orphans = [
        e
        for e in complete(doc)
        if e.get("cat") == "kernel" and "flash_fwd_kernel" in e["name"] and e["args"]["correlation"] not in correlations
    ]
    table = efficiency(trace_of(DATA / "tracelens_h100_qwen_chat_sdpa_flash.json.gz"))
    unknown = table.filter(table["flops"].is_null())
    assert int(unknown["count"].sum()) == len(orphans) == 10
    assert all("launch" in r for r in unknown["reason"].to_list())


def test_a_user_peak_gives_the_roofline_by_hand(trace_of):
    name = "tracelens_h100_qwen_chat_sdpa_flash.json.gz"
    doc = raw(DATA / name)
    op = next(e for e in complete(doc) if e["name"] == "aten::_flash_attention_forward")
    b, s, h, d = op["args"]["Input Dims"][0]
    flops = 4 * b * h * d * s * (s + 1) // 2
    moved = 4 * b * s * h * d * 2 + b * h * s * 4  # Q, K, V, O in bf16 and the fp32 log-sum-exp
    table = efficiency(trace_of(DATA / name), peak={"bf16": 100.0, "bandwidth_tbps": 0.5})
    row = table.filter(table["flops"].is_not_null()).row(0, named=True)
    assert (row["flops"], row["bytes"]) == (flops, moved)
    assert row["roofline_tflops"] == pytest.approx(min(100.0, flops / moved * 0.5))
    assert row["pct_of_roofline"] == pytest.approx(100 * row["tflops"] / row["roofline_tflops"])


def test_efficiency_block_is_json_and_its_percentage_is_ideal_over_actual_time(trace_of):
    block = efficiency_block(trace_of(DATA / "tracelens_h100_qwen_chat_sdpa_flash.json.gz"))
    json.dumps(block)
    assert block["device"]["matched"] == "H100 SXM5 80GB"
    assert block["calls"] == 34 and block["measured"] == 24
    assert block["pct_of_roofline"] == pytest.approx(100 * block["ideal_us"] / block["time_us"])
    assert 0 < block["pct_of_roofline"] < 100


# --- the peaks table ----------------------------------------------------------------------------

EXPECTED_DEVICES = {
    "tracelens_h100_bert_sdpa_flash.json.gz": ("H100 SXM5 80GB", "name"),
    "tracelens_h100_qwen_chat_sdpa_flash.json.gz": ("H100 SXM5 80GB", "name"),
    "tracelens_mi300x_sglang_qwen3_prefilldecode_ck_fmha.json.gz": ("MI300X", "name"),
    # blank name, 304 CUs, 192 GB of gfx942: only the MI300X fits
    "tracelens_vllm_decode_graph_unified_attention.json.gz": ("MI300X", "properties"),
    # A100-PG509-200 is an HGX board name: 108 SMs and 40 GB; SXM and PCIe 40 GB share their peaks
    "hta_a100_control.json.gz": ("A100 SXM4 40GB", "properties"),
    "hta_triton_example.json.gz": ("A100 SXM4 40GB", "properties"),
    # "AMD Radeon Graphics" with 104 CUs and 64 GB of gfx90a: one GCD of an MI250
    "hta_mi250_rocm_minitoy.json.gz": ("MI250 (one GCD)", "properties"),
    "hta_v100_test.json.gz": ("V100 SXM2", "name"),
    "hta_v100_ns_resolution.pt.trace.json.gz": ("V100 SXM2", "name"),
}


@pytest.mark.parametrize("name", sorted(EXPECTED_DEVICES))
def test_the_peaks_table_matches_the_devices_of_the_real_traces(name):
    props = raw(DATA / name)["deviceProperties"]
    for entry in props:
        match = match_device(entry)
        assert (match.peak.name if match.peak else None, match.matched_by) == EXPECTED_DEVICES[name], entry


def test_a_device_the_table_cannot_tell_apart_gets_a_reason_and_takes_a_user_peak():
    props = raw(DATA / "kineto_legacy_resnet50_v100.pt.trace.json.gz")["deviceProperties"][0]
    assert props["name"] == "Tesla V100-DGXS-32GB"
    match = match_device(props)
    assert match.peak is None and "give the peak" in match.reason
    given = with_override(match, {"fp16": 125.0, "bandwidth_tbps": 0.9})
    assert (given.peak.fp16, given.peak.bandwidth_tbps, given.matched_by) == (125.0, 0.9, "override")
    with pytest.raises(ValueError):
        with_override(match, {"bf16_sparse": 1.0})


def test_peaks_are_dense_numbers_with_a_source():
    for row in PEAK_TABLE:
        assert row.source and row.bandwidth_tbps
        # dense tensor-core ladders: TF32 is half of BF16, FP8 twice BF16 (datasheets round: B200's
        # TF32 is printed as 2.2 PFLOPS sparse, L40S's FP8 as 733 beside 362.05 for BF16)
        if row.tf32 and row.bf16:
            assert row.tf32 == pytest.approx(row.bf16 / 2, rel=0.03), row.name
        if row.fp8 and row.bf16:
            assert row.fp8 == pytest.approx(row.bf16 * 2, rel=0.02), row.name
        if row.bf16 and row.fp32:
            assert row.fp32 < row.bf16, row.name
    # dense, not the 2:4-sparsity headline: H100 SXM's datasheet prints 1,979 TFLOPS BF16 with sparsity
    h100 = next(r for r in PEAK_TABLE if r.name == "H100 SXM5 80GB")
    assert h100.bf16 == pytest.approx(1979 / 2, abs=0.5)


def test_an_explicit_device_peak_replaces_the_table_row():
    mine = DevicePeak("my GPU", "", "", None, None, None, None, None, 50.0, 50.0, None, 1.0, "measured")
    match = with_override(match_device({}), mine)
    assert match.peak is mine and match.matched_by == "override"


# --- CPU sample traces --------------------------------------------------------------------------


@pytest.mark.parametrize("run", ["sdpa", "sdpa-flash", "sdpa-math", "sdpa.compiled", "sdpa-flash.compiled"])
def test_cpu_samples_report_work_and_a_reason_instead_of_a_percentage(trace_of, run):
    path = SAMPLES / f"{run}.json.gz"
    doc = raw(path)
    shape = doc["attnscope"]["shape"]
    b, h, s, d = shape["batch"], shape["heads"], shape["seq"], shape["head_dim"]
    table = efficiency(trace_of(path))
    assert table.height > 0
    # every collector variant is causal (collectors/variants.py); fp32 on the CPU
    assert set(table["flops"].to_list()) == {4 * b * h * d * s * (s + 1) // 2}
    assert table["pct_of_roofline"].null_count() == table.height
    assert all("CPU" in r for r in table["reason"].to_list())
    assert efficiency_block(trace_of(path))["pct_of_roofline"] is None


def test_cpu_sample_with_a_user_peak_gets_a_percentage(trace_of):
    table = efficiency(trace_of(SAMPLES / "sdpa.json.gz"), peak={"fp32": 1.0, "bandwidth_tbps": 0.05})
    row = table.row(0, named=True)
    assert row["reason"] is None
    assert row["pct_of_roofline"] == pytest.approx(100 * row["tflops"] / min(1.0, row["intensity"] * 0.05))


def test_naive_cpu_samples_have_no_attention_op_rows(trace_of):
    assert efficiency(trace_of(SAMPLES / "naive.json.gz")).height == 0


def test_concrete_inputs_column_is_optional(trace_of):
    trace = trace_of(DATA / "tracelens_h100_bert_sdpa_flash.json.gz")
    # is_causal comes from Concrete Inputs when the loader keeps them, else from the flash kernel's name
    table = efficiency(trace)
    assert table["shape"].drop_nulls().str.contains("full").all()
    assert CONCRETE_COLUMN in trace.events.columns or table["flops"].null_count() == 0
    assert math.isfinite(float(table["tflops"].max()))


@pytest.mark.parametrize("run", ["naive", "naive_inplace.compiled", "sdpa-math"])
def test_a_collectors_variant_per_step_has_the_work_of_its_shape_and_the_time_of_its_annotation(trace_of, run):
    path = SAMPLES / f"{run}.json.gz"
    doc = raw(path)
    shape = doc["attnscope"]["shape"]
    b, h, s, d = shape["batch"], shape["heads"], shape["seq"], shape["head_dim"]
    spans = [
        e["dur"] for e in complete(doc) if e["name"].startswith("attention::") and e.get("cat") == "user_annotation"
    ]
    row = step_efficiency(trace_of(path)).row(0, named=True)
    assert row["variant"] == doc["attnscope"]["variant"] and row["steps"] == len(spans) == 3
    assert row["flops"] == 4 * b * h * d * s * (s + 1) // 2
    assert row["bytes"] == 4 * b * h * s * d * 4  # Q, K, V, O in fp32
    assert row["mean_us"] == pytest.approx(sum(spans) / len(spans), rel=1e-6)
    assert row["pct_of_roofline"] is None and "CPU" in row["reason"]
    assert efficiency_block(trace_of(path))["per_step"][0]["variant"] == row["variant"]


def test_foreign_traces_have_no_per_step_row(trace_of):
    assert step_efficiency(trace_of(DATA / "tracelens_h100_bert_sdpa_flash.json.gz")).height == 0


# --- the share of the trace's attention device time the measured calls cover -------------------

# Hand-written: the kernels a person calls attention in each real GPU trace (substrings of the name).
ATTENTION_KERNELS = {
    "tracelens_h100_bert_sdpa_flash.json.gz": ("pytorch_flash::flash_fwd_kernel",),
    "tracelens_h100_qwen_chat_sdpa_flash.json.gz": ("pytorch_flash::flash_fwd_kernel",),
    "tracelens_mi300x_sglang_qwen3_prefilldecode_ck_fmha.json.gz": ("FmhaBatchPrefillWithPagedKVCacheKernel",),
    "tracelens_vllm_decode_graph_unified_attention.json.gz": (
        "kernel_unified_attention_2d",
        "kernel_unified_attention_3d",
        "reduce_segments",
    ),
    "hta_a100_control.json.gz": (),
}


@pytest.mark.parametrize("name", list(ATTENTION_KERNELS))
def test_the_attention_device_time_and_the_measured_share_agree_with_the_json(trace_of, name):
    from dashboard.engine.analyses.efficiency import attention_device_ns

    doc = raw(DATA / name)
    kernels = [e for e in complete(doc) if e.get("cat") == "kernel"]
    parts = ATTENTION_KERNELS[name]
    mine = [e for e in kernels if any(p in e["name"] for p in parts)]
    expected = sum(round(float(e["dur"]) * 1000) for e in mine)
    trace = trace_of(DATA / name)
    assert attention_device_ns(trace) == expected
    block = efficiency_block(trace)
    assert block["attention_device_ns"] == expected
    if not expected:
        assert block["measured_share"] is None
        return
    # measured: the kernels of the calls with a percentage; here every such call is one kernel
    # under its SDPA op, whose correlation has a launch call in the trace (json: same args.correlation)
    launched = {
        e["args"]["correlation"]
        for e in complete(doc)
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    measured_ns = sum(
        round(float(e["dur"]) * 1000) for e in mine if block["measured"] and e["args"].get("correlation") in launched
    )
    assert block["measured_device_ns"] == measured_ns
    assert block["measured_share"] == pytest.approx(measured_ns / expected)


def test_the_qwen_share_is_71_percent_and_the_line_says_the_rest_has_no_shapes(trace_of):
    from dashboard.cli import _efficiency_line

    block = efficiency_block(trace_of(DATA / "tracelens_h100_qwen_chat_sdpa_flash.json.gz"))
    line = _efficiency_line(block)
    assert "24 of 34 calls measured, 71% of attention device time; the rest has no shapes" in line
    assert json.loads(
        json.dumps({k: block[k] for k in ("attention_device_ns", "measured_device_ns", "measured_share")})
    )


def test_xformers_own_forward_op_reads_like_aten_efficient_attention():
    # xformers::efficient_attention_forward_cutlass(query, key, value, attn_bias, seqstart_q, seqstart_k,
    # max_seqlen_q, dropout_p, compute_logsumexp, custom_mask_type, scale, seqlen_k, window_size)
    dims = json.dumps([[2, 5, 4, 32], [2, 9, 1, 32], [2, 9, 1, 32]] + [[]] * 10)
    types = json.dumps(["c10::Half"] * 3 + [""] * 10)
    concrete = json.dumps(["", "", "", "", "", "", "", "0.", "True", "2", "", "", ""])
    shape = read_shape("xformers::efficient_attention_forward_cutlass", dims, types, concrete)
    assert (shape.batch, shape.sq, shape.sk, shape.heads_q, shape.heads_kv, shape.head_dim) == (2, 5, 9, 4, 1, 32)
    assert shape.causal and shape.align == "bottom-right" and shape.lse
    # by hand: bottom-right causal, 5 queries over 9 keys: 5+6+7+8+9 = 35 pairs per head and sequence
    assert shape.work().flops == 2 * 2 * 4 * 35 * (32 + 32)
