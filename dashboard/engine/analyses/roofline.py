"""Where attention sits on the roofline: each variant at the bytes its own kernels move, read from
the shapes the trace records, so that naive attention (which writes and reads the B*H*Sq*Sk scores
matrix five times over) is not drawn at the few bytes a fused kernel needs.

efficiency.py's `bytes` stay the attention's minimum (read Q, K, V once, write O once): the number
its % of the roofline, the gate and `summary` use. This module gives the roofline chart its own
bytes: what the kernels of a call, or of a whole step, read and write in device memory.

Where the bytes come from:
- a GPU kernel: the op whose launch call holds it (the innermost cpu_op around the launch), by the
  op rules below, from its Input Dims, Input types and (for reductions) Concrete Inputs. An op
  that launches more than one kernel has no bytes: how they split its work, and what passes
  between them, is not in the trace.
- a GPU memcpy: its recorded bytes, twice when it copies device to device (read and written in
  device memory), once otherwise; a GPU memset: its recorded bytes, written.
- a fused attention kernel replayed from a CUDA graph (no op, no shapes) whose collectors' trace
  gives the shape of the step's one attention call: that call's bytes (efficiency.attention_calls).
- on a CPU-only trace the ops are the work: each op with a rule counts its bytes; an op whose work
  is done by the ops it calls (aten::matmul, aten::masked_fill, aten::clone, aten::softmax, an
  attention op that computes through aten::bmm...) counts theirs instead.

Op rules (element size from the recorded Input type; an input of dims [] is a scalar passed by
value, 0 bytes):
- gemm (aten::mm, bmm; addmm, baddbmm with their bias): read both operands (and the bias), write
  the [..., m, n] product.
- elementwise (mul, add, where, tril, isneginf, ...): read each tensor operand's own elements
  (before broadcasting), write the broadcast shape at the widest operand type (bool for
  comparisons and isneginf-like tests). A tensor past the op's operands is its out= buffer:
  written, with its own shape.
- in place (masked_fill_, add_, ...): read self and the other operands, write self; copy_ reads the
  source and writes self; fill_ and zero_ only write self.
- softmax (_softmax, _log_softmax): read the input, write its shape (fp32 with half_to_float).
- reductions (all, any, sum, mean, amax, amin, prod): read the input, write it with the reduced dims
  (from Concrete Inputs) removed.
- attention ops (efficiency.OP_READERS): what a fused kernel moves, efficiency's bytes: read Q, K, V
  (and a mask), write O (and the log-sum-exp where it is written).
- views and allocations (kernels.METADATA_OPS) move nothing.
Anything else has no bytes, and says why: an inductor-generated kernel (the trace does not say
which of its buffers it reads and which it writes), a kernel replayed from a CUDA graph, an op
without a rule. A roofline point whose bytes are not all known is left out, with its reason.

Units: bytes; FLOP; µs in `*_us`; TFLOP/s and TB/s as efficiency.py.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from dashboard.engine.analyses.efficiency import (
    DTYPES,
    INT64_MAX,
    LOST_REASON,
    _attention_work,
    _collector_causal,
    _peak_frame,
    _rates,
    attention_calls,
    collector_shape,
    device_lost,
    nearest_marked,
    read_shape,
    reader_for,
    step_groups,
)
from dashboard.engine.analyses.kernels import BOOKKEEPING_OPS, METADATA_OPS
from dashboard.engine.model.trace import GPU_CATEGORIES, Trace, per_trace
from dashboard.engine.rules.peaks import DevicePeak

# Input type as torch.profiler writes it -> bytes per element (efficiency.DTYPES' floats, and the rest).
ELEMENT_BYTES: dict[str, int] = {
    **{name: size for name, (_, size) in DTYPES.items()},
    "bool": 1,
    "unsigned char": 1,
    "signed char": 1,
    "short int": 2,
    "int": 4,
    "long int": 8,
    "c10::complex<float>": 8,
    "c10::complex<double>": 16,
}
GEMM = "gemm"
ELEMENTWISE = "elementwise"
IN_PLACE = "in place"
SOFTMAX = "softmax"
REDUCTION = "reduction"
ATTENTION = "attention"


@dataclass(frozen=True)
class OpRule:
    """How an op moves memory: kind (GEMM, ELEMENTWISE, IN_PLACE, SOFTMAX, REDUCTION); operands:
    how many leading inputs are its tensor operands (a tensor after them is an out= buffer); reads:
    for IN_PLACE, whether it reads self (copy_, fill_ and zero_ do not; copy_ reads its source);
    result: the element type written by ELEMENTWISE ('widest' operand, or 'bool'); bias: for GEMM,
    a leading bias operand (addmm, baddbmm)."""

    kind: str
    operands: int = 1
    reads_self: bool = True
    result: str = "widest"
    bias: bool = False


_UNARY = (
    "neg",
    "exp",
    "exp2",
    "log",
    "log2",
    "abs",
    "relu",
    "sigmoid",
    "tanh",
    "gelu",
    "silu",
    "sqrt",
    "rsqrt",
    "reciprocal",
    "square",
    "erf",
    "sin",
    "cos",
    "floor",
    "ceil",
    "round",
    "sign",
    "tril",
    "triu",
    "clone_",
    "nan_to_num",
)
_BINARY = ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "remainder", "fmod", "bitwise_and", "bitwise_or")
_TESTS = ("isneginf", "isposinf", "isinf", "isnan", "isfinite", "logical_not", "signbit")
_COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor")

# The table of op rules, by op name (aten:: ops; 'name_' is the in-place form).
OP_RULES: dict[str, OpRule] = {
    "aten::mm": OpRule(GEMM, 2),
    "aten::bmm": OpRule(GEMM, 2),
    "aten::addmm": OpRule(GEMM, 3, bias=True),
    "aten::baddbmm": OpRule(GEMM, 3, bias=True),
    **{f"aten::{n}": OpRule(ELEMENTWISE, 1) for n in _UNARY},
    **{f"aten::{n}": OpRule(ELEMENTWISE, 2) for n in _BINARY},
    **{f"aten::{n}": OpRule(ELEMENTWISE, 1, result="bool") for n in _TESTS},
    **{f"aten::{n}": OpRule(ELEMENTWISE, 2, result="bool") for n in _COMPARISONS},
    "aten::where": OpRule(ELEMENTWISE, 3),
    "aten::clamp": OpRule(ELEMENTWISE, 3),
    "aten::lerp": OpRule(ELEMENTWISE, 3),
    **{f"aten::{n}_": OpRule(IN_PLACE, 1) for n in _UNARY if not n.endswith("_")},
    **{f"aten::{n}_": OpRule(IN_PLACE, 2) for n in _BINARY},
    "aten::masked_fill_": OpRule(IN_PLACE, 2),
    "aten::clamp_": OpRule(IN_PLACE, 3),
    "aten::lerp_": OpRule(IN_PLACE, 3),
    "aten::copy_": OpRule(IN_PLACE, 2, reads_self=False),
    "aten::fill_": OpRule(IN_PLACE, 1, reads_self=False),
    "aten::zero_": OpRule(IN_PLACE, 1, reads_self=False),
    "aten::_softmax": OpRule(SOFTMAX),
    "aten::_log_softmax": OpRule(SOFTMAX),
    **{
        f"aten::{n}": OpRule(REDUCTION, result="bool" if n in ("all", "any") else "widest")
        for n in ("all", "any", "sum", "mean", "amax", "amin", "prod")
    },
}
# Ops whose work is done by the ops they call (each counted there), on a CPU-only trace.
COMPOSITE_OPS = re.compile(
    r"^aten::(matmul|masked_fill|clone|softmax|log_softmax|_safe_softmax|to|_to_copy|type_as|ones|zeros|full|"
    r"ones_like|zeros_like|full_like|new_ones|new_zeros|new_full|scalar_tensor|linear|einsum|dropout|"
    r"scaled_dot_product_attention)$"
)
INDUCTOR_KERNELS = re.compile(r"^(triton_|graph_\d+_cpp_|cpp_fused_)")
GRAPH_REPLAYS = re.compile(r"^(cudaGraphLaunch|hipGraphLaunch|cuGraphLaunch)")
OWN_BYTES_WORDS = "bytes its own kernels move, from the recorded shapes"  # what a roofline point's bytes are


# --- one op's bytes -----------------------------------------------------------------------------


def element_bytes(type_name: Any) -> int | None:
    """Bytes per element of a recorded Input type ('float' 4, 'c10::BFloat16' 2, 'bool' 1...), or None."""
    return ELEMENT_BYTES.get(type_name) if isinstance(type_name, str) else None


def _load(text: Any) -> list | None:
    if not text:
        return None
    try:
        value = json.loads(str(text))
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, list) else None


def _tensor(dims: list, types: list, i: int) -> tuple[list[int], int] | str | None:
    """Input i as (dims, element bytes); None when it is absent or a scalar (dims []); a reason
    when it is a tensor whose element type is not known."""
    if i >= len(dims) or not isinstance(dims[i], list) or not dims[i]:
        return None
    shape = dims[i]
    if not all(type(x) is int and 0 <= x < (1 << 40) for x in shape):
        return f"input {i} dims {shape} are not a tensor's"
    size = element_bytes(types[i] if i < len(types) else None)
    if size is None:
        return f"input {i} of type {types[i] if i < len(types) else None!r}: element size unknown"
    return shape, size


def _broadcast(shapes: Sequence[list[int]]) -> list[int] | None:
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(rank):
        sizes = {s[len(s) - rank + k] for s in shapes if len(s) - rank + k >= 0} - {1}
        if len(sizes) > 1:
            return None
        out.append(sizes.pop() if sizes else 1)
    return out


def op_bytes(
    name: str, dims_json: Any, types_json: Any, concrete_json: Any = None, causal: bool | None = None
) -> int | str:
    """See _op_bytes; a count past int64 (no real call moves that much) is a reason, not a number."""
    found = _op_bytes(name, dims_json, types_json, concrete_json, causal)
    return (
        f"{name}: its shapes give more bytes than an int64 counts: not a real call"
        if isinstance(found, int) and found > INT64_MAX
        else found
    )


def _op_bytes(
    name: str, dims_json: Any, types_json: Any, concrete_json: Any = None, causal: bool | None = None
) -> int | str:
    """The bytes one call of op `name` reads and writes, from its recorded Input Dims, Input types
    and Concrete Inputs (raw JSON text), by OP_RULES or, for attention ops, efficiency's minimum
    bytes; or the reason it cannot be told. causal: is_causal where known (it does not change the
    bytes, but the attention readers ask for it)."""
    if reader_for(name) is not None:
        shape = read_shape(name, dims_json, types_json, concrete_json, causal if causal is not None else False)
        return shape if isinstance(shape, str) else shape.work().bytes
    if re.search(METADATA_OPS, name):
        return 0
    rule = OP_RULES.get(name)
    if rule is None:
        if INDUCTOR_KERNELS.search(name):
            return f"{name}: a kernel inductor generated; the trace does not say which of its buffers it reads and which it writes"
        return f"{name}: no rule for the bytes this op moves"
    dims, types = _load(dims_json), _load(types_json) or []
    if dims is None:
        return (
            f"{name}: Input Dims is not a list of shapes"
            if dims_json
            else f"{name}: shapes not recorded (profile with record_shapes=True)"
        )
    found = [_tensor(dims, types, i) for i in range(len(dims))]
    bad = next((f for f in found if isinstance(f, str)), None)
    if bad is not None:
        return f"{name}: {bad}"
    operands = [f for f in found[: rule.operands] if f is not None]
    outs = [f for f in found[rule.operands :] if f is not None]
    count = lambda t: math.prod(t[0]) * t[1]
    if rule.kind == GEMM:
        a, b = (found[1], found[2]) if rule.bias else (found[0], found[1])
        if a is None or b is None or len(a[0]) < 2 or len(b[0]) < 2 or a[0][-1] != b[0][-2]:
            return f"{name}: operands {dims[: rule.operands]} are not a matrix product's"
        written = count(outs[0]) if outs else math.prod(a[0][:-1]) * b[0][-1] * a[1]
        return sum(count(t) for t in operands) + written
    if not dims or (found[0] is None and dims[0] != []):
        return f"{name}: its first input is not a tensor ({dims[:1]})"
    if rule.kind == IN_PLACE:  # a 0-dim self (a scalar tensor) counts 0 bytes, as every 0-dim input
        read = found[: rule.operands] if rule.reads_self else found[1 : rule.operands]
        return sum(count(t) for t in read if t is not None) + (count(found[0]) if found[0] is not None else 0)
    if rule.kind in (SOFTMAX, REDUCTION) and found[0] is None:
        return 0
    if rule.kind == SOFTMAX:
        concrete = _load(concrete_json) or []
        half_to_float = len(concrete) > 2 and concrete[2] == "True"
        return count(found[0]) + math.prod(found[0][0]) * (4 if half_to_float else found[0][1])
    if rule.kind == REDUCTION:
        shape, size = found[0]
        reduced = _reduced_dims(_load(concrete_json), len(dims), len(shape))
        if isinstance(reduced, str):
            return f"{name}: {reduced}"
        kept = math.prod(s for k, s in enumerate(shape) if k not in reduced)
        return count(found[0]) + kept * (1 if rule.result == "bool" else size)
    # elementwise
    if not operands:  # every operand a scalar: a 0-dim result
        return 0
    if outs:
        written = count(outs[0])
    else:
        shape = _broadcast([t[0] for t in operands])
        if shape is None:
            return f"{name}: operand shapes {[t[0] for t in operands]} do not broadcast"
        size = 1 if rule.result == "bool" else _widest(dims, types, rule.operands)
        written = math.prod(shape) * size
    return sum(count(t) for t in operands) + written


def _widest(dims: list, types: list, operands: int) -> int:
    """The element size of an elementwise result: the widest non-bool tensor operand's; where every
    operand with dims is bool (aten::where(mask, 0-dim float, 0-dim float)), the widest 0-dim
    tensor's (a Python number, recorded as 'double' or 'Scalar', does not count); else 1."""
    picked = [i for i in range(min(operands, len(types), len(dims))) if types[i] != "bool" and element_bytes(types[i])]
    shaped = [element_bytes(types[i]) for i in picked if dims[i]]
    scalars = [element_bytes(types[i]) for i in picked if not dims[i] and types[i] != "double"]
    return max(shaped or scalars or [1])


def _reduced_dims(concrete: list | None, inputs: int, rank: int) -> set[int] | str:
    """The dims a reduction removes, from its Concrete Inputs' dim argument (an int or a list; none
    or an empty list: every dim)."""
    if inputs == 1:
        return set(range(rank))
    if concrete is None or len(concrete) < 2:
        return "the reduced dims are not recorded (no Concrete Inputs)"
    text = concrete[1]
    if text in ("", "[]", None):
        return set(range(rank))
    try:
        value = json.loads(text)
    except ValueError:
        return f"reduced dims {text!r} not read"
    picked = value if isinstance(value, list) else [value]
    if not picked or not all(type(k) is int and -rank <= k < rank for k in picked):
        return f"reduced dims {text!r} not read"
    return {k % rank for k in picked}


# --- the trace: each unit of work's bytes --------------------------------------------------------

BYTES_SCHEMA: dict[str, pl.DataType] = {"id": pl.Int64, "step": pl.Int64, "bytes": pl.Int64, "reason": pl.String}


@per_trace
def device_bytes(trace: Trace) -> pl.DataFrame:
    """The bytes of the device events a roofline point sums (BYTES_SCHEMA: id, step, bytes, reason:
    why bytes is null): those the attention calls launched and the fused attention kernels, and on
    a collectors' trace every device event. Empty on a CPU-only trace (see _OpTree)."""
    ev = trace.events
    gpu = ev.filter(pl.col("cat").is_in(GPU_CATEGORIES)).select(
        "id",
        pl.col("cat").cast(pl.String),
        pl.col("name").cast(pl.String),
        "bytes",
        pl.col("launch").fill_null(-1),
        "step",
    )
    # only what a roofline point sums: the attention calls' work, and every step's on a collectors' trace
    work = _attention_work(trace)
    if isinstance(collector_shape(trace), str):
        called = (
            work[0].filter((pl.col("owner") >= 0) | pl.col("attention"))["id"]
            if work is not None
            else pl.Series([], dtype=pl.Int64)
        )
        # a list: polars 1.20 reads an imploded Series as one list per row
        gpu = gpu.filter(pl.col("id").is_in(called.to_list()))
    if gpu.height == 0:
        return pl.DataFrame(schema=BYTES_SCHEMA)
    parent = ev["parent"].fill_null(-1).to_numpy()
    names = ev["name"].cast(pl.String)
    is_op = ((ev["cat"] == "cpu_op") & ~names.str.contains(BOOKKEEPING_OPS).fill_null(False)).to_numpy()
    launch = gpu["launch"].to_numpy()
    start = np.where(launch >= 0, parent[np.maximum(launch, 0)], -1)
    op = nearest_marked(parent, start, is_op)
    kernels_of = {}
    for o, cat in zip(op.tolist(), gpu["cat"].to_list()):
        if cat == "kernel" and o >= 0:
            kernels_of[o] = kernels_of.get(o, 0) + 1
    columns = ["input_dims", "input_types"] + (["concrete_inputs"] if "concrete_inputs" in ev.columns else [])
    info = {c: ev[c].cast(pl.String) for c in columns}
    hint = _collector_causal(trace)
    fused = _fused_kernels(trace)
    cache: dict[tuple, int | str] = {}
    rows = []
    for (ident, cat, name, size, at, step), o in zip(gpu.iter_rows(), op.tolist()):
        moved: int | str
        if ident in fused:
            moved = fused[ident]
        elif cat == "gpu_memcpy":
            twice = "DtoD" in name or "Device -> Device" in name
            moved = size * (2 if twice else 1) if size is not None else f"{name}: its bytes are not in the trace"
        elif cat == "gpu_memset":
            moved = size if size is not None else f"{name}: its bytes are not in the trace"
        elif at < 0:
            moved = f"{name[:80]}: its launch call is not in the trace, so neither is the op that shaped it"
        elif GRAPH_REPLAYS.search(names[at] or ""):
            moved = f"{name[:80]}: replayed from a CUDA graph ({names[at]}): no op records its shapes"
        elif o < 0:
            moved = f"{name[:80]}: no op around its launch records its shapes"
        elif kernels_of.get(o, 0) > 1:
            moved = (
                f"{names[o]} launches {kernels_of[o]} kernels: how its bytes split between them (and what passes "
                "between them) is not in the trace"
            )
        else:
            key = (names[o], *(info[c][o] for c in columns))
            if key not in cache:
                cache[key] = op_bytes(
                    names[o],
                    info["input_dims"][o],
                    info["input_types"][o],
                    info["concrete_inputs"][o] if "concrete_inputs" in info else None,
                    hint,
                )
            moved = cache[key]
        rows.append((ident, step, moved if isinstance(moved, int) else None, moved if isinstance(moved, str) else None))
    return pl.DataFrame(rows, schema=BYTES_SCHEMA, orient="row")


def _fused_kernels(trace: Trace) -> dict[int, int | str]:
    """The fused attention kernels (efficiency's 'attention' device work) whose call efficiency.
    attention_calls has bytes for: kernel id -> the call's bytes (read Q, K, V, write O: what a fused
    kernel moves), or why not when the call has more than one of them (SageAttention's quantization
    kernels and its attention kernel: what passes between them is not in the trace). That covers a
    kernel launched inside an op without a rule of its own (cuDNN's aten::_cudnn_attention_forward
    inside aten::_scaled_dot_product_cudnn_attention) and, on collectors' traces, one replayed from a
    CUDA graph with no op at all (the call is the kernel, shaped by the collector's metadata)."""
    found = _attention_work(trace)
    if found is None:
        return {}
    calls = attention_calls(trace).select("call", pl.coalesce("op", "kernel").alias("op"), "bytes")
    owned = (
        found[0]
        .filter(pl.col("attention") & pl.col("call").is_not_null())
        .select("id", "call")
        .join(calls.filter(pl.col("bytes").is_not_null()), on="call", how="inner")
        .with_columns(pl.len().over("call").alias("fused"))
    )
    out: dict[int, int | str] = {}
    for ident, op, moved, fused in owned.select("id", "op", "bytes", "fused").iter_rows():
        out[ident] = (
            moved
            if fused == 1
            else (
                f"{op} launches {fused} fused attention kernels: how its bytes split between them is not in the trace"
            )
        )
    return out


class _OpTree:
    """The cpu_ops and annotations of a CPU-only trace as a tree, and the bytes of any subtree."""

    def __init__(self, trace: Trace):
        ev = trace.events
        self.names = ev["name"].cast(pl.String)
        self.cats = ev["cat"].cast(pl.String)
        self.info = {
            c: ev[c].cast(pl.String) for c in ("input_dims", "input_types", "concrete_inputs") if c in ev.columns
        }
        tree = ev.filter(pl.col("cat").is_in(["cpu_op", "user_annotation"]) & pl.col("parent").is_not_null())
        self.children: dict[int, list[int]] = {}
        for child, parent in zip(tree["id"].to_list(), tree["parent"].to_list()):
            self.children.setdefault(parent, []).append(child)
        self.hint = _collector_causal(trace)
        self.memo: dict[int, int | str] = {}

    def _own(self, i: int) -> int | str:
        get = lambda c: self.info[c][i] if c in self.info else None
        return op_bytes(self.names[i], get("input_dims"), get("input_types"), get("concrete_inputs"), self.hint)

    def _kids(self, i: int) -> int | str:
        total = 0
        for child in self.children.get(i, ()):
            got = self.bytes(child)
            if isinstance(got, str):
                return got
            total += got
        return total

    def _has_descendant(self, i: int, name: str) -> bool:
        stack = list(self.children.get(i, ()))
        while stack:
            node = stack.pop()
            if self.names[node] == name:
                return True
            stack.extend(self.children.get(node, ()))
        return False

    def safe_bytes(self, i: int) -> int | str:
        """bytes(i), or a reason where the ops nest deeper than Python recurses."""
        try:
            return self.bytes(i)
        except RecursionError:
            return f"{self.names[i]}: its ops nest too deep to sum their bytes"

    def bytes(self, i: int) -> int | str:
        """The bytes op (or annotation) i and what it calls move, or the first reason one of them cannot be told."""
        if i in self.memo:
            return self.memo[i]
        name = self.names[i] or ""
        if self.cats[i] != "cpu_op" or re.search(BOOKKEEPING_OPS, name) or COMPOSITE_OPS.search(name):
            found = self._kids(i)
        elif re.search(METADATA_OPS, name):
            found = self._kids(i)  # a view moves nothing; a reshape or contiguous that copies calls clone > copy_
        elif reader_for(name) is not None:
            kids = self._kids(i)  # the math path computes through bmm, softmax...; a fused op only allocates and views
            found = kids if isinstance(kids, str) or kids > 0 else self._own(i)
        elif name in OP_RULES and self._has_descendant(i, name):
            found = self._kids(i)  # a redispatch (mul(Tensor, Scalar) > mul(Tensor, double)): the inner one does it
        else:
            own = self._own(i)
            kids = self._kids(i) if not isinstance(own, str) else own
            found = own if isinstance(own, str) else kids if isinstance(kids, str) else own + kids
        self.memo[i] = found
        return found


@per_trace
def _op_tree(trace: Trace) -> _OpTree:
    return _OpTree(trace)


def call_bytes(trace: Trace) -> pl.DataFrame:
    """The bytes each attention call's own work moves (efficiency.attention_calls' calls): call,
    moved (null when unknown), moved_reason. On a GPU trace the sum over the device events whose
    time is the call's (its attention kernels, or all its work on the math path: not a KV-cache
    write or a fill beside the attention kernel); on a CPU-only trace the call's ops (see _OpTree)."""
    calls = attention_calls(trace)
    schema = {"call": pl.Int64, "moved": pl.Int64, "moved_reason": pl.String}
    if calls.height == 0:
        return pl.DataFrame(schema=schema)
    if not trace.has_gpu:
        tree = _op_tree(trace)
        rows = []
        for call in calls["call"].to_list():
            got = tree.safe_bytes(call)
            rows.append((call, None if isinstance(got, str) else got, got if isinstance(got, str) else None))
        return pl.DataFrame(rows, schema=schema, orient="row")
    found = _attention_work(trace)
    # the events the call's time sums (efficiency's counted work: its attention kernels), by call
    owner = (
        found[0].filter(pl.col("counted") & pl.col("call").is_not_null()).select("id", pl.col("call").alias("owner"))
        if found is not None
        else pl.DataFrame(schema={"id": pl.Int64, "owner": pl.Int64})
    )
    per_event = owner.join(device_bytes(trace).select("id", "bytes", "reason"), on="id", how="inner")
    summed = per_event.group_by("owner").agg(
        pl.when(pl.col("bytes").null_count() == 0).then(pl.col("bytes").sum()).alias("moved"),
        pl.col("reason").drop_nulls().first().alias("moved_reason"),
        pl.col("reason").drop_nulls().len().alias("unknown"),
    )
    return (
        calls.select("call")
        .join(summed, left_on="call", right_on="owner", how="left", maintain_order="left")
        .with_columns(
            pl.when(pl.col("moved").is_null())
            .then(
                pl.coalesce(
                    _more(pl.col("moved_reason"), pl.col("unknown")), pl.lit("no device work launched by the call")
                )
            )
            .alias("moved_reason")
        )
        .select(list(schema))
    )


def _more(reason: pl.Expr, unknown: pl.Expr) -> pl.Expr:
    """'<first reason>' or '<first reason> (and n more units of work without bytes)'."""
    return (
        pl.when(unknown > 1)
        .then(pl.format("{} (and {} more units of work without bytes)", reason, unknown - 1))
        .otherwise(reason)
    )


def step_bytes(trace: Trace) -> tuple[float | None, str | None]:
    """(bytes a step's work moves, the mean over the steps with work; or None and why) on a
    collectors' trace: every device event of the step on a GPU trace (the events step_efficiency
    times), the ops under the step's attention:: annotations on a CPU-only trace."""
    ev = trace.events
    if trace.has_gpu:
        moved = device_bytes(trace).filter(pl.col("step").is_not_null())
        if moved.height == 0:
            return None, "no device work inside any step"
        unknown = moved.filter(pl.col("bytes").is_null())
        if unknown.height:
            more = f" (and {unknown.height - 1} more units of work without bytes)" if unknown.height > 1 else ""
            return None, unknown["reason"][0] + more
        return float(moved["bytes"].sum()) / moved["step"].n_unique(), None
    roots = ev.filter(
        (pl.col("cat") == "user_annotation")
        & pl.col("step").is_not_null()
        & pl.col("name").cast(pl.String).str.starts_with("attention::")
    ).select("id", "step")
    if roots.height == 0:
        return None, "no attention:: annotation inside any step"
    tree = _op_tree(trace)
    total = 0
    for root in roots["id"].to_list():
        got = tree.safe_bytes(root)
        if isinstance(got, str):
            return None, got
        total += got
    return total / roots["step"].n_unique(), None


# --- the roofline's rows -------------------------------------------------------------------------

ROOFLINE_ROW_SCHEMA: dict[str, pl.DataType] = {
    "measure": pl.String,
    "name": pl.String,
    "backend": pl.String,
    "shape": pl.String,
    "dtype": pl.String,
    "device": pl.String,
    "count": pl.Int64,
    "mean_us": pl.Float64,
    "flops": pl.Int64,
    "bytes": pl.Float64,
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
MEASURE_OPS, MEASURE_STEP = "attention ops", "whole step"  # review's words for the two measures


def roofline_rows(trace: Trace, peak: DevicePeak | Mapping[str, float] | None = None) -> pl.DataFrame:
    """The trace's attention on the roofline at the bytes its own kernels move (ROOFLINE_ROW_SCHEMA):
    one row per attention op/kernel group (measure MEASURE_OPS, grouped as efficiency.efficiency;
    name = the op, else the kernel) and, on collectors' traces, one for the whole step (MEASURE_STEP;
    name = the variant). bytes: per call (per step), what its kernels move; intensity, tbps, the
    roofline, pct_of_roofline and bound follow from them; reason says why a number is missing
    (bytes that cannot be told among them). flops and tflops are efficiency's."""
    frames = [f.select(list(ROOFLINE_ROW_SCHEMA)) for f in (_op_rows(trace, peak), _step_row(trace, peak)) if f.height]
    return pl.concat(frames, how="vertical_relaxed") if frames else pl.DataFrame(schema=ROOFLINE_ROW_SCHEMA)


@per_trace
def own_roofline(trace: Trace) -> pl.DataFrame:
    """roofline_rows with the peaks table's peaks, once per trace."""
    return roofline_rows(trace)


def _op_rows(trace: Trace, peak: DevicePeak | Mapping[str, float] | None) -> pl.DataFrame:
    calls = attention_calls(trace)
    if calls.height == 0:
        return pl.DataFrame(schema=ROOFLINE_ROW_SCHEMA)
    calls = calls.join(call_bytes(trace), on="call", how="left", maintain_order="left").with_columns(
        pl.coalesce("reason", pl.when(pl.col("flops").is_not_null()).then(pl.col("moved_reason"))).alias("reason"),
        pl.when(pl.col("flops").is_not_null()).then(pl.col("moved")).alias("moved"),
    )  # no work, no point: no bytes either
    keys = ["op", "called", "kernel", "backend", "pass", "shape", "dtype", "device", "flops", "moved", "reason"]
    groups = (
        calls.group_by(keys, maintain_order=True)
        .agg(
            pl.len().cast(pl.Int64).alias("count"),
            pl.col("time_ns").sum().alias("total_ns"),
            pl.col("time_ns").count().alias("timed"),
        )
        .rename({"moved": "bytes"})
    )
    if device_lost(trace):
        groups = groups.with_columns(
            pl.lit(None, pl.Int64).alias("total_ns"),
            pl.lit(0, pl.UInt32).alias("timed"),
            pl.coalesce("reason", pl.lit(LOST_REASON)).alias("reason"),
        )
    table = _rates(groups, _peak_frame(trace, groups, peak))
    return table.select(
        pl.lit(MEASURE_OPS).alias("measure"),
        pl.coalesce("op", "kernel").alias("name"),
        *(pl.col(c).cast(t) for c, t in ROOFLINE_ROW_SCHEMA.items() if c not in ("measure", "name")),
    )


def _step_row(trace: Trace, peak: DevicePeak | Mapping[str, float] | None) -> pl.DataFrame:
    found = step_groups(trace)
    if found is None:
        return pl.DataFrame(schema=ROOFLINE_ROW_SCHEMA)
    groups, _ = found
    moved, why = step_bytes(trace)
    groups = groups.with_columns(
        pl.lit(None if moved is None else round(moved), pl.Int64).alias("bytes"),
        pl.coalesce("reason", pl.lit(why, pl.String)).alias("reason"),
    )
    table = _rates(groups, _peak_frame(trace, groups, peak))
    return table.select(
        pl.lit(MEASURE_STEP).alias("measure"),
        pl.col("variant").alias("name"),
        pl.lit(None, pl.String).alias("backend"),
        pl.col("steps").alias("count"),
        *(
            pl.col(c).cast(t)
            for c, t in ROOFLINE_ROW_SCHEMA.items()
            if c not in ("measure", "name", "backend", "count")
        ),
    )


__all__ = [
    "ELEMENT_BYTES",
    "OP_RULES",
    "OWN_BYTES_WORDS",
    "ROOFLINE_ROW_SCHEMA",
    "call_bytes",
    "device_bytes",
    "element_bytes",
    "op_bytes",
    "own_roofline",
    "roofline_rows",
    "step_bytes",
]
