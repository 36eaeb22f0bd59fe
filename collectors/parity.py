"""Numerics of a variant against an fp32 math reference on the same inputs.

The reference upcasts the (already rounded) inputs to float32 and computes attention explicitly:
Q·Kᵀ·scale, -inf above the diagonal (causal, the default; no mask with causal=False), softmax, ·V. As in FlashAttention's own tests,
reduced-precision outputs are judged against that fp32 reference with tolerances that suit the
dtype. An output passes when it has the reference's shape, is finite, and every element satisfies
|out - ref| <= atol + rtol * |ref| (the torch.allclose rule).

max_abs: max |out - ref|. max_rel: max |out - ref| / max(|ref|, atol); the floor at atol keeps
near-zero reference elements from turning rounding noise into huge relative errors.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Tolerance:
    """Absolute (output units) and relative (fraction) tolerance."""

    atol: float
    rtol: float


TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(atol=1e-4, rtol=1e-4),
    torch.float16: Tolerance(atol=5e-3, rtol=5e-3),
    torch.bfloat16: Tolerance(atol=3e-2, rtol=3e-2),
}
"""Per input dtype. bf16 keeps 8 mantissa bits (eps 7.8e-3), fp16 11 (eps 9.8e-4); the naive
variant, which runs its softmax in the input dtype, stays about 2x inside these at 1024 tokens."""


@dataclass(frozen=True)
class Parity:
    """Result of one comparison against the fp32 reference."""

    max_abs: float
    max_rel: float
    atol: float
    rtol: float
    passed: bool

    def as_dict(self) -> dict[str, float | bool | None]:
        """JSON-ready: a non-finite error (NaN output, wrong shape) becomes None."""
        fields = asdict(self)
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in fields.items()}


def reference(q: Tensor, k: Tensor, v: Tensor, causal: bool = True) -> Tensor:
    """fp32 attention of q, k, v ([batch, heads, seq, head_dim]), computed explicitly: causal
    (future positions hidden) by default, every position visible with causal=False."""
    q, k, v = q.float(), k.float(), v.float()
    seq = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        future = torch.ones(seq, seq, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def compare(out: Tensor, ref: Tensor, dtype: torch.dtype) -> Parity:
    """Compare a variant's output with the fp32 reference, using the tolerance for `dtype`."""
    tol = TOLERANCES.get(dtype, TOLERANCES[torch.float32])
    if out.shape != ref.shape:
        return Parity(math.inf, math.inf, tol.atol, tol.rtol, passed=False)
    diff = (out.float() - ref).abs()
    finite = bool(torch.isfinite(out).all())
    max_abs = float(diff.max()) if finite else math.inf
    max_rel = float((diff / ref.abs().clamp_min(tol.atol)).max()) if finite else math.inf
    within = bool((diff <= tol.atol + tol.rtol * ref.abs()).all())
    return Parity(max_abs, max_rel, tol.atol, tol.rtol, passed=finite and within)
