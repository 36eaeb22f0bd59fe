"""Which attention implementation really ran, with the op and kernel names that prove it.

PyTorch's SDPA picks flash, memory-efficient, cuDNN or the unfused math path without saying so;
only the names in the trace tell. One trace can hold several backends.
"""

from __future__ import annotations

import json
import re
from typing import Any
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from dashboard.engine.model.columns import series
from dashboard.engine.model.trace import Trace, names_in, per_trace
from dashboard.engine.analyses.classes import COMPILED_REGION_KINDS, name_classes, names_where

# The attention-backend table lives in rules/backends.py (kernels reads it too); re-exported here.
from dashboard.engine.rules import (  # noqa: F401
    BACKEND_NAMES,
    BACKEND_TABLE,
    AttentionBackend,
    attention_backend,
    is_fused_attention,
)


from dashboard.engine.rules import BACKENDS  # noqa: E402,F401  (re-exported; defined light for the CLI's --help)

# The op names of an attention written by hand and of a compiled region live in rules/ops.py.
from dashboard.engine.rules.ops import (  # noqa: E402
    EAGER_CHAIN_MATMUL,
    EAGER_MATMUL,
    EAGER_SOFTMAX,
    INDUCTOR_SOFTMAX,
    SDPA_OP,
)

# What the collectors write as backend_requested when no one backend was forced.
NOT_FORCED = ("default", "eager", "none")


LAUNCH_SCHEMA: dict[str, pl.DataType] = {
    "backend": pl.String,
    "kernel": pl.String,
    "op": pl.String,
    "launch": pl.String,
    "count": pl.Int64,
}


@dataclass
class Backends:
    """backends: detected names in BACKENDS order; evidence: backend -> distinct op and kernel names
    that prove it; launches: one row per (backend, kernel, op, launch) with the number of kernel
    events: op is the innermost cpu_op around the launch call (None when the launch sits under no
    op, e.g. a CUDA/HIP graph replay, or its call is not in the trace), launch the runtime call
    (cudaLaunchKernel, cuLaunchKernelEx, hipGraphLaunch, ...)."""

    backends: list[str] = field(default_factory=list)
    evidence: dict[str, list[str]] = field(default_factory=dict)
    launches: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=LAUNCH_SCHEMA))

    @property
    def all_evidence(self) -> list[str]:
        return [name for b in self.backends for name in self.evidence.get(b, [])]


@per_trace(returns="Backends (a dataclass: the attention backends and their evidence), never kept")
def detect_backends(trace: Trace) -> Backends:
    """Detect attention backends from cpu_op and kernel names (BACKEND_TABLE), then hand-written
    attention compiled by inductor or run eagerly."""
    names = pl.Series(names_in(trace, "cpu_op", "kernel"), dtype=pl.String)
    by_name = _backend_by_name(trace)
    found = Backends()
    for backend in BACKEND_NAMES:
        hits = sorted(name for name, b in by_name.items() if b == backend)
        if hits:
            found.backends.append(backend)
            found.evidence[backend] = hits
    found.launches = backend_launches(trace)
    if not found.backends and (flex := _cpu_flex_evidence(trace)):
        found.backends.append("flex")
        found.evidence["flex"] = flex
    inductor = _inductor_evidence(trace, names, found.backends)
    if inductor:
        found.backends.append("inductor")
        found.evidence["inductor"] = inductor
    eager = _eager_evidence(trace)
    if eager:
        found.backends.append("eager")
        found.evidence["eager"] = eager
    return found


def _backend_by_name(trace: Trace) -> dict[str, str]:
    """Each cpu_op or kernel name that BACKEND_TABLE claims -> its backend (classes.name_classes)."""
    table = name_classes(trace).filter(pl.col("backend").is_not_null())
    return dict(zip(table["name"].to_list(), table["backend"].to_list()))


@per_trace(schema=LAUNCH_SCHEMA)
def backend_launches(trace: Trace) -> pl.DataFrame:
    """Backends.launches (LAUNCH_SCHEMA): a table, so a reopened trace keeps it (kept.py) and
    detect_backends, whose other parts come from kept name lists, never reads the events again."""
    return _launches(trace, _backend_by_name(trace))


def _cpu_flex_evidence(trace: Trace) -> list[str]:
    """FlexAttention compiled for the CPU: inductor's C++ template kernel records no name of its own
    (with cpp.enable_kernel_profile only a generic graph_0_kernel), so no name says flex. A trace
    whose own metadata says it is a collectors' flex run (collectors/variants.py: torch.compile of
    flex_attention), with no GPU work and no other attention name, and whose work runs inside a
    compiled region, is flex: the compiled region's names are the evidence, the metadata says which."""
    if trace.has_gpu or trace.collector.get("variant") != "flex":
        return []
    regions = names_where(trace, "op_kind", COMPILED_REGION_KINDS, ("cpu_op", "user_annotation"))
    if not regions:
        return []
    return ["collector metadata: variant flex (FlexAttention under torch.compile)"] + regions[:3]


def _launches(trace: Trace, by_name: dict[str, str]) -> pl.DataFrame:
    """Attention kernels with the op and runtime call that launched them (see Backends)."""
    ev = trace.events
    kernels = ev.select("cat", "name", "launch").filter(
        (pl.col("cat") == "kernel") & pl.col("name").cast(pl.String).is_in(list(by_name))
    )
    if kernels.height == 0:
        return pl.DataFrame(schema=LAUNCH_SCHEMA)
    launch = kernels["launch"].fill_null(-1).to_numpy()
    op = enclosing_cpu_op(trace, launch)
    return (
        kernels.select(pl.col("name").cast(pl.String).alias("kernel"))
        .with_columns(
            pl.col("kernel").replace_strict(by_name, return_dtype=pl.String).alias("backend"),
            _names_of(ev, op).alias("op"),
            _names_of(ev, launch).alias("launch"),
        )
        .group_by("backend", "kernel", "op", "launch")
        .agg(pl.len().cast(pl.Int64).alias("count"))
        .sort("backend", "kernel", "op", "launch", nulls_last=True)
        .select(list(LAUNCH_SCHEMA))
    )


def _names_of(ev: pl.DataFrame, ids: np.ndarray) -> pl.Series:
    """The names of the events with these ids (row numbers; -1: null)."""
    return ev["name"].gather(series("rows", ids.astype(np.int64), valid=ids >= 0)).cast(pl.String)


def enclosing_cpu_op(trace: Trace, ids: np.ndarray) -> np.ndarray:
    """For each event id (-1 = none), the id of the innermost cpu_op that holds it on its thread,
    or -1. Walks the `parent` column one nesting level per pass, for all ids at once."""
    ev = trace.events
    parent = ev["parent"].fill_null(-1).to_numpy()
    is_op = (ev["cat"] == "cpu_op").to_numpy()
    result = np.full(len(ids), -1, dtype=np.int64)
    node = np.where(ids >= 0, parent[np.maximum(ids, 0)], -1)
    while (node >= 0).any():
        hit = (node >= 0) & is_op[np.maximum(node, 0)]
        result[hit] = node[hit]
        node = np.where((node >= 0) & ~hit, parent[np.maximum(node, 0)], -1)
    return result


def attention_launches(runs: dict[str, Trace]) -> pl.DataFrame:
    """Backends.launches of every run with a leading `run` column (label), in run order."""
    frames = [detect_backends(t).launches.select(pl.lit(label).alias("run"), pl.all()) for label, t in runs.items()]
    schema = {"run": pl.String, **LAUNCH_SCHEMA}
    return pl.concat(frames) if frames else pl.DataFrame(schema=schema)


def _inductor_evidence(trace: Trace, names: pl.Series, fused: list[str]) -> list[str]:
    """Generated softmax kernels of a compiled hand-written attention (when no fused SDPA ran),
    beside its matmuls: aten matmul ops, or, when the kernels replay from a CUDA graph and no op
    runs on the CPU, matrix-multiply kernels."""
    if fused:
        return []
    hits = sorted(names.filter(names.str.contains(INDUCTOR_SOFTMAX)).to_list())
    if not hits:
        return []
    if names.str.contains(EAGER_MATMUL).any():
        return hits
    return hits if names_where(trace, "family", {"gemm"}, ("kernel",)) else []


# What an eager attention chain's evidence caps at: the first chains found, then a count.
EAGER_CHAINS_SHOWN = 2


def _eager_evidence(trace: Trace) -> list[str]:
    """Attention written by hand, run eagerly: on one thread (pid, tid), in time order, a matmul-like
    op (EAGER_CHAIN_MATMUL) whose output is [.., Sq, Sk], then a softmax (EAGER_SOFTMAX) over the
    last dimension of a [.., Sq, Sk] tensor, then a matmul-like op whose inputs are [.., Sq, Sk] and
    [.., Sk, D] (shapes from Input Dims; the softmax's dim from Concrete Inputs when recorded;
    elementwise scale and mask ops may sit between). Ops under an SDPA op (the math path) do not
    count. Without recorded shapes (record_shapes=False) the order alone decides: the nearest matmul
    before and after the softmax on its thread, and the evidence says so. A softmax and a matmul
    somewhere in the trace are not attention. Evidence: the chain's ops with their shapes."""
    names = pl.Series(names_in(trace, "cpu_op"), dtype=pl.String)
    if not (names.str.contains(EAGER_SOFTMAX).any() and names.str.contains(EAGER_CHAIN_MATMUL).any()):
        return []  # decided from the distinct names, without reading the ops
    pattern = f"{EAGER_SOFTMAX}|{EAGER_CHAIN_MATMUL}|{SDPA_OP}"
    ops = (
        trace.events.lazy()
        .filter((pl.col("cat") == "cpu_op") & pl.col("name").cast(pl.String).str.contains(pattern))
        .select(
            "id",
            "parent",
            pl.col("pid").cast(pl.String),
            pl.col("tid").cast(pl.String),
            pl.col("name").cast(pl.String),
            pl.col("input_dims").cast(pl.String),
            pl.col("concrete_inputs").cast(pl.String),
        )
        .collect()
    )
    parent = trace.events["parent"].fill_null(-1).to_numpy()
    kinds = {
        i: ("sdpa" if re.search(SDPA_OP, n) else "softmax" if re.search(EAGER_SOFTMAX, n) else "matmul")
        for i, n in zip(ops["id"].to_list(), ops["name"].to_list())
    }

    def ancestors(node: int):
        node = int(parent[node])
        while node >= 0:
            yield node
            node = int(parent[node])

    chains: list[str] = []
    found = 0
    for _, lane in ops.group_by("pid", "tid", maintain_order=True):
        steps = _lane_steps(lane, kinds, ancestors)
        for at, (kind, _sid, sname, sdims, sconcrete) in enumerate(steps):
            if kind != "softmax":
                continue
            before, after = _around(steps, at, ancestors)
            chain = _chain(sname, sdims, sconcrete, before, after)
            if chain:
                found += 1
                if found <= EAGER_CHAINS_SHOWN:
                    chains.extend(chain)
    if not found:
        return []
    return chains + ([f"{found} matmul -> softmax -> matmul chains in all"] if found > 1 else [])


def _lane_steps(lane: pl.DataFrame, kinds: dict[int, str], ancestors: Any) -> list[tuple]:
    """One thread's softmax and matmul-like ops in time order, as (kind, id, name, dims, concrete):
    none under an SDPA op (the math path), and only the outermost of nested softmaxes."""
    steps = []
    for i, name, dims, concrete in zip(
        lane["id"].to_list(), lane["name"].to_list(), lane["input_dims"].to_list(), lane["concrete_inputs"].to_list()
    ):
        kind = kinds[i]
        if kind == "sdpa":
            continue
        up = [kinds.get(a) for a in ancestors(i)]
        if "sdpa" in up or (kind == "softmax" and "softmax" in up):
            continue
        steps.append((kind, i, name, _json_list(dims), _json_list(concrete)))
    return steps


def _around(steps: list[tuple], at: int, ancestors: Any) -> tuple[list[tuple], list[tuple]]:
    """The matmul-like ops before the softmax at `at` (nearest first; an outer op before the one it
    calls, so aten::matmul is named before its aten::bmm) and after it (none inside the softmax),
    each side up to the next softmax."""
    sid = steps[at][1]
    before = []
    for k in range(at - 1, -1, -1):
        if steps[k][0] == "softmax":
            break
        before.append(steps[k])
    after = []
    for k in range(at + 1, len(steps)):
        if steps[k][0] == "softmax":
            break
        if sid in ancestors(steps[k][1]):
            continue  # inside the softmax
        after.append(steps[k])
    inner = [any(o[1] in set(ancestors(op[1])) for o in before) for op in before]
    before = [op for op, nested in zip(before, inner) if not nested] + [
        op for op, nested in zip(before, inner) if nested
    ]
    return before, after


def _json_list(text: str | None) -> list | None:
    """A raw Input Dims / Concrete Inputs text as a list, or None when absent or unreadable."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, list) else None


def _shape(value: object) -> list[int] | None:
    """A recorded tensor shape (a list of ints), else None."""
    if isinstance(value, list) and value and all(isinstance(d, int) for d in value):
        return value
    return None


def _prod(dims: list[int]) -> int:
    out = 1
    for d in dims:
        out *= d
    return out


def _same_matrix(a: list[int], b: list[int]) -> bool:
    """Equal last two dims and the same number of matrices (bmm flattens matmul's batch dims)."""
    return len(a) >= 2 and len(b) >= 2 and a[-2:] == b[-2:] and _prod(a[:-2]) == _prod(b[:-2])


def _operands(name: str, dims: list | None, concrete: list | None) -> tuple[list[int], list[int]] | None:
    """The two matrix operands of a matmul-like op (aten::baddbmm: batch1 and batch2; aten::einsum:
    its two tensors, the output's letters checked by _einsum_out), from its Input Dims."""
    if dims is None:
        return None
    if name == "aten::einsum":
        tensors = [d for d in dims if isinstance(d, list) and d and all(isinstance(t, list) for t in d)]
        flat = tensors[0] if tensors else [d for d in dims[1:] if _shape(d)]
        pair = [_shape(d) for d in flat[:2]]
    else:
        start = 1 if name == "aten::baddbmm" else 0
        pair = [_shape(d) for d in dims[start : start + 2]]
    if len(pair) != 2 or pair[0] is None or pair[1] is None:
        return None
    return pair[0], pair[1]


def _einsum_equation(concrete: list | None) -> tuple[str, str, str] | None:
    """An einsum's two operand subscripts and its output subscript, without ellipsis."""
    equation = next((c for c in concrete or [] if isinstance(c, str) and "->" in c), None)
    if not equation or "." in equation:
        return None
    ins, out = equation.replace(" ", "").split("->")
    parts = ins.split(",")
    return (parts[0], parts[1], out) if len(parts) == 2 else None


def _product_shape(name: str, dims: list | None, concrete: list | None) -> list[int] | None:
    """The output shape of a matmul-like op from its recorded inputs, or None when unknown."""
    pair = _operands(name, dims, concrete)
    if pair is None:
        return None
    a, b = pair
    if name == "aten::einsum":
        eq = _einsum_equation(concrete)
        if eq is None or len(eq[0]) != len(a) or len(eq[1]) != len(b):
            return None
        size = dict(zip(eq[0], a)) | dict(zip(eq[1], b))
        return [size[c] for c in eq[2]] if all(c in size for c in eq[2]) else None
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        return None
    batch_a, batch_b = a[:-2], b[:-2]
    n = max(len(batch_a), len(batch_b))
    batch_a, batch_b = [1] * (n - len(batch_a)) + batch_a, [1] * (n - len(batch_b)) + batch_b
    if any(x != y and 1 not in (x, y) for x, y in zip(batch_a, batch_b)):
        return None
    return [max(x, y) for x, y in zip(batch_a, batch_b)] + [a[-2], b[-1]]


def _applies(name: str, dims: list | None, concrete: list | None, scores: list[int]) -> bool:
    """True when a matmul-like op multiplies a [.., Sq, Sk] tensor (scores) by a [.., Sk, D] one."""
    pair = _operands(name, dims, concrete)
    if pair is None:
        return False
    a, b = pair
    if name == "aten::einsum":
        eq = _einsum_equation(concrete)
        return (
            eq is not None
            and len(eq[0]) == len(a)
            and _same_matrix(a, scores)
            and eq[0][-1] in eq[1]
            and eq[0][-1] not in eq[2]
        )
    return _same_matrix(a, scores) and len(b) >= 2 and b[-2] == scores[-1]


def _text(dims: list[int] | None) -> str:
    return str(list(dims)) if dims is not None else "?"


def _chain(
    softmax: str, sdims: list | None, sconcrete: list | None, before: list[tuple], after: list[tuple]
) -> list[str]:
    """The evidence of one matmul -> softmax -> matmul chain around a softmax, or [] when none.
    before: the matmul-like ops since the previous softmax, nearest first; after: those up to the
    next softmax, in order (tuples: kind, id, name, dims, concrete)."""
    if not before or not after:
        return []
    scores = _shape(sdims[0]) if sdims else None
    if scores is None:  # shapes not recorded: the order alone
        first, second = before[0], after[0]
        return [f"{first[2]} -> {softmax} -> {second[2]} on one thread (order only: shapes not recorded)"]
    dim = sconcrete[1] if sconcrete and len(sconcrete) > 1 else ""
    if len(scores) < 2 or (dim not in ("", None) and str(dim) not in ("-1", str(len(scores) - 1))):
        return []
    first = next(
        (op for op in before if (out := _product_shape(op[2], op[3], op[4])) is not None and _same_matrix(out, scores)),
        None,
    )
    second = next((op for op in after if _applies(op[2], op[3], op[4], scores)), None)
    if first is None or second is None:
        return []
    a1, b1 = _operands(first[2], first[3], first[4]) or (None, None)
    a2, b2 = _operands(second[2], second[3], second[4]) or (None, None)
    return [
        f"{first[2]} {_text(a1)} x {_text(b1)} -> {_text(_product_shape(first[2], first[3], first[4]))}",
        f"{softmax} over dim {dim if dim not in ('', None) else '-1 (dim not recorded)'} of {_text(scores)}",
        f"{second[2]} {_text(a2)} x {_text(b2)}",
    ]


def requested_backend(trace: Trace) -> str | None:
    """The backend the collectors asked for (from the trace's own metadata), if any."""
    value = trace.collector.get("backend_requested")
    return str(value) if value else None


def fallback(requested: str | None, detected: list[str]) -> bool:
    """True when a specific fused backend was requested and it is not what ran."""
    if not requested or requested in NOT_FORCED:
        return False
    # torch.compile lowers the forced math path into generated kernels (inductor); that is still
    # the math path, compiled, not a fallback.
    # The hub's kernels are FlashAttention's own: a hub run whose op names were lost still shows them.
    aliases = {
        "flash": {"flash", "cpu_flash"},
        "cpu_flash": {"cpu_flash", "flash"},
        "math": {"math", "inductor"},
        "hub": {"hub", "flash-attn"},
    }
    wanted = aliases.get(requested, {requested})
    return not (wanted & set(detected))
