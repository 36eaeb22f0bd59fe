"""A small decoder-only transformer in plain torch, with the attention core pluggable: the model
`python -m collectors e2e` runs end to end (no downloads, no pretrained weights).

Per layer: x + attn(rmsnorm(x)), then x + mlp(rmsnorm(x)). Attention has q/k/v/o projections
(no bias) over `heads` heads of head_dim = d_model / heads; its core is any
`collectors.variants.Attention` (q, k, v [batch, heads, seq, head_dim] -> same layout), called
inside `record_function(f"attention::{label}")`. The MLP is SiLU-gated (gate, up, down; hidden
4 * d_model). Positions are a learned embedding added to the token embedding; the output is the
final RMSNorm and an untied LM head over VOCAB tokens.

KV cache: one preallocated [batch, heads, max_len, head_dim] pair per layer. `prefill` writes the
prompt's keys and values at positions [0, prompt) and runs the causal core; `decode` writes one
token's at position `pos` and runs the core bound non-causal with q length 1 over positions
[0, pos]: the new token attends to every cached position, so no mask is needed.

Weights come from `seed` alone, drawn in fp32 on the CPU and then cast, so every variant, device
and dtype starts from the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.profiler import record_function

from collectors.variants import Attention

VOCAB = 4096
"""Vocabulary size of the toy model (tokens are random ids below it)."""
MLP_RATIO = 4
RMS_EPS = 1e-6


@dataclass(frozen=True)
class DecoderConfig:
    """Model shape: layers, d_model (model width), heads (head_dim = d_model // heads), max_len
    (positions the embedding and the KV cache hold), vocab."""

    layers: int
    d_model: int
    heads: int
    max_len: int
    vocab: int = VOCAB

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    def as_dict(self) -> dict[str, int]:
        return {**asdict(self), "head_dim": self.head_dim, "mlp_hidden": MLP_RATIO * self.d_model}


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight, computed in fp32 and cast back to x's dtype."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + RMS_EPS)
        return (h * self.weight.float()).to(x.dtype)


@dataclass
class KVCache:
    """Keys and values of every layer: lists of [batch, heads, max_len, head_dim] tensors."""

    k: list[Tensor]
    v: list[Tensor]


@dataclass(frozen=True)
class Core:
    """An attention core and the name it is profiled under (`attention::<label>`)."""

    fn: Attention
    label: str


class SelfAttention(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.heads, self.head_dim = cfg.heads, cfg.head_dim
        self.q = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.k = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.v = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.o = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def _split(self, x: Tensor) -> Tensor:
        b, s, _ = x.shape
        return x.view(b, s, self.heads, self.head_dim).transpose(1, 2)  # [b, heads, s, head_dim]

    def forward(self, x: Tensor, core: Core, cache_k: Tensor, cache_v: Tensor, start: int) -> Tensor:
        """x [batch, s, d_model] at positions [start, start + s): write its k, v into the cache,
        attend over cache positions [0, start + s), return [batch, s, d_model]."""
        b, s, _ = x.shape
        q, k, v = self._split(self.q(x)), self._split(self.k(x)), self._split(self.v(x))
        end = start + s
        cache_k[:, :, start:end] = k
        cache_v[:, :, start:end] = v
        with record_function(f"attention::{core.label}"):
            out = core.fn(q, cache_k[:, :, :end], cache_v[:, :, :end])
        return self.o(out.transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        hidden = MLP_RATIO * cfg.d_model
        self.gate = nn.Linear(cfg.d_model, hidden, bias=False)
        self.up = nn.Linear(cfg.d_model, hidden, bias=False)
        self.down = nn.Linear(hidden, cfg.d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.attn_norm, self.attn = RMSNorm(cfg.d_model), SelfAttention(cfg)
        self.mlp_norm, self.mlp = RMSNorm(cfg.d_model), MLP(cfg)

    def forward(self, x: Tensor, core: Core, cache_k: Tensor, cache_v: Tensor, start: int) -> Tensor:
        x = x + self.attn(self.attn_norm(x), core, cache_k, cache_v, start)
        return x + self.mlp(self.mlp_norm(x))


class Decoder(nn.Module):
    """The toy decoder (module docstring). Call `prefill` once, then `decode` per new token."""

    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)

    def new_cache(self, batch: int) -> KVCache:
        """An empty (zeroed) KV cache for `batch` sequences on the model's device and dtype."""
        p = self.head.weight
        dims = (batch, self.cfg.heads, self.cfg.max_len, self.cfg.head_dim)
        return KVCache([p.new_zeros(dims) for _ in self.blocks], [p.new_zeros(dims) for _ in self.blocks])

    def _run(self, tokens: Tensor, core: Core, cache: KVCache, start: int, all_logits: bool) -> Tensor:
        s = tokens.shape[1]
        positions = torch.arange(start, start + s, device=tokens.device)
        x = self.embed(tokens) + self.pos(positions)
        for i, block in enumerate(self.blocks):
            x = block(x, core, cache.k[i], cache.v[i], start)
        x = self.norm(x if all_logits else x[:, -1:])
        return self.head(x)

    def prefill(self, tokens: Tensor, core: Core, cache: KVCache, all_logits: bool = False) -> Tensor:
        """Run the prompt tokens [batch, prompt] with a causal core; fill cache positions
        [0, prompt). Logits [batch, 1, vocab] of the last position ([batch, prompt, vocab] with
        all_logits)."""
        return self._run(tokens, core, cache, 0, all_logits)

    def decode(self, tokens: Tensor, core: Core, cache: KVCache, pos: int) -> Tensor:
        """Run one new token per sequence (tokens [batch, 1]) at position `pos` with a core bound
        non-causal for q length 1; logits [batch, 1, vocab]."""
        return self._run(tokens, core, cache, pos, False)


def build(cfg: DecoderConfig, seed: int, device: torch.device, dtype: torch.dtype) -> Decoder:
    """The decoder with weights drawn from `seed` in fp32 on the CPU (same values everywhere):
    linear and embedding weights ~ N(0, 1/fan_in) (embeddings N(0, 1/d_model)), norms at 1."""
    gen = torch.Generator().manual_seed(seed)
    model = Decoder(cfg)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                fan_in = param.shape[-1]
                param.copy_(torch.randn(param.shape, generator=gen) / math.sqrt(fan_in))
    return model.to(device=device, dtype=dtype).eval()
