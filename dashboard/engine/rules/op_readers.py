"""Where each attention op keeps its arguments: the table of op readers (one row per op schema, with
its source), the one table of what an attention op is by name (reader_for; the backends' evidence adds
the ops a backend row names), and the kernels that carry is_causal as a template argument.
analyses/shapes.read_shape reads them."""

from __future__ import annotations

import re
from dataclasses import dataclass


# How a causal mask aligns when the query is shorter than the keys: PyTorch's is_causal is top-left
# (query i sees keys 0..i), FlashAttention 2's causal is bottom-right (the last query sees every key).
TOP_LEFT, BOTTOM_RIGHT = "top-left", "bottom-right"


# --- reading shapes from ops --------------------------------------------------------------------


@dataclass(frozen=True)
class OpReader:
    """Where an attention op keeps its arguments (indices into Input Dims / Concrete Inputs).

    pattern: regular expression over the op name; layout: 'BHSD' (batch, heads, seq, dim) or
    'BSHD' (varlen: 'THD' when cu_q's tensor is present); q: index of the query (key and value
    follow it); causal: index of is_causal (several: the first of them that reads as a bool, for an op
    whose arguments moved between versions); mask_type: index of xFormers' custom_mask_type (0 none,
    1 causal top-left, 2 causal bottom-right); align: how is_causal aligns; lse: True/False, or the
    index of compute_log_sumexp; mask: index of an attention mask or bias tensor; cu_q/max_q/max_k:
    varlen cumulative lengths tensor and maximum lengths; window: indices of sliding-window sizes.
    serving: a serving framework's attention-layer op (layout 'TND': the step's query tokens
    flattened, [tokens, heads, head_dim], or [tokens, heads * head_dim] for the query, whose head
    dim is then the key's), whose keys live in the framework's paged KV cache: how many keys each
    query sees is not in the op's inputs but in the step annotation vLLM and SGLang write around
    the step (ServingBatch); the attention is decoder (causal) attention of each request's new
    tokens over its whole context.
    """

    pattern: str
    layout: str
    q: int
    causal: int | tuple[int, ...] | None
    align: str = TOP_LEFT
    lse: bool | int = False
    mask: int | None = None
    mask_type: int | None = None
    cu_q: int | None = None
    max_q: int | None = None
    max_k: int | None = None
    window: tuple[int, int] | None = None
    backward: bool = False
    serving: bool = False
    source: str = ""


# The schemas are PyTorch's native_functions.yaml (2.x) and FlashAttention 2's flash_api.cpp /
# flash_attn_interface.py custom ops (the kernels hub registers the latter under _flash_attn_<hash>::).
# Where each row's argument positions come from.
ATEN = "PyTorch aten/src/ATen/native/native_functions.yaml (2.x)"
FA_PY = "FlashAttention 2 and 3, flash_attn_interface.py (torch.library custom ops flash_attn::, flash_attn_3::)"
FA_HUB = "FlashAttention 2's flash_api.cpp (mha_fwd, mha_varlen_fwd, mha_bwd), as the kernels hub registers them"
XFORMERS = "xFormers, xformers/csrc/attention/attention.cpp"
AITER_SAGE = "ROCm aiter, aiter/ops/triton/attention/fav3_sage.py (_FAv3SageWrapperFunc.forward)"
VLLM = "vLLM, vllm/attention/layer.py (unified_attention, unified_attention_with_output)"
SGLANG = "SGLang, python/sglang/srt/layers/radix_attention.py (unified_attention_with_output)"

OP_READERS: tuple[OpReader, ...] = (
    OpReader(r"^aten::scaled_dot_product_attention$", "BHSD", 0, causal=5, mask=3, source=ATEN),
    OpReader(r"^aten::_scaled_dot_product_flash_attention$", "BHSD", 0, causal=4, lse=True, source=ATEN),
    OpReader(
        r"^aten::_scaled_dot_product_flash_attention_for_cpu$", "BHSD", 0, causal=4, lse=True, mask=5, source=ATEN
    ),
    OpReader(r"^aten::_scaled_dot_product_efficient_attention$", "BHSD", 0, causal=6, lse=4, mask=3, source=ATEN),
    OpReader(r"^aten::_scaled_dot_product_cudnn_attention$", "BHSD", 0, causal=6, lse=4, mask=3, source=ATEN),
    OpReader(r"^aten::_scaled_dot_product_attention_math(_for_mps)?$", "BHSD", 0, causal=5, mask=3, source=ATEN),
    OpReader(
        r"^aten::_flash_attention_forward$",
        "BSHD",
        0,
        causal=8,
        lse=True,
        cu_q=3,
        max_q=5,
        max_k=6,
        window=(11, 12),
        source=ATEN,
    ),
    OpReader(
        r"^aten::_efficient_attention_forward$",
        "BSHD",
        0,
        causal=None,
        mask_type=9,
        lse=10,
        mask=3,
        cu_q=4,
        max_q=6,
        max_k=7,
        source=ATEN,
    ),
    OpReader(r"^aten::_scaled_dot_product_flash_attention_backward$", "BHSD", 1, causal=11, backward=True, source=ATEN),
    OpReader(
        r"^aten::_scaled_dot_product_flash_attention_for_cpu_backward$", "BHSD", 1, causal=7, backward=True, source=ATEN
    ),
    OpReader(
        r"^aten::_scaled_dot_product_efficient_attention_backward$",
        "BHSD",
        1,
        causal=11,
        mask=4,
        backward=True,
        source=ATEN,
    ),
    OpReader(
        r"^aten::_scaled_dot_product_cudnn_attention_backward$",
        "BHSD",
        1,
        causal=14,
        mask=8,
        backward=True,
        source=ATEN,
    ),
    OpReader(
        r"^aten::_flash_attention_backward$",
        "BSHD",
        1,
        causal=11,
        cu_q=6,
        max_q=8,
        max_k=9,
        window=(15, 16),
        backward=True,
        source=ATEN,
    ),
    OpReader(
        r"^aten::_efficient_attention_backward$",
        "BSHD",
        1,
        causal=None,
        mask_type=14,
        mask=4,
        cu_q=6,
        max_q=8,
        max_k=9,
        backward=True,
        source=ATEN,
    ),
    OpReader(
        r"^flash_attn(_3)?::_flash_attn_forward$",
        "BSHD",
        0,
        causal=5,
        align=BOTTOM_RIGHT,
        lse=True,
        window=(6, 7),
        source=FA_PY,
    ),
    OpReader(
        r"^flash_attn(_3)?::_flash_attn_varlen_forward$",
        "BSHD",
        0,
        causal=9,
        align=BOTTOM_RIGHT,
        lse=True,
        cu_q=3,
        max_q=5,
        max_k=6,
        window=(10, 11),
        source=FA_PY,
    ),
    OpReader(
        r"^flash_attn(_3)?::_flash_attn_backward$",
        "BSHD",
        1,
        causal=11,
        align=BOTTOM_RIGHT,
        window=(12, 13),
        backward=True,
        source=FA_PY,
    ),
    OpReader(
        r"^flash_attn(_3)?::_flash_attn_varlen_backward$",
        "BSHD",
        1,
        causal=15,
        align=BOTTOM_RIGHT,
        cu_q=9,
        max_q=11,
        max_k=12,
        window=(16, 17),
        backward=True,
        source=FA_PY,
    ),
    OpReader(r"^_flash_attn\w*::fwd$", "BSHD", 0, causal=7, align=BOTTOM_RIGHT, lse=True, window=(8, 9), source=FA_HUB),
    OpReader(
        r"^_flash_attn\w*::varlen_fwd$",
        "BSHD",
        0,
        causal=15,
        align=BOTTOM_RIGHT,
        lse=True,
        cu_q=4,
        max_q=10,
        max_k=11,
        window=(16, 17),
        source=FA_HUB,
    ),
    OpReader(
        r"^_flash_attn\w*::bwd$",
        "BSHD",
        1,
        causal=12,
        align=BOTTOM_RIGHT,
        window=(13, 14),
        backward=True,
        source=FA_HUB,
    ),
    # xFormers' own ops (xformers/csrc/attention/attention.cpp): query, key, value, attn_bias,
    # seqstart_q, seqstart_k, max_seqlen_q, dropout_p, compute_logsumexp, custom_mask_type, ...;
    # [batch, seq, heads, dim] like aten::_efficient_attention_forward, whose kernels they share.
    OpReader(
        r"^xformers::efficient_attention_forward_(cutlass|ck)$",
        "BSHD",
        0,
        causal=None,
        mask_type=9,
        lse=8,
        mask=3,
        cu_q=4,
        max_q=6,
        source=XFORMERS,
    ),
    # SageAttention in ROCm aiter (aiter/ops/triton/attention/fav3_sage.py): _FAv3SageWrapperFunc is an
    # autograd.Function, whose apply the profiler records under the class's name with its arguments (the
    # tensors' shapes, and the scalars it can type: a None or a tuple may be left out). q, k, v are
    # [batch, seq, heads, dim] (layout "bshd", the wrapper's default); causal follows q, k, v directly in
    # older versions (index 3) and after softmax_scale in newer ones (index 4, or 3 where the profiler
    # left a None softmax_scale out). It quantizes Q, K and V and runs sage_fwd on them: FLOPs are the
    # attention's, whatever precision its products run in.
    OpReader(r"^_FAv3SageWrapperFunc$", "BSHD", 0, causal=(3, 4), source=AITER_SAGE),
    # Serving frameworks' attention-layer ops (see OpReader.serving): vLLM's
    # unified_attention(query, key, value, layer_name) and unified_attention_with_output(query, key,
    # value, output, layer_name, ...) take [tokens, heads, head_dim] (vllm/attention/layer.py views
    # them so); SGLang's unified_attention_with_output(query, key, value, output, save_kv_cache,
    # layer_id, ...) takes the query as [tokens, heads * head_dim] and key, value as [tokens, heads, dim].
    OpReader(r"^vllm::unified_attention(_with_output)?$", "TND", 0, causal=None, serving=True, source=VLLM),
    OpReader(r"^sglang::unified_attention_with_output(_and_lse)?$", "TND", 0, causal=None, serving=True, source=SGLANG),
)
_READERS = tuple((re.compile(r.pattern), r) for r in OP_READERS)


def reader_for(name: str) -> OpReader | None:
    """The OP_READERS row of an op name, or None."""
    return next((r for rx, r in _READERS if rx.search(name)), None)


# Kernels that carry is_causal as a template argument (FlashAttention 2 and PyTorch's copy of it):
# function name -> position of Is_causal among the template arguments.
KERNEL_CAUSAL_ARG: tuple[tuple[str, int], ...] = (
    (r"(^|::)flash_fwd_kernel$", 2),
    (r"(^|::)flash_fwd_splitkv_kernel$", 1),
    (r"(^|::)flash_bwd_dq_dk_dv_loop(_seqk_parallel)?_kernel$", 2),
)
