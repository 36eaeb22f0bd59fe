"""The attention variants, as plain functions over [batch, heads, seq, head_dim] tensors.

Every variant computes softmax attention for one forward pass, causal (lower-triangular) unless
bound with `causal=False`, and returns the output in the same [batch, heads, seq, head_dim]
layout, in the input dtype.

- naive: Q·Kᵀ, `scores * scale` (a Python float), out-of-place `masked_fill` with a precomputed
  causal mask, softmax, ·V. The out-of-place fill is a clone plus `masked_fill_`: a hidden copy.
- naive_inplace: the same with `masked_fill_`, so no clone.
- sdpa: `F.scaled_dot_product_attention(q, k, v, is_causal=True)`, PyTorch's default dispatch.
- sdpa-math / sdpa-flash / sdpa-efficient / sdpa-cudnn: SDPA with one backend forced through
  `torch.nn.attention.sdpa_kernel`. PyTorch raises a RuntimeError when the forced backend cannot
  run on this device or dtype; the collector records that text as the skip reason.
- hub: FlashAttention-2 from the Hugging Face kernels hub (`collectors.hub`), CUDA only.
- thirdparty-sage / thirdparty-fa4 / thirdparty-flashinfer: SageAttention 1.x, FlashAttention-4
  (CuTe DSL) and FlashInfer as their libraries document a causal prefill (`collectors.thirdparty`,
  which says what each supports), CUDA only.
- flex: FlexAttention (`torch.nn.attention.flex_attention`) with a causal block mask, under
  torch.compile: PyTorch's generated fused kernel (Triton on a GPU, C++ on the CPU), the path
  serving stacks take for custom masks. It needs a working compiler; without one it is a skip.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from collectors import thirdparty
from collectors.unavailable import Unavailable  # noqa: F401  re-exported: collection, e2e and the tests import it from here

Attention = Callable[[Tensor, Tensor, Tensor], Tensor]
"""One attention forward: (q, k, v) -> output, all [batch, heads, seq, head_dim]."""


@dataclass(frozen=True)
class Shape:
    """Attention input shape: q, k and v are each [batch, heads, seq, head_dim]."""

    batch: int
    heads: int
    seq: int
    head_dim: int

    @property
    def tokens(self) -> int:
        """Tokens processed by one forward pass (batch * seq)."""
        return self.batch * self.seq

    def as_dict(self) -> dict[str, int]:
        return {"batch": self.batch, "heads": self.heads, "seq": self.seq, "head_dim": self.head_dim}


def causal_mask(seq: int, device: torch.device) -> Tensor:
    """Bool [seq, seq] mask, True strictly above the diagonal (the future positions to hide)."""
    return torch.ones(seq, seq, dtype=torch.bool, device=device).triu(1)


def naive(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """Textbook attention with an out-of-place `masked_fill` (clone + fill); no fill without a mask."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = q @ k.transpose(-2, -1)
    scores = scores * scale
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def naive_inplace(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """Textbook attention with an in-place `masked_fill_` (no clone); no fill without a mask."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = q @ k.transpose(-2, -1)
    scores = scores * scale
    if mask is not None:
        scores.masked_fill_(mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def sdpa(q: Tensor, k: Tensor, v: Tensor, causal: bool = True) -> Tensor:
    """Fused SDPA with PyTorch's default backend choice."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def sdpa_forced(q: Tensor, k: Tensor, v: Tensor, backend: SDPBackend, causal: bool = True) -> Tensor:
    """Fused SDPA restricted to one backend; raises RuntimeError when it cannot run."""
    with sdpa_kernel(backend):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def hub_flash(q: Tensor, k: Tensor, v: Tensor, flash_attn_func: Callable[..., object], causal: bool = True) -> Tensor:
    """FlashAttention-2 from the kernels hub; it takes [batch, seq, heads, head_dim] views."""
    out = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal)
    if isinstance(out, (tuple, list)):
        out = out[0]
    return out.transpose(1, 2)


@dataclass(frozen=True)
class Variant:
    """A named attention variant.

    backend: the SDPA backend the variant asks for ("default", "math", "flash", "efficient",
    "cudnn"), "hub" for the kernels-hub kernel, "flex" for FlexAttention, the dashboard's
    BACKEND_TABLE name of a third-party library's kernels ("sage", "flash-attn", "flashinfer"),
    None for the hand-written variants.
    bind: given an example q (and `causal`, default True), returns the attention function ready
    to call on q-like inputs, or raises Unavailable with the reason.
    """

    name: str
    backend: str | None
    bind: Callable[..., Attention]


def _bind_naive(q: Tensor, causal: bool = True) -> Attention:
    mask = causal_mask(q.shape[-2], q.device) if causal else None
    return lambda q, k, v: naive(q, k, v, mask)


def _bind_naive_inplace(q: Tensor, causal: bool = True) -> Attention:
    mask = causal_mask(q.shape[-2], q.device) if causal else None
    return lambda q, k, v: naive_inplace(q, k, v, mask)


def _bind_sdpa(q: Tensor, causal: bool = True) -> Attention:
    return lambda q, k, v: sdpa(q, k, v, causal)


def _bind_forced(backend: SDPBackend) -> Callable[..., Attention]:
    def bind(q: Tensor, causal: bool = True) -> Attention:
        return lambda q, k, v: sdpa_forced(q, k, v, backend, causal)

    return bind


def _bind_hub(q: Tensor, causal: bool = True) -> Attention:
    from collectors.hub import load_flash_attn_func

    flash_attn_func = load_flash_attn_func(q.device)
    return lambda q, k, v: hub_flash(q, k, v, flash_attn_func, causal)


def _causal_rule(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
    """FlexAttention mask_mod: a query sees its own position and the ones before it."""
    return q_idx >= kv_idx


def _bind_flex(q: Tensor, causal: bool = True) -> Attention:
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError as exc:
        raise Unavailable(f"this torch has no FlexAttention ({exc}); it needs torch 2.5 or newer") from None
    seq = q.shape[-2]
    block_mask = create_block_mask(_causal_rule, None, None, seq, seq, device=str(q.device)) if causal else None
    compiled = torch.compile(flex_attention)
    return lambda q, k, v: compiled(q, k, v, block_mask=block_mask)


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("naive", None, _bind_naive),
        Variant("naive_inplace", None, _bind_naive_inplace),
        Variant("sdpa", "default", _bind_sdpa),
        Variant("sdpa-math", "math", _bind_forced(SDPBackend.MATH)),
        Variant("sdpa-flash", "flash", _bind_forced(SDPBackend.FLASH_ATTENTION)),
        Variant("sdpa-efficient", "efficient", _bind_forced(SDPBackend.EFFICIENT_ATTENTION)),
        Variant("sdpa-cudnn", "cudnn", _bind_forced(SDPBackend.CUDNN_ATTENTION)),
        Variant("hub", "hub", _bind_hub),
        Variant("flex", "flex", _bind_flex),
        Variant("thirdparty-sage", "sage", thirdparty.bind_sage),
        Variant("thirdparty-fa4", "flash-attn", thirdparty.bind_fa4),
        Variant("thirdparty-flashinfer", "flashinfer", thirdparty.bind_flashinfer),
    )
}
"""Every variant by name, in the order the collector runs them."""
