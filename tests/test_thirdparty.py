"""The third-party variants (SageAttention 1.x, FlashAttention-4, FlashInfer) on a machine that has
none of them: each is a clean `unavailable` with its named reason, and, with a stand-in module put
where the library would import from, the call path, the argument layout and the parity check run
on the CPU. Then the rules that name their kernels, on names read from the libraries' sources."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import types
from pathlib import Path

import polars as pl
import pytest
import torch

from collectors import measure, thirdparty
from collectors.__main__ import main
from collectors.manifest import read_manifest
from collectors.parity import compare, reference
from collectors.variants import VARIANTS, Unavailable
from dashboard.engine.analyses.backends import attention_backend
from dashboard.engine.analyses.efficiency import attention_calls
from dashboard.engine.analyses.kernels import family_of
from dashboard.engine.load import load_trace

THIRD_PARTY = ("thirdparty-sage", "thirdparty-fa4", "thirdparty-flashinfer")


def _attention(q, k, v, causal):
    """Attention over [..., seq, head_dim] in q's dtype (the stand-ins' own math)."""
    n = q.shape[-2]
    scores = q.float() @ k.float().transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return (torch.softmax(scores, -1) @ v.float()).to(q.dtype)


def fake_sage(calls):
    def sageattn(q, k, v, tensor_layout="HND", is_causal=False, sm_scale=None, smooth_k=True, **kw):
        calls.append({"layout": tensor_layout, "causal": is_causal, "shape": tuple(q.shape)})
        assert tensor_layout == "HND" and q.dim() == 4
        if smooth_k:  # as SageAttention 1.0.6 does: k -= k.mean(seq)
            k -= k.mean(dim=2, keepdim=True)
        return _attention(q, k, v, is_causal)

    return types.SimpleNamespace(sageattn=sageattn)


def fake_fa4(calls):
    def flash_attn_func(q, k, v, causal=False, **kw):
        calls.append({"causal": causal, "shape": tuple(q.shape)})
        out = _attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal).transpose(1, 2)
        return out, None  # (out, lse), as flash_attn.cute's flash_attn_func returns

    return types.SimpleNamespace(flash_attn_func=flash_attn_func)


def fake_flashinfer(calls):
    def single_prefill_with_kv_cache(q, k, v, causal=False, kv_layout="NHD", **kw):
        calls.append({"causal": causal, "layout": kv_layout, "q": tuple(q.shape), "k": tuple(k.shape)})
        assert q.dim() == 3 and kv_layout == "HND"  # q [qo_len, heads, head_dim], k/v [heads, kv_len, head_dim]
        return _attention(q.transpose(0, 1), k, v, causal).transpose(0, 1)

    return types.SimpleNamespace(single_prefill_with_kv_cache=single_prefill_with_kv_cache)


FAKES = {"thirdparty-sage": fake_sage, "thirdparty-fa4": fake_fa4, "thirdparty-flashinfer": fake_flashinfer}


def on_cpu(monkeypatch, name, module=None):
    """Let variant `name` run on the CPU, with `module` (or None: no such package) where it imports."""
    lib = thirdparty.LIBRARIES[name]
    monkeypatch.setitem(thirdparty.LIBRARIES, name, dataclasses.replace(lib, devices=("cuda", "cpu")))
    monkeypatch.setitem(sys.modules, lib.module, module)


def qkv(dtype=torch.float32, head_dim=64, batch=2, heads=2, seq=16):
    gen = torch.Generator().manual_seed(0)
    return tuple(torch.randn(batch, heads, seq, head_dim, generator=gen).to(dtype) for _ in range(3))


@pytest.mark.parametrize("name", THIRD_PARTY)
def test_on_the_cpu_each_is_unavailable_because_it_runs_on_cuda_only(name):
    with pytest.raises(Unavailable, match="runs on CUDA only; this run is on cpu"):
        VARIANTS[name].bind(qkv(torch.bfloat16)[0])


@pytest.mark.parametrize("name", THIRD_PARTY)
def test_a_missing_package_is_unavailable_naming_what_to_install(monkeypatch, name):
    on_cpu(monkeypatch, name, None)
    with pytest.raises(Unavailable, match=f"the `{thirdparty.LIBRARIES[name].package}` package is not installed"):
        VARIANTS[name].bind(qkv(torch.bfloat16)[0])


@pytest.mark.parametrize(
    "name, dtype, head_dim, why",
    [
        ("thirdparty-sage", torch.bfloat16, 80, "takes head_dim 64, 96, 128 on this GPU, not 80"),
        ("thirdparty-fa4", torch.float32, 64, "takes float16, bfloat16, not float32"),
        ("thirdparty-fa4", torch.bfloat16, 60, "not 60"),
        ("thirdparty-flashinfer", torch.float16, 96, "takes head_dim 64, 128, 256 on this GPU, not 96"),
    ],
)
def test_a_dtype_or_head_dim_the_library_does_not_take_is_unavailable(monkeypatch, name, dtype, head_dim, why):
    on_cpu(monkeypatch, name, FAKES[name]([]))
    with pytest.raises(Unavailable, match=why):
        VARIANTS[name].bind(qkv(dtype, head_dim)[0])


def test_fa4_head_dims_follow_the_gpu_generation():
    fits = thirdparty.LIBRARIES["thirdparty-fa4"].head_dims
    assert fits(256, (9, 0)) and fits(192, (9, 0)) and not fits(192, (10, 0)) and fits(256, (10, 0))
    assert fits(128, (10, 0)) and not fits(264, (9, 0)) and not fits(4, (8, 0))


@pytest.mark.parametrize("name", THIRD_PARTY)
def test_a_gpu_older_than_the_library_needs_is_unavailable(monkeypatch, name):
    on_cpu(monkeypatch, name, FAKES[name]([]))
    monkeypatch.setattr(thirdparty, "_capability", lambda device, lib: (7, 5))
    with pytest.raises(Unavailable, match="needs CUDA compute capability 8.0 or newer; this GPU is 7.5"):
        VARIANTS[name].bind(qkv(torch.float16)[0])


@pytest.mark.parametrize("name", THIRD_PARTY)
@pytest.mark.parametrize("causal", [True, False])
def test_each_calls_its_library_in_its_layout_and_passes_parity(monkeypatch, name, causal):
    calls: list[dict] = []
    on_cpu(monkeypatch, name, FAKES[name](calls))
    q, k, v = qkv(torch.float16)
    k_before = k.clone()
    out = VARIANTS[name].bind(q, causal=causal)(q, k, v)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert compare(out, reference(q, k_before, v, causal=causal), torch.float16).passed
    assert calls and all(c["causal"] is causal for c in calls)
    assert torch.equal(k, k_before)  # Sage's in-place smoothing works on a copy: the shared k is untouched
    if name == "thirdparty-sage":
        assert calls == [{"layout": "HND", "causal": causal, "shape": (2, 2, 16, 64)}]
    elif name == "thirdparty-fa4":
        assert calls == [{"causal": causal, "shape": (2, 16, 2, 64)}]  # [batch, seq, heads, head_dim]
    else:  # one single prefill per sequence: q [seq, heads, head_dim], k [heads, seq, head_dim]
        assert calls == [{"causal": causal, "layout": "HND", "q": (16, 2, 64), "k": (2, 16, 64)}] * 2


def test_a_library_that_returns_the_wrong_layout_fails_parity(monkeypatch):
    def flash_attn_func(q, k, v, causal=False, **kw):  # forgets that it was given [batch, seq, heads, dim]
        return _attention(q, k, v, causal), None

    on_cpu(monkeypatch, "thirdparty-fa4", types.SimpleNamespace(flash_attn_func=flash_attn_func))
    q, k, v = qkv(torch.float16)
    out = VARIANTS["thirdparty-fa4"].bind(q)(q, k, v)
    assert not compare(out, reference(q, k, v), torch.float16).passed


def _argv(out: Path, *variants: str) -> list[str]:
    shape = ["--batch", "1", "--heads", "2", "--seq", "16", "--head-dim", "64", "--active", "1"]
    return ["--device", "cpu", "--dtype", "fp16", *shape, "--variants", *variants, "--out", str(out)]


def test_the_collection_lists_each_as_a_skip_with_its_reason_on_the_cpu(tmp_path):
    assert main(_argv(tmp_path, *THIRD_PARTY)) == 0
    manifest = read_manifest(tmp_path)
    assert manifest["runs"] == []
    skipped = {s["variant"]: s for s in manifest["skipped"]}
    assert set(skipped) == set(THIRD_PARTY)
    assert {s["backend_requested"] for s in skipped.values()} == {"sage", "flash-attn", "flashinfer"}
    assert all("runs on CUDA only" in s["reason"] for s in skipped.values())


def test_the_collection_profiles_a_stand_in_and_records_what_it_asked_for(monkeypatch, tmp_path):
    on_cpu(monkeypatch, "thirdparty-flashinfer", fake_flashinfer([]))
    assert main(_argv(tmp_path, "thirdparty-flashinfer")) == 0
    (run,) = read_manifest(tmp_path)["runs"]
    assert run["variant"] == "thirdparty-flashinfer" and run["backend_requested"] == "flashinfer"
    assert run["parity"]["passed"] is True
    assert (tmp_path / run["trace"]).is_file()


def test_the_sweep_gives_each_an_unavailable_row_with_its_reason(tmp_path):
    from collectors import sweep

    argv = ["--device", "cpu", "--out", str(tmp_path), "--seq", "16", "--head-dim", "64", "--dtype", "bf16"]
    argv += ["--causal", "--reps", "10", "--warmup", "0", "--variants", *THIRD_PARTY]
    assert sweep.main(argv) == 0
    rows = pl.read_csv(tmp_path / "sweep.csv").to_dicts()
    assert {r["variant"]: r["status"] for r in rows} == dict.fromkeys(THIRD_PARTY, "unavailable")
    assert all("runs on CUDA only" in r["reason"] for r in rows)


# ---------------------------------------------------------------- the kernels' names

# (name as a trace shows it, the row it belongs to, where the name comes from)
KERNELS = [
    ("quant_per_block_int8_kernel", "sage", "thu-ml/SageAttention 1.0.6 sageattention/quant_per_block.py"),
    ("_attn_fwd", "triton", "SageAttention 1.0.6 attn_qk_int8_per_block_causal.py: the Triton tutorial's name"),
    (
        "kernel_cutlass_kernel_flash_attncuteflash_fwd_sm90FlashAttentionForwardSm90_object_at__tensor0000o11101213_"
        "tensor0000o11101213_tensor0000o11101213_tensor0000o11101213_None_None_0",
        "flash-attn",
        "Dao-AILab/flash-attention flash_attn/cute/flash_fwd_sm90.py class FlashAttentionForwardSm90 (CuTe DSL name)",
    ),
    (
        "kernel_cutlass_kernel_flash_attncuteflash_fwd_sm100FlashAttentionForwardSm100_object_at__tensor0000o11101213_0",
        "flash-attn",
        "Dao-AILab/flash-attention pull request 2564 (the name before it)",
    ),
    (
        "flash_fwd_sm100_bf16_head_dim128_tile128x128_threads384_causal_pv_mma_rs_intra_wg_overlap_kernel_cutlass_"
        "kernel_flash_attncuteflash_fwd_sm100FlashAttentionForwardSm100_object_at__tensor0000o11101213_0",
        "flash-attn",
        "Dao-AILab/flash-attention pull request 2564 (the readable prefix)",
    ),
    (
        "void flashinfer::SinglePrefillWithKVCacheKernel<flashinfer::KernelTraits<(flashinfer::MaskMode)1, 128u, 1u, "
        "4u, 8u, 8u, 1u, 4u, (flashinfer::PosEncodingMode)0, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, int, "
        "flashinfer::DefaultAttention<false, false, false, false> >, flashinfer::SinglePrefillParams<__nv_bfloat16, "
        "__nv_bfloat16, __nv_bfloat16> >(flashinfer::SinglePrefillParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16>)",
        "flashinfer",
        "flashinfer-ai/flashinfer include/flashinfer/attention/prefill.cuh SinglePrefillWithKVCacheKernel<KTraits, Params>",
    ),
    (
        "void flashinfer::BatchPrefillWithRaggedKVCacheKernel<flashinfer::KernelTraits<(flashinfer::MaskMode)1>, "
        "flashinfer::BatchPrefillRaggedParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int> >"
        "(flashinfer::BatchPrefillRaggedParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int>)",
        "flashinfer",
        "flashinfer-ai/flashinfer include/flashinfer/attention/prefill.cuh BatchPrefillWithRaggedKVCacheKernel",
    ),
    (
        "void flashinfer::PrefillWithKVCacheKernel<flashinfer::CollectiveMainloop<flashinfer::StandardAttention, "
        "flashinfer::AttentionKernelTraits<false, 128, 128, 64, 2, cutlass::bfloat16_t, cutlass::bfloat16_t, "
        "cutlass::bfloat16_t, int, flashinfer::StandardAttention> >, flashinfer::CollectiveEpilogue<flashinfer::"
        "AttentionKernelTraits<false, 128, 128, 64, 2, cutlass::bfloat16_t, cutlass::bfloat16_t, cutlass::bfloat16_t, "
        "int, flashinfer::StandardAttention> >, flashinfer::AttentionKernelTraits<false, 128, 128, 64, 2, "
        "cutlass::bfloat16_t, cutlass::bfloat16_t, cutlass::bfloat16_t, int, flashinfer::StandardAttention>, false, "
        "true, flashinfer::SingleTileScheduler, false>(flashinfer::PrefillWithKVCacheKernel::Params)",
        "flashinfer",
        "flashinfer-ai/flashinfer include/flashinfer/attention/hopper/prefill_sm90.cuh PrefillWithKVCacheKernel (sm90)",
    ),
    ("PrefillWithKVCache", None, "a look-alike with no flashinfer namespace and no Kernel"),
]


@pytest.mark.parametrize("name, backend, source", KERNELS, ids=[k[0][:50] for k in KERNELS])
def test_each_librarys_kernel_is_named_by_its_row(name, backend, source):
    row = attention_backend(name)
    assert (row.name if row else None) == backend, source
    if backend is not None:
        assert family_of(name) == "fused attention"


@pytest.mark.parametrize(
    "variant_backend, names, evidence",
    [
        (
            "sage",
            ["aten::mean", "aten::sub_", "quant_per_block_int8_kernel", "_attn_fwd"],
            "quant_per_block_int8_kernel",
        ),
        ("flash-attn", ["aten::transpose", KERNELS[2][0]], KERNELS[2][0]),
        ("flashinfer", ["aten::stack", KERNELS[5][0]], KERNELS[5][0]),
        ("flashinfer", ["aten::stack"], ""),
    ],
)
def test_the_sweep_names_each_librarys_backend_from_its_kernels(variant_backend, names, evidence):
    assert measure.backend_ran(names, variant_backend) == ((variant_backend, evidence) if evidence else ("unknown", ""))


def _kernel(name, ts, dur, corr):
    args = {"correlation": corr, "device": 0, "stream": 7}
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": args}


def test_a_sage_1x_call_is_its_two_quantize_kernels_and_its_triton_attention_kernel(tmp_path):
    """SageAttention 1.0.6: per_block_int8 quantizes q then k (two quant_per_block_int8_kernel), then
    `_attn_fwd` runs; no attention op around them. Each call is one sage call of three kernels."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 5000}]
    for i, t in enumerate((100, 2100)):
        ev.append(_kernel("quant_per_block_int8_kernel", t, 20, 3 * i + 1))
        ev.append(_kernel("quant_per_block_int8_kernel", t + 30, 20, 3 * i + 2))
        ev.append(_kernel("_attn_fwd", t + 60, 300, 3 * i + 3))
    path = tmp_path / "sage1.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    calls = attention_calls(load_trace(path))
    assert calls["backend"].to_list() == ["sage", "sage"]
    assert calls["kernel"].to_list() == ["_attn_fwd", "_attn_fwd"] and calls["kernels"].to_list() == [3, 3]
    assert calls["time_ns"].to_list() == [340_000, 340_000]
