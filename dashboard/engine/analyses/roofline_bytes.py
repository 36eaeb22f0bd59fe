"""The bytes one op moves in memory, from its recorded shapes: the op rules, and on a CPU-only trace
the tree of ops, where an op whose work its callees do counts theirs.

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
- attention ops (rules.op_readers.OP_READERS): what a fused kernel moves, efficiency's bytes: read Q, K, V
  (and a mask), write O (and the log-sum-exp where it is written).
- views and allocations (the op kind metadata: classes.op_kind_of) move nothing.
Anything else has no bytes, and says why: an inductor-generated kernel (the trace does not say
which of its buffers it reads and which it writes), a kernel replayed from a CUDA graph, an op
without a rule. A roofline point whose bytes are not all known is left out, with its reason.

Units: bytes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from dashboard.engine.analyses.formulas import DTYPES, INT64_MAX
from dashboard.engine.analyses.classes import BOOKKEEPING_KINDS, METADATA, op_kind_of
from dashboard.engine.rules.op_readers import reader_for
from dashboard.engine.analyses.shapes import _collector_causal, read_shape
from dashboard.engine.model.trace import Trace, per_trace
from dashboard.engine.rules.ops import COMPOSITE_OPS, INDUCTOR_KERNELS


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
    if op_kind_of(name) == METADATA:
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
    if rule.kind == GEMM:
        return _gemm_bytes(name, rule, dims, found)
    if not dims or (found[0] is None and dims[0] != []):
        return f"{name}: its first input is not a tensor ({dims[:1]})"
    if rule.kind == IN_PLACE:  # a 0-dim self (a scalar tensor) counts 0 bytes, as every 0-dim input
        read = found[: rule.operands] if rule.reads_self else found[1 : rule.operands]
        return sum(_count(t) for t in read if t is not None) + (_count(found[0]) if found[0] is not None else 0)
    if rule.kind in (SOFTMAX, REDUCTION) and found[0] is None:
        return 0
    if rule.kind == SOFTMAX:
        concrete = _load(concrete_json) or []
        half_to_float = len(concrete) > 2 and concrete[2] == "True"
        return _count(found[0]) + math.prod(found[0][0]) * (4 if half_to_float else found[0][1])
    if rule.kind == REDUCTION:
        return _reduction_bytes(name, rule, dims, found[0], concrete_json)
    return _elementwise_bytes(name, rule, dims, types, found)


def _count(tensor: tuple[list[int], int]) -> int:
    """The bytes of a tensor given as (dims, element bytes)."""
    return math.prod(tensor[0]) * tensor[1]


def _gemm_bytes(name: str, rule: OpRule, dims: list, found: list) -> int | str:
    """A matrix product: read both operands (and the bias), write the [..., m, n] product (or the out= buffer)."""
    operands = [f for f in found[: rule.operands] if f is not None]
    outs = [f for f in found[rule.operands :] if f is not None]
    a, b = (found[1], found[2]) if rule.bias else (found[0], found[1])
    if a is None or b is None or len(a[0]) < 2 or len(b[0]) < 2 or a[0][-1] != b[0][-2]:
        return f"{name}: operands {dims[: rule.operands]} are not a matrix product's"
    written = _count(outs[0]) if outs else math.prod(a[0][:-1]) * b[0][-1] * a[1]
    return sum(_count(t) for t in operands) + written


def _reduction_bytes(
    name: str, rule: OpRule, dims: list, tensor: tuple[list[int], int], concrete_json: Any
) -> int | str:
    """A reduction: read the input, write it with the reduced dims removed."""
    shape, size = tensor
    reduced = _reduced_dims(_load(concrete_json), len(dims), len(shape))
    if isinstance(reduced, str):
        return f"{name}: {reduced}"
    kept = math.prod(s for k, s in enumerate(shape) if k not in reduced)
    return _count(tensor) + kept * (1 if rule.result == "bool" else size)


def _elementwise_bytes(name: str, rule: OpRule, dims: list, types: list, found: list) -> int | str:
    """An elementwise op: read each tensor operand, write the broadcast shape at the result's type (or the out= buffer)."""
    operands = [f for f in found[: rule.operands] if f is not None]
    outs = [f for f in found[rule.operands :] if f is not None]
    if not operands:  # every operand a scalar: a 0-dim result
        return 0
    if outs:
        written = _count(outs[0])
    else:
        shape = _broadcast([t[0] for t in operands])
        if shape is None:
            return f"{name}: operand shapes {[t[0] for t in operands]} do not broadcast"
        size = 1 if rule.result == "bool" else _widest(dims, types, rule.operands)
        written = math.prod(shape) * size
    return sum(_count(t) for t in operands) + written


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
        kind = op_kind_of(name)
        if self.cats[i] != "cpu_op" or kind in BOOKKEEPING_KINDS or COMPOSITE_OPS.search(name):
            found = self._kids(i)
        elif kind == METADATA:
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


@per_trace(returns="_OpTree (the ops' nesting, the bytes of any subtree), never kept")
def _op_tree(trace: Trace) -> _OpTree:
    """The trace's cpu_ops and annotations as a tree (_OpTree), built once: every subtree's bytes are read from it."""
    return _OpTree(trace)
