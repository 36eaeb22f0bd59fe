"""Attention on every vendor and library, found from ops and from device kernels by one table
(backends.BACKEND_TABLE) that the Kernels tab, the Backends tab, the summary and the gate share.
Counts come from reading the trace files with the json module (tests/oracle.py)."""

from __future__ import annotations

import polars as pl
import pytest

import oracle
from dashboard.engine.compare import gate
from dashboard.engine.analyses.backends import BACKEND_TABLE, BACKENDS, attention_backend, detect_backends, fallback
from dashboard.engine.analyses.kernels import kernel_table
from dashboard.engine.load import load_trace
from dashboard.engine.analyses.summary import summarize

MI300X_CK = "tracelens_mi300x_sglang_qwen3_prefilldecode_ck_fmha.json.gz"
QWEN_FLASH = "tracelens_h100_qwen_chat_sdpa_flash.json.gz"
VLLM_GRAPH = "tracelens_vllm_decode_graph_unified_attention.json.gz"
BERT_FLASH = "tracelens_h100_bert_sdpa_flash.json.gz"
TRITON_EXAMPLE = "hta_triton_example.json.gz"


@pytest.fixture(scope="module")
def loaded():
    cache: dict[str, tuple] = {}

    def get(name: str):
        if name not in cache:
            cache[name] = (load_trace(oracle.DATA / name), oracle.raw(oracle.DATA / name))
        return cache[name]

    return get


def kernels_named(doc: dict, part: str) -> list[dict]:
    return [e for e in oracle.complete(doc) if e.get("cat") == "kernel" and part in e["name"]]


def launching_op(doc: dict, kernel: dict) -> tuple[str | None, str | None]:
    """(innermost cpu_op around the kernel's launch call, the call's name), read from the json."""
    corr = kernel["args"].get("correlation")
    calls = [
        e
        for e in oracle.complete(doc)
        if e.get("cat") in oracle.LAUNCH_CATS and e.get("args", {}).get("correlation") == corr
    ]
    if not calls:
        return None, None
    call = calls[0]
    held = oracle.enclosing_ops(
        doc, call["pid"], call["tid"], float(call["ts"]), float(call["ts"]) + float(call.get("dur", 0))
    )
    return (held[-1]["name"] if held else None), call["name"]


def test_the_mi300x_sglang_trace_is_composable_kernel_attention_with_the_kernel_as_evidence(loaded):
    trace, doc = loaded(MI300X_CK)
    fmha = kernels_named(doc, "FmhaBatchPrefillWithPagedKVCacheKernel")
    assert fmha and all(e["name"].startswith("_ZN7ck_tile6kentry") for e in fmha)  # mangled, as ROCm writes them
    found = detect_backends(trace)
    assert found.backends == ["ck"]
    assert {e["name"] for e in fmha} | {"aiter::mha_batch_prefill"} == set(found.evidence["ck"])
    want = {}
    for e in fmha:
        key = (e["name"],) + launching_op(doc, e)
        want[key] = want.get(key, 0) + 1
    got = {(r["kernel"], r["op"], r["launch"]): r["count"] for r in found.launches.iter_rows(named=True)}
    assert got == want and set(found.launches["op"]) == {"aiter::mha_batch_prefill"}


def test_the_qwen_chat_trace_runs_34_pytorch_flash_kernels_each_under_the_op_that_launched_it(loaded):
    trace, doc = loaded(QWEN_FLASH)
    flash = kernels_named(doc, "pytorch_flash::flash_fwd_kernel")
    assert len(flash) == 34
    found = detect_backends(trace)
    assert found.backends == ["flash"]
    assert int(found.launches["count"].sum()) == 34
    ops = [launching_op(doc, e)[0] for e in flash]
    by_op = found.launches.group_by("op").agg(pl.col("count").sum())
    got = {r["op"]: r["count"] for r in by_op.iter_rows(named=True)}
    assert got == {op: ops.count(op) for op in set(ops)}
    assert got["aten::_flash_attention_forward"] == sum(op == "aten::_flash_attention_forward" for op in ops) > 0


def test_vllm_unified_attention_under_a_graph_launch_is_triton_attention_with_no_op_around_it(loaded):
    trace, doc = loaded(VLLM_GRAPH)
    found = detect_backends(trace)
    assert found.backends == ["triton"]
    for name in ("kernel_unified_attention_2d", "kernel_unified_attention_3d"):
        events = [e for e in kernels_named(doc, name) if e["name"] == name]
        row = found.launches.filter(pl.col("kernel") == name)
        assert row["count"].to_list() == [len(events)] and len(events) > 0
        assert (
            {launching_op(doc, e) for e in events} == {(row["op"][0], row["launch"][0])} == {(None, "hipGraphLaunch")}
        )


def test_a_trace_without_attention_shows_no_backend(loaded):
    trace, doc = loaded(TRITON_EXAMPLE)
    assert [e["name"] for e in oracle.complete(doc) if e.get("cat") == "kernel"] == ["triton_poi_fused_add_cos_sin_0"]
    found = detect_backends(trace)
    assert found.backends == [] and found.launches.height == 0
    assert kernel_table(trace)["family"].to_list() == ["elementwise"]


@pytest.mark.parametrize(
    "name", [MI300X_CK, QWEN_FLASH, VLLM_GRAPH, BERT_FLASH, TRITON_EXAMPLE, "hta_a100_control.json.gz"]
)
def test_the_kernels_tab_and_the_backends_tab_name_the_same_attention_kernels(loaded, name):
    trace, _ = loaded(name)
    table = kernel_table(trace)
    in_kernels_tab = set(table.filter(pl.col("family") == "fused attention")["name"])
    found = detect_backends(trace)
    assert in_kernels_tab == set(found.launches["kernel"])
    assert in_kernels_tab <= set(found.all_evidence)


def test_the_summary_and_the_gate_read_the_same_detection(loaded):
    trace, _ = loaded(MI300X_CK)
    summary = summarize(trace)
    assert summary["attention"]["backends"] == ["ck"]
    assert any(n.startswith("_ZN7ck_tile6kentry") for n in summary["attention"]["by_backend"]["ck"])
    assert "ck" in BACKENDS and "flash-attn" in BACKENDS
    assert not any("attention backend" in p for p in gate.check(trace, trace, gate.Rules(require_backend="ck")))
    problems = gate.check(trace, trace, gate.Rules(require_backend="flash"))
    assert any("attention backend 'flash' required, the candidate shows ck" in p for p in problems)


# Hand-judged: which library each name belongs to (None: not attention, or not clearly so by name).
NAMES = [
    (
        "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t> >(pytorch_flash::Flash_fwd_params)",  # noqa: E501 (a real name, kept whole)
        "flash",
    ),
    ("aten::_scaled_dot_product_flash_attention", "flash"),
    ("aten::_flash_attention_forward", "flash"),
    (
        "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)",  # noqa: E501 (a real name, kept whole)
        "efficient",
    ),
    ("aten::_efficient_attention_forward", "efficient"),
    ("cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_3_64x64x64_4x1x1_kernel0_0", "cudnn"),
    ("aten::_scaled_dot_product_cudnn_attention", "cudnn"),
    ("aten::_scaled_dot_product_attention_math", "math"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "cpu_flash"),
    (
        "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::half_t> >(flash::Flash_fwd_params)",
        "flash-attn",
    ),
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<(int)128, (int)128, (int)64, (i...", "flash-attn"),
    (
        "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<int, float> > >(flash::FlashAttnFwdSm90<int, float>::Params)",
        "flash-attn",
    ),
    ("flash_attn::_flash_attn_forward", "flash-attn"),
    ("_flash_attn_9e27194::fwd", "hub"),
    ("attn_fwd", "aotriton"),
    ("bwd_kernel_dk_dv", "aotriton"),
    (
        "_ZN7ck_tile6kentryILi2ENS_38FmhaBatchPrefillWithPagedKVCacheKernelINS_40BlockFmhaBatchPrefillPipelineQRKSVSAsyncE",
        "ck",
    ),
    (
        "fmha_fwd_d128_bf16_batch_b128x128x32x128x32x128_r4x1x1_r4x1x1_w32x32x16_w32x32x16_qr_async_vr_psddv_nlogits_nbias_nmask_lse_ndropout_nsquant",
        "ck",
    ),
    ("aiter::mha_batch_prefill", "ck"),
    (
        "void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<1u>, flashinfer::BatchPrefillPagedParams<__nv_bfloat16, int> >(flashinfer::BatchPrefillPagedParams<__nv_bfloat16, int>)",  # noqa: E501 (a real name, kept whole)
        "flashinfer",
    ),
    ("BatchDecodeWithPagedKVCacheKernel", "flashinfer"),
    ("fmhaSm90Kernel_QkvE4m3OBfloat16H128PagedKvCausalP64VarSeqQ128Kv128PersistentContext", "trtllm"),
    ("fmhaSm100aKernel_QE4m3KvE2m1OE4m3H128PagedKvDenseP16VarSeqQ8Kv128PersistentSwapsAbForGen", "trtllm"),
    (
        "void vllm::paged_attention_v1_kernel<unsigned short, unsigned short, 128, 16, 128, (vllm::Fp8KVCacheDataType)0, false>(unsigned short*)",
        "vllm-paged",
    ),
    (
        "void vllm::paged_attention_v2_kernel<__nv_bfloat16, __nv_bfloat16, 128, 16, 128, (vllm::Fp8KVCacheDataType)0, false, 512>(float*)",
        "vllm-paged",
    ),
    ("xformers::efficient_attention_forward_cutlass", "xformers"),
    ("kernel_unified_attention_2d", "triton"),
    ("kernel_unified_attention_3d", "triton"),
    ("triton_per_fused_attention_softmax_0", "triton"),
    ("_attn_fwd", "triton"),
    ("_fwd_kernel", None),
    ("create_flashinfer_kv_indices_triton", None),
    ("void my_kernel<ck_tile::SimplifiedGenericAttentionMask<true> >(float*)", None),
    ("aten::scaled_dot_product_attention", None),
]


@pytest.mark.parametrize("name, backend", NAMES, ids=[n[:60] for n, _ in NAMES])
def test_each_library_is_recognised_by_its_own_names(name, backend):
    row = attention_backend(name)
    assert (row.name if row else None) == backend


def test_every_backend_row_says_its_library_and_vendor_and_is_a_backend_the_cli_accepts():
    assert all(b.library and b.vendor and (b.op or b.kernel) for b in BACKEND_TABLE)
    assert [b.name for b in BACKEND_TABLE] == list(BACKENDS[: len(BACKEND_TABLE)])


def test_a_hub_run_whose_ops_were_lost_still_matches_the_hub_request():
    assert not fallback("hub", ["flash-attn"])
    assert fallback("hub", ["math"])
