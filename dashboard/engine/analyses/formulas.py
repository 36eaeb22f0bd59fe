"""The work of one attention call from its sizes: FLOPs and the minimum bytes moved, by the
conventions below.

Conventions (the README's "Attention efficiency" section says the same):
- FLOPs count the two matrix products of the forward, 2 FLOP per multiply-add: for every score
  pair (query i, key j) that is computed, QK^T costs 2*D and PV 2*Dv, per query head. Forward =
  2*Hq*pairs*(D + Dv) = 4*B*H*Sq*Sk*D without a mask. Softmax, scaling and dropout are not counted.
- Causal masking counts only the unmasked pairs, exactly, also for Sq != Sk. PyTorch's is_causal
  aligns the mask to the top-left (query i sees keys 0..i); FlashAttention's own ops (flash_attn,
  the kernels hub) align it to the bottom-right (query i sees keys 0..i+Sk-Sq).
- Grouped-query attention: FLOPs use the query heads Hq; bytes read K and V with their own Hkv heads.
- Backward = the five matrix products of FlashAttention's backward (recomputed QK^T, dV, dP, dQ,
  dK): 2*Hq*pairs*(3*D + 2*Dv), which is the usual 2.5x the forward when D == Dv.
- Bytes are the minimum a fused kernel must move: read Q, K, V, write O, and write the fp32
  log-sum-exp (4 bytes per query row and head) where the backend returns it; backward reads Q, K,
  V, O, dO and the log-sum-exp and writes dQ, dK, dV. An explicit attention mask adds its bytes
  (and makes every pair count: the mask's pattern is data, not shape).
- Varlen batches: the sum over sequences. A trace records only the total and the maximum length,
  so a varlen call is counted only when those determine every length (one sequence, or
  total == batch * max); otherwise the row says why it has no number.
Times are ns in the work, µs in the result columns that say so; TFLOP/s = 10^12 FLOP/s, TB/s = 10^12 bytes/s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from dashboard.engine.rules.op_readers import BOTTOM_RIGHT, TOP_LEFT  # how a causal mask aligns

FORWARD, BACKWARD = "forward", "backward"
LSE_BYTES = 4  # the log-sum-exp is fp32 in every backend that writes it

# Input type as torch.profiler writes it -> (peak column of peaks.PEAK_TABLE, bytes per element).
DTYPES: dict[str, tuple[str, int]] = {
    "float": ("fp32", 4),
    "c10::BFloat16": ("bf16", 2),
    "c10::Half": ("fp16", 2),
    "double": ("fp64", 8),
    "c10::Float8_e4m3fn": ("fp8", 1),
    "c10::Float8_e5m2": ("fp8", 1),
    "c10::Float8_e4m3fnuz": ("fp8", 1),
    "c10::Float8_e5m2fnuz": ("fp8", 1),
}
# Collector dtype strings (collectors write torch dtype names without the prefix).
COLLECTOR_DTYPES = {"float32": "float", "bfloat16": "c10::BFloat16", "float16": "c10::Half"}


# --- the formulas -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Work:
    """The work of one attention call: flops (FLOP) and bytes (minimum bytes moved)."""

    flops: int
    bytes: int


def causal_pairs(sq: int, sk: int, align: str = TOP_LEFT) -> int:
    """Score pairs a causal mask leaves for sq queries and sk keys. Top-left: query i sees keys
    0..min(i, sk-1); bottom-right: keys 0..i+sk-sq (none while that is negative)."""
    m = min(sq, sk)
    if align == TOP_LEFT:
        return m * (m + 1) // 2 + (sq - m) * sk
    if align == BOTTOM_RIGHT:
        return m * (m + 1) // 2 + (sk - m) * m
    raise ValueError(f"align must be {TOP_LEFT!r} or {BOTTOM_RIGHT!r}, not {align!r}")


def score_pairs(sq: int, sk: int, causal: bool, align: str = TOP_LEFT) -> int:
    """Score pairs computed for one sequence: sq*sk, or the causal count."""
    return causal_pairs(sq, sk, align) if causal else sq * sk


def attention_work(
    seqs: Sequence[tuple[int, int]],
    heads_q: int,
    heads_kv: int,
    head_dim: int,
    head_dim_v: int | None = None,
    *,
    causal: bool = False,
    align: str = TOP_LEFT,
    elem_bytes: int = 2,
    lse: bool = False,
    backward: bool = False,
    extra_bytes: int = 0,
) -> Work:
    """FLOPs and minimum bytes of one attention call over sequences given as (query length, key
    length) pairs (a batch of B equal sequences is B equal pairs; a varlen batch its own lengths).
    See the module docstring for the conventions."""
    dv = head_dim if head_dim_v is None else head_dim_v
    pairs = sum(score_pairs(sq, sk, causal, align) for sq, sk in seqs)
    tokens_q = sum(sq for sq, _ in seqs)
    tokens_k = sum(sk for _, sk in seqs)
    q, o = tokens_q * heads_q * head_dim, tokens_q * heads_q * dv
    kv = tokens_k * heads_kv * (head_dim + dv)
    if backward:
        flops = 2 * heads_q * pairs * (3 * head_dim + 2 * dv)
        moved = elem_bytes * (2 * q + 2 * kv + 2 * o) + LSE_BYTES * tokens_q * heads_q
    else:
        flops = 2 * heads_q * pairs * (head_dim + dv)
        moved = elem_bytes * (q + kv + o) + (LSE_BYTES * tokens_q * heads_q if lse else 0)
    return Work(flops, moved + extra_bytes)


# A recorded tensor dimension is an int64 in torch, but no attention call has one this large; larger
# ones are not shapes, and their work would not fit the int64 flops and bytes columns.
MAX_DIM = 1 << 40
INT64_MAX = (1 << 63) - 1
