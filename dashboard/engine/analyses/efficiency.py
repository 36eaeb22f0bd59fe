"""How close attention runs to the hardware: the work of each attention op from its recorded
shapes, its device time, achieved TFLOP/s and TB/s, and the share of the roofline limit.

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

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import polars as pl

from dashboard.engine.analyses.backends import detect_backends
from dashboard.engine.model.columns import series
from dashboard.engine.load.devices import accelerator, gpu_vendor
from dashboard.engine.model.trace import GPU_CATEGORIES, Trace, names_in, per_trace
from dashboard.engine.rules.names import parse
from dashboard.engine.rules.peaks import DeviceMatch, DevicePeak, device_properties, match_device, with_override
from dashboard.engine.rules import call_part, is_kv_cache_write

TOP_LEFT, BOTTOM_RIGHT = "top-left", "bottom-right"
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


# The schemas are PyTorch's native_functions.yaml (2.x) and FlashAttention 2's flash_api.cpp /
# flash_attn_interface.py custom ops (the kernels hub registers the latter under _flash_attn_<hash>::).
OP_READERS: tuple[OpReader, ...] = (
    OpReader(r"^aten::scaled_dot_product_attention$", "BHSD", 0, causal=5, mask=3),
    OpReader(r"^aten::_scaled_dot_product_flash_attention$", "BHSD", 0, causal=4, lse=True),
    OpReader(r"^aten::_scaled_dot_product_flash_attention_for_cpu$", "BHSD", 0, causal=4, lse=True, mask=5),
    OpReader(r"^aten::_scaled_dot_product_efficient_attention$", "BHSD", 0, causal=6, lse=4, mask=3),
    OpReader(r"^aten::_scaled_dot_product_cudnn_attention$", "BHSD", 0, causal=6, lse=4, mask=3),
    OpReader(r"^aten::_scaled_dot_product_attention_math(_for_mps)?$", "BHSD", 0, causal=5, mask=3),
    OpReader(
        r"^aten::_flash_attention_forward$", "BSHD", 0, causal=8, lse=True, cu_q=3, max_q=5, max_k=6, window=(11, 12)
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
    ),
    OpReader(r"^aten::_scaled_dot_product_flash_attention_backward$", "BHSD", 1, causal=11, backward=True),
    OpReader(r"^aten::_scaled_dot_product_flash_attention_for_cpu_backward$", "BHSD", 1, causal=7, backward=True),
    OpReader(r"^aten::_scaled_dot_product_efficient_attention_backward$", "BHSD", 1, causal=11, mask=4, backward=True),
    OpReader(r"^aten::_scaled_dot_product_cudnn_attention_backward$", "BHSD", 1, causal=14, mask=8, backward=True),
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
    ),
    OpReader(
        r"^flash_attn(_3)?::_flash_attn_forward$", "BSHD", 0, causal=5, align=BOTTOM_RIGHT, lse=True, window=(6, 7)
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
    ),
    OpReader(
        r"^flash_attn(_3)?::_flash_attn_backward$",
        "BSHD",
        1,
        causal=11,
        align=BOTTOM_RIGHT,
        window=(12, 13),
        backward=True,
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
    ),
    OpReader(r"^_flash_attn\w*::fwd$", "BSHD", 0, causal=7, align=BOTTOM_RIGHT, lse=True, window=(8, 9)),
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
    ),
    OpReader(r"^_flash_attn\w*::bwd$", "BSHD", 1, causal=12, align=BOTTOM_RIGHT, window=(13, 14), backward=True),
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
    ),
    # SageAttention in ROCm aiter (aiter/ops/triton/attention/fav3_sage.py): _FAv3SageWrapperFunc is an
    # autograd.Function, whose apply the profiler records under the class's name with its arguments (the
    # tensors' shapes, and the scalars it can type: a None or a tuple may be left out). q, k, v are
    # [batch, seq, heads, dim] (layout "bshd", the wrapper's default); causal follows q, k, v directly in
    # older versions (index 3) and after softmax_scale in newer ones (index 4, or 3 where the profiler
    # left a None softmax_scale out). It quantizes Q, K and V and runs sage_fwd on them: FLOPs are the
    # attention's, whatever precision its products run in.
    OpReader(r"^_FAv3SageWrapperFunc$", "BSHD", 0, causal=(3, 4)),
    # Serving frameworks' attention-layer ops (see OpReader.serving): vLLM's
    # unified_attention(query, key, value, layer_name) and unified_attention_with_output(query, key,
    # value, output, layer_name, ...) take [tokens, heads, head_dim] (vllm/attention/layer.py views
    # them so); SGLang's unified_attention_with_output(query, key, value, output, save_kv_cache,
    # layer_id, ...) takes the query as [tokens, heads * head_dim] and key, value as [tokens, heads, dim].
    OpReader(r"^vllm::unified_attention(_with_output)?$", "TND", 0, causal=None, serving=True),
    OpReader(r"^sglang::unified_attention_with_output(_and_lse)?$", "TND", 0, causal=None, serving=True),
)
_READERS = tuple((re.compile(r.pattern), r) for r in OP_READERS)

# Kernels that carry is_causal as a template argument (FlashAttention 2 and PyTorch's copy of it):
# function name -> position of Is_causal among the template arguments.
KERNEL_CAUSAL_ARG: tuple[tuple[str, int], ...] = (
    (r"(^|::)flash_fwd_kernel$", 2),
    (r"(^|::)flash_fwd_splitkv_kernel$", 1),
    (r"(^|::)flash_bwd_dq_dk_dv_loop(_seqk_parallel)?_kernel$", 2),
)


# vLLM's and SGLang's profiler step annotation, e.g. execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk55086sqsq32sqsk55086):
# per phase (context = prefill, generation = decode), the number of requests and, over them, the sums
# of new query tokens nq (sq), of keys nkv (sk), of nq^2 (sqsq) and of nq*nkv (sqsk).
STEP_ANNOTATION = re.compile(
    r"_context_(\d+)\(sq(\d+)sk(\d+)sqsq(\d+)sqsk(\d+)\)_generation_(\d+)\(sq(\d+)sk(\d+)sqsq(\d+)sqsk(\d+)\)"
)
# vLLM's older form of it, e.g. execute_context_1(888_788544)_generation_0(0): per phase the number of
# requests, then the sum of new query tokens nq and, after an underscore, the sum of nq^2 (the
# generation phase may give the tokens alone). It gives no key count: a context request is one that has
# produced no token yet, taken here as a fresh prefill whose keys are its own query tokens (nkv = nq); a
# generation request's keys are its whole context, which it does not give.
OLDER_STEP_ANNOTATION = re.compile(r"_context_(\d+)\((\d+)_(\d+)\)_generation_(\d+)\((\d+)(?:_(\d+))?\)")
STEP_ANNOTATIONS = (STEP_ANNOTATION, OLDER_STEP_ANNOTATION)


@dataclass(frozen=True)
class ServingBatch:
    """One serving step's requests, from its step annotation (STEP_ANNOTATIONS), both phases summed:
    requests, sq (query tokens), sk (keys over the requests), sqsq (sum of nq^2), sqsk (sum of nq*nkv);
    older: read from vLLM's older annotation (keys = query tokens, see OLDER_STEP_ANNOTATION)."""

    requests: int
    sq: int
    sk: int
    sqsq: int
    sqsk: int
    older: bool = False

    @property
    def pairs(self) -> int:
        """Score pairs of causal decoder attention: a request's i-th new token (0-based) sees
        nkv - nq + i + 1 keys, nq*nkv - nq*(nq-1)/2 pairs per request, so sqsk - (sqsq - sq)/2."""
        return self.sqsk - (self.sqsq - self.sq) // 2

    @classmethod
    def parse(cls, name: str | None) -> "ServingBatch | None":
        """The batch of a step annotation in either form, or None (no annotation, or one that does not
        give the lengths: read() says why)."""
        found = cls.read(name)
        return found if isinstance(found, ServingBatch) else None

    @classmethod
    def read(cls, name: str | None) -> "ServingBatch | str | None":
        """The batch of a step annotation (STEP_ANNOTATIONS); a reason when the annotation is there
        but does not give every request's lengths; None when the name holds no annotation."""
        match = STEP_ANNOTATION.search(name or "")
        if match is not None:
            n = [int(x) for x in match.groups()]
            found = cls(n[0] + n[5], n[1] + n[6], n[2] + n[7], n[3] + n[8], n[4] + n[9])
            ok = 0 <= found.pairs and found.sq <= found.sk and max(n) < MAX_DIM
            return found if ok else f"step annotation {match.group(0)} does not add up to lengths"
        match = OLDER_STEP_ANNOTATION.search(name or "")
        if match is None:
            return None
        text = match.group(0)
        requests, tokens, squares, gen_requests, gen_tokens = (int(x) for x in match.groups()[:5])
        if gen_requests or gen_tokens:
            return (
                f"vLLM's older step annotation {text} gives no key count for its {gen_requests} generation "
                "requests, whose keys are their whole context"
            )
        # nq >= 1 for each request: tokens <= squares <= tokens^2, and no more requests than tokens
        if max(requests, tokens, squares) >= MAX_DIM or not (requests <= tokens <= squares <= tokens * tokens):
            return f"step annotation {text} does not add up to lengths"
        return cls(requests, tokens, tokens, squares, squares, older=True)


@dataclass(frozen=True)
class AttentionShape:
    """One attention call's problem: batch of equal sequences (sq queries, sk keys), heads and
    head dims, Input type of the query, masking, and what the backend writes."""

    batch: int
    sq: int
    sk: int
    heads_q: int
    heads_kv: int
    head_dim: int
    head_dim_v: int
    dtype: str
    causal: bool
    align: str = TOP_LEFT
    lse: bool = False
    backward: bool = False
    mask_bytes: int = 0
    # a serving step (ServingBatch): sq and sk are the step's query tokens and keys over all its
    # requests, pairs the causal pairs; batch is 1
    pairs: int | None = None
    requests: int | None = None
    older: bool = False  # the step read from vLLM's older annotation (OLDER_STEP_ANNOTATION)

    @property
    def elem_bytes(self) -> int:
        return DTYPES.get(self.dtype, ("", 0))[1]

    @property
    def peak_dtype(self) -> str | None:
        return DTYPES.get(self.dtype, (None, 0))[0]

    def work(self) -> Work:
        if self.pairs is not None:  # a serving step: read Q, each request's K and V once, write O
            flops = 2 * self.heads_q * self.pairs * (self.head_dim + self.head_dim_v)
            moved = self.elem_bytes * (
                self.sq * self.heads_q * (self.head_dim + self.head_dim_v)
                + self.sk * self.heads_kv * (self.head_dim + self.head_dim_v)
            )
            return Work(flops, moved)
        # one sequence's work times the batch: the same sums, without a list of `batch` pairs
        one = attention_work(
            [(self.sq, self.sk)],
            self.heads_q,
            self.heads_kv,
            self.head_dim,
            self.head_dim_v,
            causal=self.causal,
            align=self.align,
            elem_bytes=self.elem_bytes,
            lse=self.lse,
            backward=self.backward,
        )
        return Work(one.flops * self.batch, one.bytes * self.batch + self.mask_bytes)

    def describe(self) -> str:
        dt = DTYPES.get(self.dtype, (self.dtype, 0))[0]
        mask = f"causal ({self.align})" if self.causal else ("masked" if self.mask_bytes else "full")
        heads = f"H={self.heads_q}" if self.heads_q == self.heads_kv else f"Hq={self.heads_q} Hkv={self.heads_kv}"
        dims = f"D={self.head_dim}" if self.head_dim == self.head_dim_v else f"D={self.head_dim} Dv={self.head_dim_v}"
        if self.pairs is not None:
            source = "vLLM's older step annotation: keys = query tokens" if self.older else "step annotation"
            return (
                f"{self.requests} requests: {self.sq} query tokens over {self.sk} keys, {self.pairs} causal pairs "
                f"({source}) {heads} {dims} {dt}"
            )
        return f"B={self.batch} {heads} Sq={self.sq} Sk={self.sk} {dims} {dt} {mask}"


def reader_for(name: str) -> OpReader | None:
    """The OP_READERS row of an op name, or None."""
    return next((r for rx, r in _READERS if rx.search(name)), None)


def _bool(text: Any) -> bool | None:
    return {"True": True, "False": False, "1": True, "0": False}.get(text) if isinstance(text, str) else None


def _int(text: Any) -> int | None:
    try:
        return int(text) if isinstance(text, str) and text else None
    except ValueError:
        return None


def _nth(items: list[Any] | None, index: int | None) -> Any:
    return items[index] if items is not None and index is not None and index < len(items) else None


# A recorded tensor dimension is an int64 in torch, but no attention call has one this large; larger
# ones are not shapes, and their work would not fit the int64 flops and bytes columns.
MAX_DIM = 1 << 40
INT64_MAX = (1 << 63) - 1


def _list(text: str | None) -> list[Any] | None:
    """Raw JSON text of an args field -> the list it holds, or None (absent, not a list, nested
    deeper than the json module recurses)."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, list) else None


def _sizes(value: Any) -> list[int] | None:
    """A tensor's recorded dims (a list of ints, 0 <= size < MAX_DIM), or None when it is not one."""
    if isinstance(value, list) and all(type(x) is int and 0 <= x < MAX_DIM for x in value):
        return value
    return None


def read_shape(
    name: str,
    dims_json: str | None,
    types_json: str | None,
    concrete_json: str | None = None,
    causal_hint: bool | None = None,
    step: ServingBatch | str | None = None,
) -> AttentionShape | str:
    """The AttentionShape of one op from its Input Dims / Input type / Concrete Inputs (raw JSON
    text), or a reason string when they do not determine it. causal_hint: is_causal learnt
    elsewhere (the kernel's template arguments, the collectors' metadata), used when Concrete
    Inputs are not at hand. step: the serving step around the op (ServingBatch, or why its
    annotation does not give the lengths), for the serving readers."""
    reader = reader_for(name)
    if reader is None:
        return f"{name}: no shape reader for this op"
    if not dims_json:
        return f"{name}: shapes not recorded (profile with record_shapes=True)"
    dims, types, concrete = _list(dims_json), _list(types_json) or [], _list(concrete_json)
    if dims is None:
        return f"{name}: Input Dims is not a list of shapes"
    q, k, v = (_sizes(_nth(dims, reader.q + i)) for i in range(3))
    if not (q and k and v):
        return f"{name}: query, key or value shape missing"
    dtype = _nth(types, reader.q)
    if not isinstance(dtype, str) or dtype not in DTYPES:
        return f"{name}: unknown input type {dtype!r}"
    if reader.serving:
        return _serving_shape(name, q, k, v, dtype, step)
    mask_dims, mask_type = _sizes(_nth(dims, reader.mask)), _nth(types, reader.mask)
    mask_bytes = (
        math.prod(mask_dims) * DTYPES.get(mask_type if isinstance(mask_type, str) else "", ("", 1))[1]
        if mask_dims
        else 0
    )
    causal, align = _causal(reader, concrete, causal_hint)
    if mask_bytes:
        causal = False
    elif causal is None:
        return f"{name}: is_causal not recorded (no Concrete Inputs, and no kernel or collector tells)"
    left, right = (_int(_nth(concrete, i)) for i in (reader.window or (None, None)))
    # -1 (or absent) is an unbounded side; FlashAttention turns causal into right == 0 itself
    if (left is not None and left >= 0) or (right is not None and right >= 0 and not (causal and right == 0)):
        return f"{name}: sliding-window attention (window {left}, {right}): pair count not implemented"
    lse = reader.lse if isinstance(reader.lse, bool) else bool(_bool(_nth(concrete, reader.lse)))
    geometry = _geometry(reader, name, dims, q, k, v, concrete)
    if isinstance(geometry, str):
        return geometry
    batch, sq, sk, hq, hkv, d, dv = geometry
    shape = AttentionShape(
        batch, sq, sk, hq, hkv, d, dv, dtype, causal, align, lse and not reader.backward, reader.backward, mask_bytes
    )
    work = shape.work()
    if work.flops > INT64_MAX or work.bytes > INT64_MAX:
        return f"{name}: shapes {q}, {k}, {v} give more work than an int64 counts: not a real call"
    return shape


def _serving_shape(
    name: str, q: list[int], k: list[int], v: list[int], dtype: str, step: ServingBatch | str | None
) -> AttentionShape | str:
    """A serving op's shape (OpReader.serving): heads and head dims from [tokens, heads, head_dim]
    key and value (the query [tokens, heads, head_dim] or [tokens, heads * head_dim]); query tokens,
    keys and pairs from the step annotation."""
    if len(k) != 3 or len(v) != 3 or len(q) not in (2, 3):
        return f"{name}: expected [tokens, heads, head_dim] key and value, got {k} and {v}"
    d, dv, hkv = k[2], v[2], k[1]
    if len(q) == 3:
        hq, dq = q[1], q[2]
    else:
        hq, dq = (q[1] // d if d and q[1] % d == 0 else 0), d
    if not (hq and hkv and d and dv) or dq != d or hq % hkv:
        return f"{name}: query {q}, key {k}, value {v} do not read as [tokens, heads, head_dim]"
    tokens = q[0]
    where = (
        f"{name}: {tokens} query tokens, Hq={hq} Hkv={hkv} D={d} read as [tokens, heads, head_dim]; how many keys "
        "each query sees lives in the framework's KV cache, not in the op's inputs"
    )
    if step is None:
        return (
            where + ", and no step annotation (execute_..._context_N(sq..sk..sqsq..sqsk..)_generation_N(...), or "
            "vLLM's older execute_context_N(tokens_squares)_generation_N(...)) gives it"
        )
    if isinstance(step, str):
        return where + ", and the " + step
    if step.sq > tokens:
        return where + f", and the step annotation's {step.sq} query tokens are more than the op's {tokens}"
    return AttentionShape(
        1,
        step.sq,
        step.sk,
        hq,
        hkv,
        d,
        dv,
        dtype,
        True,
        BOTTOM_RIGHT,
        pairs=step.pairs,
        requests=step.requests,
        older=step.older,
    )


def _causal(reader: OpReader, concrete: list[str] | None, hint: bool | None) -> tuple[bool | None, str]:
    """(is_causal, alignment) from Concrete Inputs, else the hint."""
    if reader.mask_type is not None:
        kind = _int(_nth(concrete, reader.mask_type))
        if kind is not None:
            return kind in (1, 2), BOTTOM_RIGHT if kind == 2 else TOP_LEFT
        return hint, TOP_LEFT
    indices = reader.causal if isinstance(reader.causal, tuple) else (reader.causal,)
    flag = next((f for i in indices if (f := _bool(_nth(concrete, i))) is not None), None)
    return (flag if flag is not None else hint), reader.align


def _geometry(
    reader: OpReader, name: str, dims: list, q: list, k: list, v: list, concrete: list[str] | None
) -> tuple[int, int, int, int, int, int, int] | str:
    """(batch, sq, sk, heads_q, heads_kv, head_dim, head_dim_v) from the tensors' dims."""
    cu = _sizes(_nth(dims, reader.cu_q))
    if cu:
        if len(q) != 3 or len(k) != 3 or len(v) != 3:
            return f"{name}: paged or packed KV cache (key dims {k}): per-sequence lengths are not in the trace"
        batch, total_q, total_k = cu[0] - 1, q[0], k[0]
        if batch < 1:
            return f"{name}: varlen batch with cumulative lengths of dims {cu}: no sequence"
        max_q, max_k = _int(_nth(concrete, reader.max_q)), _int(_nth(concrete, reader.max_k))
        if batch == 1:
            sq, sk = total_q, total_k
        elif max_q and max_k and total_q == batch * max_q and total_k == batch * max_k:
            sq, sk = max_q, max_k
        else:
            return (
                f"{name}: varlen batch of {batch} sequences ({total_q} query, {total_k} key tokens): "
                "per-sequence lengths are not in the trace, only the total and the maximum"
            )
        return batch, sq, sk, q[1], k[1], q[2], v[2]
    if reader.layout == "BSHD":
        if len(q) != 4 or len(k) != 4 or len(v) != 4:
            return f"{name}: expected [batch, seq, heads, dim] tensors, got {q} and {k}"
        return q[0], q[1], k[1], q[2], k[2], q[3], v[3]
    if len(q) < 2 or len(k) < 2:
        return f"{name}: expected [..., seq, dim] tensors, got {q} and {k}"
    heads_q = q[-3] if len(q) >= 3 else 1
    heads_kv = k[-3] if len(k) >= 3 else 1
    return math.prod(q[:-3]), q[-2], k[-2], heads_q, heads_kv, q[-1], v[-1]


def kernel_causal(kernel: str | None) -> bool | None:
    """is_causal from a FlashAttention kernel's template arguments (KERNEL_CAUSAL_ARG), or None."""
    if not kernel:
        return None
    parsed = parse(kernel)
    for pattern, index in KERNEL_CAUSAL_ARG:
        if re.search(pattern, parsed.qualname) and index < len(parsed.template_args):
            return {"true": True, "false": False}.get(parsed.template_args[index].strip())
    return None


# --- the trace: attention calls, their device work, the roofline -------------------------------

# Raw JSON text of args "Concrete Inputs", when the loader keeps it (is_causal and the maximum
# varlen lengths live there); without it is_causal comes from kernel names or the collectors.
CONCRETE_COLUMN = "concrete_inputs"
# Backends of detect_backends whose evidence is not an attention op or kernel of its own.
NOT_ATTENTION = ("eager", "inductor")
NOT_FUSED = ("math",) + NOT_ATTENTION

CALL_SCHEMA: dict[str, pl.DataType] = {
    "call": pl.Int64,
    "op": pl.String,
    "called": pl.String,
    "kernel": pl.String,
    "backend": pl.String,
    "device": pl.Int64,
    "time_ns": pl.Int64,
    "kernels": pl.Int64,
    "other_ns": pl.Int64,
    "others": pl.Int64,
    "pass": pl.String,
    "shape": pl.String,
    "dtype": pl.String,
    "flops": pl.Int64,
    "bytes": pl.Int64,
    "reason": pl.String,
}
EFFICIENCY_SCHEMA: dict[str, pl.DataType] = {
    "op": pl.String,
    "called": pl.String,
    "kernel": pl.String,
    "backend": pl.String,
    "pass": pl.String,
    "shape": pl.String,
    "dtype": pl.String,
    "device": pl.String,
    "count": pl.Int64,
    "kernels_per_call": pl.Float64,
    "mean_us": pl.Float64,
    "total_us": pl.Float64,
    "other_us": pl.Float64,
    "flops": pl.Int64,
    "bytes": pl.Int64,
    "tflops": pl.Float64,
    "tbps": pl.Float64,
    "intensity": pl.Float64,
    "peak_tflops": pl.Float64,
    "peak_tbps": pl.Float64,
    "roofline_tflops": pl.Float64,
    "pct_of_roofline": pl.Float64,
    "bound": pl.String,
    "reason": pl.String,
}


def nearest_marked(parent: np.ndarray, start: np.ndarray, marked: np.ndarray) -> np.ndarray:
    """For each start id (-1 = none), the first id at or above it along `parent` links whose
    `marked` is true, or -1. All ids climb together, one nesting level per pass."""
    result = np.full(len(start), -1, dtype=np.int64)
    node = start.astype(np.int64).copy()
    while (node >= 0).any():
        safe = np.maximum(node, 0)
        hit = (node >= 0) & marked[safe]
        result[hit] = node[hit]
        node = np.where((node >= 0) & ~hit, parent[safe], -1)
    return result


def _attention_names(trace: Trace) -> tuple[dict[str, str], set[str], set[str]]:
    """(name -> backend, attention op names, fused attention kernel names) from detect_backends'
    evidence and OP_READERS (a reader's op is attention whatever the classifier says)."""
    evidence = detect_backends(trace).evidence
    backend = {n: b for b, names in evidence.items() if b not in NOT_ATTENTION for n in names}
    ops = {n for n in names_in(trace, "cpu_op") if n in backend or reader_for(n) is not None}
    kernels = {n for n in names_in(trace, "kernel") if backend.get(n) not in (None,) + NOT_FUSED}
    return backend, ops, kernels


@per_trace
def attention_calls(trace: Trace) -> pl.DataFrame:
    """One row per attention call: the innermost attention op of a nest such as
    scaled_dot_product_attention > _scaled_dot_product_flash_attention > _flash_attention_forward,
    and, for attention kernels that no such op launched, one per kernel with the kernels that are a
    part of its call (rules.CALL_PARTS: SageAttention's quantization before it, a split-KV merge after
    it). Columns (CALL_SCHEMA): call (event id of the op; of the main kernel for a call without op),
    op, called (outermost attention op), kernel (the call's longest attention kernel, else its longest
    device event), backend, device, time_ns (the call's attention device time: the durations of its
    attention kernels, or, for a call that launched none (the math path's bmm and softmax), of its
    device events but KV-cache writes; on a CPU-only trace the op's own span), kernels (the device
    events time_ns sums), other_ns and others (the time and number of the call's other device events:
    a KV-cache write, a fill of the output, a copy; attention_others lists them), pass, shape, dtype,
    flops, bytes (per call; null with a reason when the shapes do not say)."""
    found = _attention_work(trace)
    if found is None:
        return pl.DataFrame(schema=CALL_SCHEMA)
    work, call_ids, outer, backend = found
    calls = _call_rows(trace, call_ids, outer, work, backend)
    orphans = _orphan_rows(trace, work, backend, lone_steps=not calls.height)
    return pl.concat([calls, orphans]).select(list(CALL_SCHEMA))


@per_trace
def _attention_work(trace: Trace) -> tuple[pl.DataFrame, np.ndarray, dict[int, int], dict[str, str]] | None:
    """(device work with its owning call (_device_work), ids of the attention calls, call -> the
    attention op around it (-1: none), name -> backend), or None when the trace shows no attention."""
    ev = trace.events
    backend, op_names, kernel_names = _attention_names(trace)
    if not op_names and not kernel_names:
        return None
    parent = ev["parent"].fill_null(-1).to_numpy()
    names = ev["name"].cast(pl.String)
    is_att = ((ev["cat"] == "cpu_op") & names.is_in(list(op_names))).to_numpy()
    att_ids = np.flatnonzero(is_att)
    above = nearest_marked(parent, parent[att_ids], is_att)
    is_call = is_att.copy()
    is_call[above[above >= 0]] = False
    outer = dict(zip(att_ids.tolist(), above.tolist()))
    work = _device_work(trace, parent, is_call, kernel_names)
    return work, np.flatnonzero(is_call), outer, backend


def attention_device_ns(trace: Trace) -> int:
    """The device time of the trace's attention (ns): every fused attention kernel (the 'fused
    attention' family: BACKEND_TABLE's fused rows, whatever op, graph or nothing launched it), and the
    device events of an attention op that launched no such kernel (the math path's bmm and softmax)
    but KV-cache writes; each counted once. Not counted: what an attention op launches beside its
    attention kernels (a KV-cache write, a fill of the output: attention_others). On a CPU-only trace,
    the spans of the attention calls. Not counted either: hand-written attention (detect_backends'
    eager and inductor evidence), whose matmuls a name does not tell from the model's other matmuls."""
    found = _attention_work(trace)
    if found is None:
        return 0
    if not trace.has_gpu:
        return int(attention_calls(trace)["time_ns"].fill_null(0).sum())
    work = found[0]
    return int(work.filter(pl.col("counted"))["dur_ns"].fill_null(0).sum())


OTHERS_SCHEMA: dict[str, pl.DataType] = {
    "op": pl.String,
    "name": pl.String,
    "count": pl.Int64,
    "calls": pl.Int64,
    "total_us": pl.Float64,
}


def attention_others(trace: Trace) -> pl.DataFrame:
    """The device work attention ops launched beside their attention kernels, which their attention
    time leaves out (OTHERS_SCHEMA): op (the call's op), name (the device event's), count, calls (how
    many calls launched it), total_us (its device time in all); longest first. vLLM's KV-cache write
    reshape_and_cache_flash under unified_attention, a FillFunctor zeroing the output before
    AOTriton's attn_fwd, a copy making an input contiguous."""
    found = _attention_work(trace)
    if found is None or not trace.has_gpu:
        return pl.DataFrame(schema=OTHERS_SCHEMA)
    other = found[0].filter((pl.col("owner") >= 0) & ~pl.col("counted"))
    if other.height == 0:
        return pl.DataFrame(schema=OTHERS_SCHEMA)
    ops = trace.events["name"].cast(pl.String).gather(other["owner"])
    return (
        other.with_columns(ops.alias("op"))
        .group_by("op", "name", maintain_order=True)
        .agg(
            pl.len().cast(pl.Int64).alias("count"),
            pl.col("owner").n_unique().cast(pl.Int64).alias("calls"),
            (pl.col("dur_ns").fill_null(0).sum() / 1e3).alias("total_us"),
        )
        .sort("total_us", descending=True, maintain_order=True)
        .select(list(OTHERS_SCHEMA))
    )


def _device_work(trace: Trace, parent: np.ndarray, is_call: np.ndarray, kernel_names: set[str]) -> pl.DataFrame:
    """Device events with the call that launched them: id, name, device, stream, ts_ns, dur_ns, launch,
    owner (the attention op's call id, or -1), attention (a fused attention kernel), call (the
    attention call the event is part of: the owner; for an attention kernel no op launched, the id of
    its call's main kernel (_lone_calls); null otherwise), counted (the event is attention time: see
    attention_calls' time_ns)."""
    gpu = (
        trace.events.lazy()
        .filter(pl.col("cat").is_in(GPU_CATEGORIES))
        .select(
            "id",
            pl.col("name").cast(pl.String),
            "device",
            "stream",
            "ts_ns",
            "dur_ns",
            pl.col("launch").fill_null(-1),
        )
        .collect()
    )
    owner = nearest_marked(parent, gpu["launch"].to_numpy(), is_call)
    kv_writes = [n for n in gpu["name"].unique().drop_nulls().to_list() if is_kv_cache_write(n)]
    owned = pl.col("owner") >= 0
    # a call that launched an attention kernel counts its attention kernels; one that launched none
    # (the math path) counts its device events, but a KV-cache write is never attention
    no_kernel = owned & ~pl.col("attention").any().over("owner")
    work = gpu.with_columns(series("owner", owner), pl.col("name").is_in(list(kernel_names)).alias("attention"))
    work = work.with_columns(
        (pl.col("attention") | (no_kernel & ~pl.col("name").is_in(kv_writes))).alias("counted"),
    )
    lone = _lone_calls(work.filter(pl.col("attention") & ~owned))
    return (
        work.join(lone, on="id", how="left", maintain_order="left")
        .with_columns(pl.when(owned).then(pl.col("owner")).otherwise(pl.col("lone_call")).alias("call"))
        .drop("lone_call")
    )


def _lone_calls(lone: pl.DataFrame) -> pl.DataFrame:
    """id -> lone_call for attention kernels that no attention op launched: a kernel that is a part
    of another's call (rules.CALL_PARTS) joins the next (a part before it) or the previous (a part
    after it) other attention kernel on its device and stream; every other kernel is a call of its
    own, its id the call's."""
    names = lone["name"].unique().drop_nulls().to_list()
    parts = {n: before for n in names if (before := call_part(n)) is not None}
    lane = ["device", "stream"]
    main_id = pl.when(pl.col("part").is_null()).then(pl.col("id"))
    return (
        lone.sort("ts_ns", "id")
        .with_columns(pl.col("name").replace_strict(parts, default=None, return_dtype=pl.Boolean).alias("part"))
        .with_columns(
            main_id.backward_fill().over(lane).alias("next_main"),
            main_id.forward_fill().over(lane).alias("prev_main"),
        )
        .select(
            "id",
            pl.when(pl.col("part").is_null())
            .then(pl.col("id"))
            .when(pl.col("part"))
            .then(pl.coalesce("next_main", "id"))
            .otherwise(pl.coalesce("prev_main", "id"))
            .alias("lone_call"),
        )
    )


def _call_rows(
    trace: Trace, call_ids: np.ndarray, outer: dict[int, int], work: pl.DataFrame, backend: dict[str, str]
) -> pl.DataFrame:
    """CALL_SCHEMA rows of the attention op calls (see attention_calls)."""
    counted = pl.col("counted")
    per_call = (
        work.filter(pl.col("owner") >= 0)
        # the longest attention kernel, else the longest counted event; equal times: the first launched
        .sort(["attention", "counted", "dur_ns"], descending=True, maintain_order=True)
        .group_by("owner", maintain_order=True)
        .agg(
            pl.col("name").first().alias("kernel"),
            pl.col("device").first(),
            pl.when(counted.any()).then(pl.col("dur_ns").filter(counted).sum()).alias("time_ns"),
            counted.sum().cast(pl.Int64).alias("kernels"),
            pl.col("dur_ns").filter(~counted).sum().alias("other_ns"),
            (~counted).sum().cast(pl.Int64).alias("others"),
            pl.col("name").filter(pl.col("attention")).first().alias("att_kernel"),
        )
    )
    by_owner = {row["owner"]: row for row in per_call.iter_rows(named=True)}
    ev = trace.events
    columns = ["name", "dur_ns", "input_dims", "input_types"] + (
        [CONCRETE_COLUMN] if CONCRETE_COLUMN in ev.columns else []
    )
    info = ev.select(pl.col("name").cast(pl.String), *columns[1:])
    hint_default = _collector_causal(trace)
    steps = _serving_steps(trace, call_ids, info)
    cache: dict[tuple, AttentionShape | str] = {}
    rows = []
    for call in call_ids.tolist():
        chain = [call]
        while outer.get(chain[-1], -1) >= 0:
            chain.append(outer[chain[-1]])
        found = by_owner.get(call)
        hint = kernel_causal(found["att_kernel"]) if found else None
        shape = _first_shape(info, chain, hint if hint is not None else hint_default, cache, steps.get(call))
        op = info["name"][call]
        if trace.has_gpu:
            time_ns, device, kernel, kernels, other_ns, others = (
                (
                    found["time_ns"],
                    found["device"],
                    found["kernel"],
                    found["kernels"],
                    found["other_ns"],
                    found["others"],
                )
                if found
                else (None, None, None, 0, 0, 0)
            )
        else:
            time_ns, device, kernel, kernels, other_ns, others = info["dur_ns"][call], None, None, 0, 0, 0
        reason = shape if isinstance(shape, str) else None
        if time_ns is None and reason is None:
            reason = (
                f"{op}: its device work is KV-cache writes only, no attention kernel"
                if others
                else f"{op}: no device work found under the op"
            )
        rows.append(
            _row(
                call,
                op,
                info["name"][chain[-1]],
                kernel,
                backend.get(op) or backend.get(kernel or ""),
                device,
                (time_ns, kernels, other_ns, others),
                shape,
                reason,
            )
        )
    return pl.DataFrame(rows, schema=CALL_SCHEMA, orient="row")


def _serving_steps(trace: Trace, call_ids: np.ndarray, info: pl.DataFrame) -> dict[int, ServingBatch | str]:
    """For the calls of serving ops (OpReader.serving), what the step annotation (a user_annotation
    in either form of STEP_ANNOTATIONS) that holds them on their thread reads as (ServingBatch.read:
    the batch, or why it gives no lengths), where there is one."""
    serving = [c for c in call_ids.tolist() if (r := reader_for(info["name"][c])) is not None and r.serving]
    if not serving:
        return {}
    ev = trace.events
    names = info["name"]
    annotated = names.str.contains(STEP_ANNOTATION.pattern) | names.str.contains(OLDER_STEP_ANNOTATION.pattern)
    is_step = ((ev["cat"] == "user_annotation") & annotated.fill_null(False)).to_numpy()
    if not is_step.any():
        return {}
    parent = ev["parent"].fill_null(-1).to_numpy()
    start = np.array(serving, dtype=np.int64)
    held = nearest_marked(parent, parent[start], is_step)
    read = {h: ServingBatch.read(names[h]) for h in set(held.tolist()) if h >= 0}
    return {c: read[h] for c, h in zip(serving, held.tolist()) if h >= 0 and read[h] is not None}


def _first_shape(
    info: pl.DataFrame, chain: list[int], hint: bool | None, cache: dict, step: ServingBatch | str | None = None
) -> AttentionShape | str:
    """The shape read from the innermost op of the chain that yields one; else the innermost's reason."""
    readings = []
    for node in chain:
        row = info.row(node)
        key = (row[0], row[2], row[3], row[4] if len(row) > 4 else None, hint, step)
        if key not in cache:
            cache[key] = read_shape(row[0], row[2], row[3], key[3], hint, step)
        readings.append(cache[key])
        if not isinstance(cache[key], str):
            return cache[key]
    return readings[0]


def _collector_causal(trace: Trace) -> bool | None:
    """The collectors' variants are all causal (collectors/variants.py); a block may say otherwise."""
    if not trace.collector:
        return None
    value = trace.collector.get("causal", True)
    return value if isinstance(value, bool) else None


def _row(
    call: int,
    op: str | None,
    called: str | None,
    kernel: str | None,
    backend: str | None,
    device: int | None,
    timing: tuple[int | None, int, int, int],
    shape: AttentionShape | str,
    reason: str | None,
) -> tuple:
    """A CALL_SCHEMA row; timing: (time_ns, kernels, other_ns, others)."""
    if isinstance(shape, AttentionShape):
        w = shape.work()
        described = (BACKWARD if shape.backward else FORWARD, shape.describe(), shape.dtype, w.flops, w.bytes)
    else:
        described = (None, None, None, None, None)
    return (call, op, called, kernel, backend, device, *timing, *described, reason)


def _orphan_rows(trace: Trace, work: pl.DataFrame, backend: dict[str, str], lone_steps: bool = False) -> pl.DataFrame:
    """CALL_SCHEMA rows of the calls of attention kernels that no attention op launched (one per
    main kernel with its parts, see _lone_calls), with the reason. With lone_steps (the trace has no
    attention op at all), a collectors' trace whose steps each hold exactly one such call, as its runs
    replayed from a CUDA graph do, takes the shape from its own metadata: each step is one attention
    forward of the collector's shape (collector_shape)."""
    lone = work.filter(pl.col("attention") & (pl.col("owner") < 0))
    if lone.height == 0:
        return pl.DataFrame(schema=CALL_SCHEMA)
    main = pl.col("id") == pl.col("call")
    calls = lone.group_by("call", maintain_order=True).agg(
        pl.col("name").filter(main).first().alias("kernel"),
        pl.col("device").filter(main).first(),
        pl.col("dur_ns").sum().alias("time_ns"),
        pl.len().cast(pl.Int64).alias("kernels"),
        pl.col("launch").filter(main).first(),
    )
    shape = _one_per_step_shape(trace, calls["call"]) if lone_steps else None
    if shape is not None:
        rows = [
            _row(k, None, None, name, backend.get(name), device, (dur, n, 0, 0), shape, None)
            for k, name, device, dur, n in calls.select("call", "kernel", "device", "time_ns", "kernels").iter_rows()
        ]
        return pl.DataFrame(rows, schema=CALL_SCHEMA, orient="row")
    reason = (
        pl.when(pl.col("launch") < 0)
        .then(
            pl.lit(
                "kernel without its launch call in the trace (launched before the profiler's CPU window, or replayed from a graph): no op, no shapes"
            )
        )
        .otherwise(
            pl.lit(
                "no shapes: no attention op around the kernel's launch, as in a graph replay or a library that records no op"
            )
        )
    )
    return calls.select(
        "call",
        pl.lit(None, pl.String).alias("op"),
        pl.lit(None, pl.String).alias("called"),
        "kernel",
        pl.col("kernel").replace_strict(backend, default=None, return_dtype=pl.String).alias("backend"),
        "device",
        "time_ns",
        "kernels",
        pl.lit(0, pl.Int64).alias("other_ns"),
        pl.lit(0, pl.Int64).alias("others"),
        *(pl.lit(None, CALL_SCHEMA[c]).alias(c) for c in ("pass", "shape", "dtype", "flops", "bytes")),
        reason.alias("reason"),
    )


def _one_per_step_shape(trace: Trace, kernel_ids: pl.Series) -> AttentionShape | None:
    """The collector's shape when every one of these (calls' main) kernels lies in a step and no step
    holds two."""
    shape = collector_shape(trace)
    if isinstance(shape, str) or kernel_ids.len() == 0:
        return None
    steps = trace.events["step"].gather(kernel_ids)
    return shape if steps.null_count() == 0 and steps.n_unique() == kernel_ids.len() else None


CPU_REASON = "CPU trace: the peaks table holds GPUs only"
LOST_REASON = (
    "the file is cut before its device events, which Kineto writes after the host ops: the CPU spans "
    "left time the launches, not the attention"
)


def device_lost(trace: Trace) -> bool:
    """A trace of an accelerator, cut off before any of its device events was written: its CPU
    spans time the launches, so no rate is read from them (the cut warning says the same)."""
    return (
        trace.cut is not None
        and not trace.cut.events_whole
        and not trace.has_gpu
        and (accelerator(trace.raw_categories) or gpu_vendor(trace.meta)) is not None
    )


def device_matches(
    trace: Trace, devices: Sequence[int | None], peak: DevicePeak | Mapping[str, float] | None = None
) -> dict[int | None, DeviceMatch]:
    """The peak of each device id (None: the CPU of a CPU-only trace), user's peak laid over it."""
    out = {}
    for device in devices:
        if trace.has_gpu and device is not None:
            match = match_device(device_properties(trace.meta, device))
        else:
            match = DeviceMatch(None, None, {}, LOST_REASON if device_lost(trace) else CPU_REASON)
        out[device] = with_override(match, peak)
    return out


def efficiency(trace: Trace, peak: DevicePeak | Mapping[str, float] | None = None) -> pl.DataFrame:
    """Achieved rates of attention, one row per (op, kernel, shape, device) group (EFFICIENCY_SCHEMA):
    count (calls), kernels_per_call (the attention kernels a call's time sums), mean_us / total_us
    (attention device time per call / in all; on a CPU-only trace the op's span), other_us (the device
    time of what the calls launched beside their attention kernels, in all: attention_others), flops / bytes (per call), tflops (TFLOP/s) and tbps (TB/s)
    achieved, intensity (FLOP/byte), peak_tflops (dense peak for the dtype) and peak_tbps,
    roofline_tflops = min(peak_tflops, intensity * peak_tbps), pct_of_roofline (0..100), bound
    ('compute' or 'memory'), reason (why a number is missing). peak: a DevicePeak or a mapping such as
    {"bf16": 989.5, "bandwidth_tbps": 3.35} for a device the table lacks (or to replace its row)."""
    calls = attention_calls(trace)
    if calls.height == 0:
        return pl.DataFrame(schema=EFFICIENCY_SCHEMA)
    keys = ["op", "called", "kernel", "backend", "pass", "shape", "dtype", "device", "flops", "bytes", "reason"]
    groups = calls.group_by(keys, maintain_order=True).agg(
        pl.len().cast(pl.Int64).alias("count"),
        pl.col("kernels").mean().alias("kernels_per_call"),
        pl.col("time_ns").sum().alias("total_ns"),
        pl.col("time_ns").count().alias("timed"),
        (pl.col("other_ns").sum() / 1e3).alias("other_us"),
    )
    if device_lost(trace):  # the op spans left time launches: no rate
        groups = groups.with_columns(
            pl.lit(None, pl.Int64).alias("total_ns"),
            pl.lit(0, pl.UInt32).alias("timed"),
            pl.coalesce("reason", pl.lit(LOST_REASON)).alias("reason"),
        )
    table = _rates(groups, _peak_frame(trace, groups, peak))
    return table.sort("total_us", descending=True, nulls_last=True, maintain_order=True).select(
        list(EFFICIENCY_SCHEMA)
    )  # ties: call order


def _join_null_safe(left: pl.DataFrame, right: pl.DataFrame, on: list[str]) -> pl.DataFrame:
    """A left join where a null key matches a null key (polars' nulls_equal/join_nulls flag
    changed its name across the versions pyproject admits, so the keys are made null-free here)."""
    keys = [f"_key_{name}" for name in on]
    marked = [pl.col(name).cast(pl.String).fill_null("\x00").alias(key) for name, key in zip(on, keys)]
    return (
        left.with_columns(marked)
        .join(right.with_columns(marked).drop(on), on=keys, how="left", maintain_order="left")
        .drop(keys)
    )


def _rates(groups: pl.DataFrame, peaks: pl.DataFrame) -> pl.DataFrame:
    """Add mean_us, total_us, tflops, tbps, intensity, peak and roofline columns, pct_of_roofline and
    bound to rows with flops and bytes (per call), total_ns over `timed` calls, device and dtype;
    `device` becomes the device's name and a missing peak fills `reason`."""
    # no timed call, zero device time, zero bytes or a zero roofline give no rate (null), never NaN or inf
    timed = pl.col("timed") > 0
    per_ns = pl.when(timed).then(pl.col("total_ns") / pl.col("timed"))
    rated = per_ns > 0
    intensity = pl.when(pl.col("bytes") > 0).then(pl.col("flops") / pl.col("bytes"))
    memory_roof = intensity * pl.col("peak_tbps")
    roof = pl.when(pl.col("peak_tflops").is_not_null() & memory_roof.is_not_null()).then(
        pl.min_horizontal("peak_tflops", memory_roof)
    )
    return (
        _join_null_safe(groups, peaks, ["device", "dtype"])
        .with_columns(
            (per_ns / 1e3).alias("mean_us"),
            pl.when(timed).then(pl.col("total_ns") / 1e3).alias("total_us"),
            pl.when(rated).then(pl.col("flops") / per_ns / 1e3).alias("tflops"),
            pl.when(rated).then(pl.col("bytes") / per_ns / 1e3).alias("tbps"),
            intensity.alias("intensity"),
            roof.alias("roofline_tflops"),
            pl.when(roof.is_not_null())
            .then(pl.when(pl.col("peak_tflops") <= memory_roof).then(pl.lit("compute")).otherwise(pl.lit("memory")))
            .alias("bound"),
        )
        .with_columns(
            pl.when(pl.col("roofline_tflops") > 0)
            .then(100 * pl.col("tflops") / pl.col("roofline_tflops"))
            .alias("pct_of_roofline")
        )
        .with_columns(
            pl.coalesce(
                "reason",
                pl.when(pl.col("flops").is_not_null() & pl.col("roofline_tflops").is_null()).then(
                    pl.col("peak_reason")
                ),
            ).alias("reason"),
            pl.col("device_name").alias("device"),
        )
    )


def _peak_frame(trace: Trace, groups: pl.DataFrame, peak: DevicePeak | Mapping[str, float] | None) -> pl.DataFrame:
    """device, dtype -> device_name, peak_tflops, peak_tbps, peak_reason (why there is no roofline)."""
    pairs = groups.select("device", "dtype").unique().rows()
    matches = device_matches(trace, sorted({d for d, _ in pairs}, key=lambda d: (d is None, d or 0)), peak)
    rows = []
    for device, dtype in pairs:
        match = matches[device]
        kind = DTYPES.get(dtype or "", (None, 0))[0]
        tflops = match.peak.tflops(kind) if match.peak and kind else None
        tbps = match.peak.bandwidth_tbps if match.peak else None
        label = (
            match.peak.name
            if match.peak
            else (str(match.device.get("name") or "") or ("cpu" if device is None else f"device {device}"))
        )
        if match.peak is None:
            why = match.reason
        elif tflops is None or tbps is None:
            why = f"{label}: no published dense {kind} peak{' or bandwidth' if tbps is None else ''} in the peaks table: give it"
        else:
            why = None
        rows.append((device, dtype, label, tflops, tbps, why))
    schema = {
        "device": pl.Int64,
        "dtype": pl.String,
        "device_name": pl.String,
        "peak_tflops": pl.Float64,
        "peak_tbps": pl.Float64,
        "peak_reason": pl.String,
    }
    return pl.DataFrame(rows, schema=schema, orient="row")


STEP_SCHEMA: dict[str, pl.DataType] = {
    "variant": pl.String,
    "shape": pl.String,
    "dtype": pl.String,
    "device": pl.String,
    "steps": pl.Int64,
    "mean_us": pl.Float64,
    "flops": pl.Int64,
    "bytes": pl.Int64,
    "tflops": pl.Float64,
    "tbps": pl.Float64,
    "intensity": pl.Float64,
    "peak_tflops": pl.Float64,
    "peak_tbps": pl.Float64,
    "roofline_tflops": pl.Float64,
    "pct_of_roofline": pl.Float64,
    "bound": pl.String,
    "reason": pl.String,
}


def collector_shape(trace: Trace) -> AttentionShape | str:
    """The attention one step of a collectors' trace computes (one causal forward of q, k, v of the
    collector's shape and dtype; no log-sum-exp counted: the naive variants write none), or why not."""
    block = trace.collector
    shape, dtype = block.get("shape"), COLLECTOR_DTYPES.get(block.get("dtype") or "")
    if not block:
        return "no collector metadata: the shape of a step's attention is not known"
    if not isinstance(shape, dict) or dtype is None:
        return f"collector metadata without a usable shape or dtype ({shape!r}, {block.get('dtype')!r})"
    try:
        b, h, n, d = (int(shape[k]) for k in ("batch", "heads", "seq", "head_dim"))
    except (KeyError, TypeError, ValueError, OverflowError):
        return f"collector shape {shape!r} lacks batch, heads, seq or head_dim"
    if not all(0 < x < MAX_DIM for x in (b, h, n, d)):
        return f"collector shape {shape!r} has a size that is not a positive tensor dimension"
    causal = _collector_causal(trace)
    found = AttentionShape(b, n, n, h, h, d, d, dtype, causal if causal is not None else True)
    work = found.work()
    if work.flops > INT64_MAX or work.bytes > INT64_MAX:
        return f"collector shape {shape!r} gives more work than an int64 counts"
    return found


def step_efficiency(trace: Trace, peak: DevicePeak | Mapping[str, float] | None = None) -> pl.DataFrame:
    """The whole variant per step, for collectors' traces (one attention forward per step), naive
    variants included: one row (STEP_SCHEMA) with steps, mean_us (per step: the summed durations of
    the device events launched in the step; on a CPU-only trace the step's attention:: annotation),
    flops and bytes of the collector's shape, and the rates of efficiency()."""
    found = step_groups(trace)
    if found is None:
        return pl.DataFrame(schema=STEP_SCHEMA)
    groups, _ = found
    table = _rates(groups, _peak_frame(trace, groups, peak))
    return table.select(list(STEP_SCHEMA))


def step_groups(trace: Trace) -> tuple[pl.DataFrame, AttentionShape] | None:
    """(the whole step's row before its rates: variant, shape, dtype, device (id), steps, flops,
    bytes (the collector's shape's minimum), total_ns and timed (the steps' device time, see
    step_efficiency), reason; the collector's shape), or None on a trace without one."""
    shape = collector_shape(trace)
    if isinstance(shape, str):
        return None
    ev = trace.events.lazy().filter(pl.col("step").is_not_null())  # lazy: only the columns used are filtered
    if trace.has_gpu:
        work = ev.filter(pl.col("cat").is_in(GPU_CATEGORIES)).select("step", "device", "dur_ns").collect()
        device = (
            work["device"].drop_nulls().mode().sort().first() if work["device"].null_count() < work.height else None
        )
    else:
        work = (
            ev.filter(
                (pl.col("cat") == "user_annotation") & pl.col("name").cast(pl.String).str.starts_with("attention::")
            )
            .select("step", "dur_ns")
            .collect()
        )
        device = None
    per_step = work.group_by("step").agg(pl.col("dur_ns").sum())
    w = shape.work()
    lost = device_lost(trace)  # the attention:: spans left time launches: no rate
    groups = pl.DataFrame(
        {
            "variant": [trace.collector.get("variant")],
            "shape": [shape.describe()],
            "dtype": [shape.dtype],
            "device": [device],
            "steps": [per_step.height],
            "flops": [w.flops],
            "bytes": [w.bytes],
            "total_ns": [per_step["dur_ns"].sum() if per_step.height and not lost else None],
            "timed": [0 if lost else per_step.height],
            "reason": [LOST_REASON if lost else None if per_step.height else "no attention work inside any step"],
        },
        schema_overrides={"device": pl.Int64, "reason": pl.String, "total_ns": pl.Int64, "variant": pl.String},
    )
    return groups, shape


def efficiency_block(trace: Trace, peak: DevicePeak | Mapping[str, float] | None = None) -> dict[str, Any]:
    """The efficiency of attention as plain JSON-ready data for `summary --json`:
    {"device": {name, matched, matched_by, source, reason}, "calls", "measured" (calls with work,
    time and a roofline), "time_us" and "ideal_us" (over measured calls: device time, and the time
    at the roofline), "tflops" (achieved over measured calls), "pct_of_roofline" (100 * ideal / time:
    the gate's number; None when nothing was measured), "attention_device_ns" (the trace's
    attention device time, attention_device_ns()), "measured_device_ns" (the device time of the
    measured calls), "measured_share" (measured_device_ns / attention_device_ns, 0..1; None without
    attention time), "unmeasured_without_shapes" (True when every unmeasured call's time lacks
    shapes, i.e. has no FLOPs, rather than a roofline), "rows" (efficiency() as dicts), "reasons"
    (distinct reasons some rows have no number), "per_step" (step_efficiency() as dicts: the
    whole variant per step on collectors' traces, [] on others), "others" (attention_others() as
    dicts: what the attention ops launched beside their attention kernels, left out of its time),
    "other_device_ns" (their device time)}.

    The headline rests on most of the attention or says it cannot: when the measured calls cover less
    than MIN_COVERAGE of the attention device time, "pct_of_roofline" is None and "coverage_reason"
    says what they cover (it is also the first of "reasons"); "measured_pct_of_roofline" keeps the
    measured calls' own number."""
    table = efficiency(trace, peak)
    measured = table.filter(pl.col("pct_of_roofline").is_not_null())
    time_us = float(measured["total_us"].sum()) if measured.height else 0.0
    attention_ns = attention_device_ns(trace)
    measured_ns = int(round(time_us * 1e3))
    unmeasured = table.filter(pl.col("pct_of_roofline").is_null() & (pl.col("total_us").fill_null(0) > 0))
    ideal_us = (
        float((measured["flops"] * measured["count"] / measured["roofline_tflops"] / 1e6).sum())
        if measured.height
        else 0.0
    )
    flops = float((measured["flops"] * measured["count"]).sum()) if measured.height else 0.0
    device_ids = (
        trace.events.lazy()
        .filter(pl.col("cat") == "kernel")
        .select(pl.col("device").drop_nulls().unique().sort())
        .collect()
        .to_series()
        .to_list()
        if trace.has_gpu
        else []
    )
    match = device_matches(trace, [device_ids[0] if device_ids else None], peak)
    first = next(iter(match.values()))
    pct = 100 * ideal_us / time_us if time_us else None
    share = min(measured_ns / attention_ns, 1.0) if attention_ns else None
    coverage = coverage_reason(share) if pct is not None else None
    reasons = sorted({r for r in table["reason"].to_list() if r})
    others = attention_others(trace)
    return {
        "device": {
            "name": first.device.get("name") if first.device else None,
            "matched": first.peak.name if first.peak else None,
            "matched_by": first.matched_by,
            "source": first.peak.source if first.peak else None,
            "reason": first.reason,
        },
        "calls": int(table["count"].sum()) if table.height else 0,
        "measured": int(measured["count"].sum()) if measured.height else 0,
        "time_us": time_us,
        "ideal_us": ideal_us,
        "tflops": flops / time_us / 1e6 if time_us else None,
        "pct_of_roofline": pct if coverage is None else None,
        "measured_pct_of_roofline": pct,
        "coverage_reason": coverage,
        "attention_device_ns": attention_ns,
        "measured_device_ns": measured_ns,
        "measured_share": share,
        "unmeasured_without_shapes": bool(unmeasured.height) and unmeasured["flops"].null_count() == unmeasured.height,
        "rows": table.to_dicts(),
        "reasons": ([coverage] if coverage else []) + reasons,
        "per_step": step_efficiency(trace, peak).to_dicts(),
        "others": others.to_dicts(),
        "other_device_ns": int(round(float(others["total_us"].sum()) * 1e3)) if others.height else 0,
    }


# The share of the attention device time the measured calls must cover for a trace's % of the roofline.
MIN_COVERAGE = 0.5


def coverage_reason(share: float | None) -> str | None:
    """Why a trace's headline gives no % of the roofline: its measured calls cover less than
    MIN_COVERAGE of the attention device time (share, 0..1); None when they cover enough (or there is
    no attention time to cover)."""
    if share is None or share >= MIN_COVERAGE:
        return None
    percent = f"{100 * share:.0f}%" if share == 0 or share >= 0.01 else "<1%"
    return (
        f"the measured calls cover {percent} of the attention device time, less than {100 * MIN_COVERAGE:.0f}%: "
        "no percentage of the roofline for the trace"
    )
