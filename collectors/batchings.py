"""The serving mix's batchings (`python -m collectors serve`): each turns the requests' q, k, v
([heads, length, head_dim] per request) into one pass of attention over all of them, ready to time,
and splits the pass's result back into one output per request. Building inputs, masks, nested
tensors and block masks happens here, before timing.

- padded_sdpa: each batch padded to its longest request; SDPA with a boolean mask (causal AND the
  key is a real token).
- packed_njt_sdpa: each batch as nested jagged tensors; SDPA with is_causal=True, no padding.
- packed_flex: each batch packed into one sequence; FlexAttention with a document mask under
  torch.compile.
- per_request_sdpa: one SDPA call per request: the parity reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import Tensor

QKV = tuple[Tensor, Tensor, Tensor]


def batches_of(n: int, size: int) -> list[range]:
    """Request indices in consecutive batches of `size` (the last may be shorter)."""
    return [range(i, min(n, i + size)) for i in range(0, n, size)]


def computed_tokens(variant: str, lengths: tuple[int, ...], batch: int) -> int:
    """Token positions a batching computes: padded = sum over batches of (batch size x longest);
    every other batching computes the real tokens only."""
    if variant == "padded_sdpa":
        return sum(len(b) * max(lengths[i] for i in b) for b in batches_of(len(lengths), batch))
    return sum(lengths)


@dataclass
class Prepared:
    """A batching ready to run: run() does one pass (the timed work); split(outputs) turns its
    result into one [heads, length, head_dim] output per request."""

    run: Callable[[], list[Any]]
    split: Callable[[list[Any]], list[Tensor]]
    calls: int


def prepare_padded(reqs: list[QKV], lengths: tuple[int, ...], batch: int) -> Prepared:
    groups = batches_of(len(reqs), batch)
    inputs = []
    for b in groups:
        longest = max(lengths[i] for i in b)
        q0 = reqs[b[0]][0]
        h, d = q0.shape[0], q0.shape[-1]
        qkv = [q0.new_zeros(len(b), h, longest, d) for _ in range(3)]
        for row, i in enumerate(b):
            for t, src in zip(qkv, reqs[i]):
                t[row, :, : lengths[i]] = src
        real = (
            torch.arange(longest, device=q0.device)[None, :]
            < torch.tensor([lengths[i] for i in b], device=q0.device)[:, None]
        )
        causal = torch.ones(longest, longest, dtype=torch.bool, device=q0.device).tril()
        mask = causal[None, None] & real[:, None, None, :]  # [b, 1, q, kv]: causal and a real key
        inputs.append((*qkv, mask))

    def run() -> list[Any]:
        return [F.scaled_dot_product_attention(q, k, v, attn_mask=m) for q, k, v, m in inputs]

    def split(outs: list[Any]) -> list[Tensor]:
        return [o[row, :, : lengths[i]] for o, b in zip(outs, groups) for row, i in enumerate(b)]

    return Prepared(run, split, len(groups))


def prepare_njt(reqs: list[QKV], lengths: tuple[int, ...], batch: int) -> Prepared:
    groups = batches_of(len(reqs), batch)
    inputs = []
    for b in groups:
        device = reqs[b[0]][0].device
        offsets = torch.tensor([0, *torch.tensor([lengths[i] for i in b]).cumsum(0).tolist()], device=device)
        # one offsets tensor for q, k and v: the same ragged structure, as SDPA requires
        qkv = [
            torch.nested.nested_tensor_from_jagged(
                torch.cat([reqs[i][j].transpose(0, 1) for i in b]), offsets
            ).transpose(1, 2)
            for j in range(3)
        ]  # [b, heads, j, head_dim]
        inputs.append(qkv)

    def run() -> list[Any]:
        return [F.scaled_dot_product_attention(q, k, v, is_causal=True) for q, k, v in inputs]

    def split(outs: list[Any]) -> list[Tensor]:
        return [t.transpose(0, 1) for o in outs for t in o.transpose(1, 2).unbind()]

    return Prepared(run, split, len(groups))


def prepare_flex(reqs: list[QKV], lengths: tuple[int, ...], batch: int) -> Prepared:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    device = reqs[0][0].device
    compiled = torch.compile(flex_attention, dynamic=False if device.type == "cpu" else None)
    groups = batches_of(len(reqs), batch)
    inputs = []
    for b in groups:
        sizes = torch.tensor([lengths[i] for i in b], device=device)
        doc = torch.repeat_interleave(torch.arange(len(b), device=device), sizes)
        total = int(sizes.sum())

        def document_causal(bi: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor, doc: Tensor = doc) -> Tensor:
            return (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx)

        block_mask = create_block_mask(document_causal, None, None, total, total, device=str(device))
        qkv = [torch.cat([reqs[i][j] for i in b], dim=1)[None] for j in range(3)]  # [1, heads, total, head_dim]
        inputs.append((*qkv, block_mask))

    import torch._dynamo.config as dynamo_config

    limit = "recompile_limit" if hasattr(dynamo_config, "recompile_limit") else "cache_size_limit"
    enough = {limit: max(getattr(dynamo_config, limit), len(groups) + 1)}  # one graph per batch shape

    def run() -> list[Any]:
        with dynamo_config.patch(enough):
            return [compiled(q, k, v, block_mask=m) for q, k, v, m in inputs]

    def split(outs: list[Any]) -> list[Tensor]:
        per = []
        for o, b in zip(outs, groups):
            start = 0
            for i in b:
                per.append(o[0, :, start : start + lengths[i]])
                start += lengths[i]
        return per

    return Prepared(run, split, len(groups))


def prepare_per_request(reqs: list[QKV], lengths: tuple[int, ...], batch: int) -> Prepared:
    def run() -> list[Any]:
        return [F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True) for q, k, v in reqs]

    def split(outs: list[Any]) -> list[Tensor]:
        return [o[0] for o in outs]

    return Prepared(run, split, len(reqs))


PREPARE: dict[str, Callable[[list[QKV], tuple[int, ...], int], Prepared]] = {
    "padded_sdpa": prepare_padded,
    "packed_njt_sdpa": prepare_njt,
    "packed_flex": prepare_flex,
    "per_request_sdpa": prepare_per_request,
}
