"""Attention kernels that serve one phase of a serving step (PHASE_KERNELS): prefill (extend) or
decode. A step with no step annotation is given its phase by them (analyses/phases.py): decode
kernels only -> decode, prefill kernels only -> prefill, both -> mixed. Kernels that serve both
phases in one launch (vLLM's kernel_unified_attention_2d/3d, FlashAttention's varlen kernels with a
KV cache, CK's FmhaFwdKernel) are not listed: their name does not tell the phase."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from dashboard.engine.rules.names import parse


@dataclass(frozen=True)
class PhaseRule:
    """A row of PHASE_KERNELS: pattern (a regular expression over the function name,
    names.parse(...).qualname, case-insensitive), phase ('prefill' or 'decode'), reason, source,
    and examples it must take."""

    pattern: str
    phase: str
    reason: str
    source: str
    examples: tuple[str, ...] = ()


PHASE_KERNELS: tuple[PhaseRule, ...] = (
    PhaseRule(
        r"paged_attention_v[12]_(reduce_)?kernel|paged_attention_ll4mi",
        "decode",
        "vLLM's paged attention: one new token per sequence over its paged KV cache (v1, v2 and its "
        "reduce, ROCm's ll4mi); vLLM runs prefill through other kernels",
        "vllm-project/vllm csrc/attention/paged_attention_v1.cu, paged_attention_v2.cu, csrc/rocm/attention.cu",
        (
            "void vllm::paged_attention_v2_kernel<__nv_bfloat16, __nv_bfloat16, 128, 16, 128, "
            "(vllm::Fp8KVCacheDataType)0, false, 512>(float*)",
            "void vllm::paged_attention_v1_kernel<c10::BFloat16, c10::BFloat16, 128, 16, 128>(c10::BFloat16*)",
        ),
    ),
    PhaseRule(
        r"(^|::)_fwd_(grouped_)?kernel_stage[12]$",
        "decode",
        "the Triton split-KV decode attention of SGLang and vLLM (stage 1 per KV split, stage 2 merges)",
        "sgl-project/sglang python/sglang/srt/layers/attention/triton_ops/decode_attention.py; "
        "vllm-project/vllm vllm/attention/ops/triton_decode_attention.py",
        ("_fwd_kernel_stage1", "_fwd_grouped_kernel_stage1", "_fwd_kernel_stage2"),
    ),
    PhaseRule(
        r"(Batch|Single)DecodeWithPagedKVCache|(Batch|Single)DecodeWithKVCache",
        "decode",
        "FlashInfer's decode kernels",
        "flashinfer-ai/flashinfer include/flashinfer/attention/decode.cuh",
        ("void flashinfer::BatchDecodeWithPagedKVCacheKernel<128u, 4u>(flashinfer::Params)",),
    ),
    PhaseRule(
        r"(Batch|Single)PrefillWith(Paged|Ragged)?KVCache",
        "prefill",
        "FlashInfer's and Composable Kernel's batch prefill over a (paged or ragged) KV cache; "
        "FlashInfer's decode with use_tensor_cores also runs these and would read as prefill",
        "flashinfer-ai/flashinfer include/flashinfer/attention/prefill.cuh; ROCm/composable_kernel "
        "include/ck_tile/ops/fmha/kernel/fmha_batch_prefill_kernel.hpp; "
        "tests/data/tracelens_mi300x_sglang_qwen3_prefilldecode_ck_fmha.json.gz (SGLang's extend)",
        (
            "void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits>(flashinfer::Params)",
            "ck_tile::FmhaBatchPrefillWithPagedKVCacheKernel",
        ),
    ),
)

_PATTERNS = tuple((re.compile(rule.pattern, re.IGNORECASE), rule.phase) for rule in PHASE_KERNELS)


@functools.lru_cache(maxsize=1 << 14)
def kernel_phase(name: str) -> str | None:
    """'prefill' or 'decode' for a kernel of one phase (PHASE_KERNELS, over its function name), else None."""
    qualname = parse(name).qualname
    return next((phase for pattern, phase in _PATTERNS if pattern.search(qualname)), None)
