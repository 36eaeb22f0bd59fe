"""Kernels that belong to a call: KV-cache writes (KV_CACHE_WRITES: requested copies, not hidden
ones) and the parts of one attention call (CALL_PARTS: quantization before, a split-KV merge after)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from dashboard.engine.rules.common import joined as _joined
from dashboard.engine.rules.names import parse


# ---------------------------------------------------------------- KV-cache writes


@dataclass(frozen=True)
class NameRule:
    """A row of a table of one kind of name: pattern (a regular expression over the function name,
    names.parse(...).qualname, case-insensitive), reason, source, and examples it must take."""

    pattern: str
    reason: str
    source: str
    examples: tuple[str, ...] = ()


# Kernels that write keys and values into a KV cache: the serving framework's attention op doing
# what it exists for, so copies.py counts them as requested, never hidden. They are copy kernels:
# FAMILY_RULES' copy rows include this table, so a name taken here is always in the copy family.
KV_CACHE_WRITES: tuple[NameRule, ...] = (
    NameRule(
        r"(^|::)reshape_and_cache",
        "vLLM's KV-cache write (reshape_and_cache_kernel, reshape_and_cache_flash_kernel)",
        "vllm-project/vllm csrc/cache_kernels.cu; tests/data/tracelens_vllm_decode_graph_unified_attention.json.gz",
        (
            "void vllm::reshape_and_cache_flash_kernel<__hip_bfloat16, __hip_bfloat16, (vllm::Fp8KVCacheDataType)0>"
            "(__hip_bfloat16 const*, long const*, int)",
        ),
    ),
    NameRule(
        r"(^|::)store_kvcache",
        "SGLang's KV-cache write (store_kvcache, its jit_kernel kvcache.store_cache)",
        "sgl-project/sglang python/sglang/jit_kernel/kvcache.py; "
        "tests/data/tracelens_mi300x_sglang_qwen3_prefilldecode_ck_fmha.json.gz",
        (
            "void (anonymous namespace)::store_kvcache<2048l, 4, false, long>((anonymous namespace)::StoreKVCacheParams)",
        ),
    ),
)
KV_CACHE_WRITE_KERNELS = _joined([r.pattern for r in KV_CACHE_WRITES])


@functools.lru_cache(maxsize=1 << 16)
def is_kv_cache_write(name: str) -> bool:
    """True for a kernel that writes a KV cache (KV_CACHE_WRITES, over its function name)."""
    return _KV_CACHE_WRITE.search(parse(name).qualname) is not None


_KV_CACHE_WRITE = re.compile(KV_CACHE_WRITE_KERNELS, re.IGNORECASE)


# ---------------------------------------------------------------- parts of one attention call


@dataclass(frozen=True)
class CallPart:
    """One row of CALL_PARTS: attention kernels (BACKEND_TABLE's fused rows) whose function name
    (names.parse(...).qualname, case-sensitive) matches `pattern` are a part of the call of another
    kernel: `before` (True) the next attention kernel on their device and stream, else the one
    before it. examples: names the row must take. backend: when set, a call without an op that has
    this part is that backend's call whatever its main kernel's name (call_backend)."""

    pattern: str
    before: bool
    reason: str
    source: str
    examples: tuple[str, ...] = ()
    backend: str | None = None


# An attention call is one call, however many kernels it launches. Under an attention op the op
# says which kernels are one call; these rows say it where no op does (a graph replay, a library
# that records no op), so that a quantization kernel is not counted as a call of its own.
CALL_PARTS: tuple[CallPart, ...] = (
    CallPart(
        r"^sage_quant\w*_kernel$|^quant_(per_block|query_per_thread|key_per_thread)_int[48]_kernel$|"
        r"^sageattn_quant\w*_kernel$",
        True,
        "SageAttention quantizes Q and K (INT8) and V (FP8) in kernels of their own, then runs the attention "
        "kernel on them: one call, quantize and attention kernels together",
        "ROCm/aiter aiter/ops/triton/attention/fav3_sage.py (sage_quant, then sage_fwd); thu-ml/SageAttention "
        "sageattention/triton/quant_per_block.py, quant_per_thread.py",
        ("sage_quant_kernel", "quant_per_block_int8_kernel", "quant_key_per_thread_int8_kernel"),
        # SageAttention 1.x's Triton attention kernel is named `_attn_fwd`, as the Triton tutorial's is
        # (BACKEND_TABLE's triton row): its quantize kernels say whose call it is
        backend="sage",
    ),
    CallPart(
        r"^reduce_segments$",
        False,
        "vLLM's Triton unified attention: the 3d kernel splits the keys into segments, reduce_segments merges them",
        "vllm-project/vllm vllm/attention/ops/triton_unified_attention.py; "
        "tests/data/tracelens_vllm_decode_graph_unified_attention.json.gz",
        ("reduce_segments",),
    ),
    CallPart(
        r"^_fwd_kernel_stage2(_\w+)?$",
        False,
        "Triton split-KV decode (SGLang, vLLM): stage 1 computes each split, stage 2 merges them",
        "sgl-project/sglang python/sglang/srt/layers/attention/triton_ops/decode_attention.py",
        ("_fwd_kernel_stage2",),
    ),
    CallPart(
        r"(^|::)flash_fwd_splitkv(_mla)?_combine_kernel$",
        False,
        "FlashAttention's and FlashMLA's split-KV forward: the combine kernel merges the splits' partial outputs",
        "Dao-AILab/flash-attention csrc/flash_attn/src/flash_fwd_kernel.h (combine_attn_seqk_parallel); "
        "deepseek-ai/FlashMLA csrc/flash_fwd_mla_kernel.h",
        (
            "void flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, "
            "cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, 4, 1, true>"
            "(flash::Flash_fwd_params)",
            "void flash::flash_fwd_splitkv_mla_combine_kernel<cutlass::bfloat16_t, 512, 64>(Flash_fwd_mla_params)",
        ),
    ),
)


@functools.lru_cache(maxsize=1 << 16)
def call_backend(name: str) -> str | None:
    """The backend a call without an op is when `name` is one of its parts (CallPart.backend), else None."""
    qualname = parse(name).qualname
    return next((row.backend for row in CALL_PARTS if re.search(row.pattern, qualname)), None)


@functools.lru_cache(maxsize=1 << 16)
def call_part(name: str) -> bool | None:
    """For a kernel that is a part of another kernel's attention call (CALL_PARTS): True when it
    comes before that kernel, False when after; None for any other name."""
    qualname = parse(name).qualname
    return next((row.before for row in CALL_PARTS if re.search(row.pattern, qualname)), None)
