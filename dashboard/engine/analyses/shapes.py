"""One attention call's problem (AttentionShape) read from what the profiler recorded: an op's Input
Dims, Input types and Concrete Inputs (rules.op_readers.OP_READERS says where each op keeps them), a
FlashAttention kernel's template arguments, a serving step's annotation, the collectors' metadata.
A shape the record does not determine is a reason string, never a guess."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from dashboard.engine.analyses.formulas import (
    BOTTOM_RIGHT,
    COLLECTOR_DTYPES,
    DTYPES,
    INT64_MAX,
    MAX_DIM,
    TOP_LEFT,
    Work,
    attention_work,
)
from dashboard.engine.rules.op_readers import KERNEL_CAUSAL_ARG, OpReader, reader_for
from dashboard.engine.analyses.serving import ServingBatch
from dashboard.engine.model.trace import Trace
from dashboard.engine.rules.names import parse


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


def _bool(text: Any) -> bool | None:
    return {"True": True, "False": False, "1": True, "0": False}.get(text) if isinstance(text, str) else None


def _int(text: Any) -> int | None:
    try:
        return int(text) if isinstance(text, str) and text else None
    except ValueError:
        return None


def _nth(items: list[Any] | None, index: int | None) -> Any:
    return items[index] if items is not None and index is not None and index < len(items) else None


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


def _collector_causal(trace: Trace) -> bool | None:
    """The collectors' variants are all causal (collectors/variants.py); a block may say otherwise."""
    if not trace.collector:
        return None
    value = trace.collector.get("causal", True)
    return value if isinstance(value, bool) else None


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
