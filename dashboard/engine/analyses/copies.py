"""Copies: every GPU memcpy and copy kernel (or, in a CPU-only trace, every tensor aten::copy_),
attributed to the chain of CPU ops that caused it, e.g. aten::masked_fill > aten::clone > aten::copy_,
and sorted into one class (COPY_CLASSES says which and why). Only `hidden` copies are alarms.

A copy's origin is the op the user's code called: the outermost op of its chain that is not a
wrapper (autograd engine nodes, compiled regions, TorchScript `forward`, record_function and
module annotations). A copy that only converts a Python scalar (a 0-dim input, as
`scores * 0.125` produces) is not a tensor copy and is left out.
"""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl

from dashboard.engine.analyses.classes import AUTOGRAD_KINDS, WRAPPING_KINDS, name_is, op_kind_of
from dashboard.engine.model.columns import series
from dashboard.engine.model.trace import Trace, names_matching, per_trace
from dashboard.engine.rules import KV_CACHE_WRITE_KERNELS, is_collective_op, is_kv_cache_write
from dashboard.engine.rules.ops import (
    COPY_OP,
    REQUESTED_COPY_OPS,
    REQUESTED_COPY_SUFFIX,
    SCALAR_READS,
)
from dashboard.engine.rules.ops import STEP_MARK

# Kernels that write keys and values into a KV cache (rules.KV_CACHE_WRITES: vLLM's
# reshape_and_cache*, SGLang's store_kvcache): the attention op's own job, asked for by the serving
# framework. The same rows make them copy kernels (rules.FAMILY_RULES), so the two cannot disagree.
KV_CACHE_WRITE = "(?i)" + KV_CACHE_WRITE_KERNELS  # over a kernel's function name (rules.is_kv_cache_write)
# The op-name sets live in rules/ops.py with their reasons (imported here): REQUESTED_COPY_OPS
# and REQUESTED_COPY_SUFFIX (ops whose job is to move data), SCALAR_READS (a value read back),
# Which ops are wrappers (never a copy's origin) and which the autograd engine's: their op kind
# (classes.op_kind_of over rules.ops.NOT_MODEL_OP_RULES, views and annotations; WRAPPING_KINDS,
# AUTOGRAD_KINDS).
# Collectives and their staging (DDP's reducer copies buckets into gradients): rules.COLLECTIVES'
# op rows (rules.is_collective_op, a user's rows first).

# The classes, in the order they are decided (the first that applies wins), with the reason.
HIDDEN, REQUESTED, AUTOGRAD, COMMUNICATION, UNATTRIBUTED = (
    "hidden",
    "requested",
    "autograd",
    "communication",
    "unattributed",
)
COPY_CLASSES: tuple[tuple[str, str], ...] = (
    (
        COMMUNICATION,
        "an op of the chain is a collective or its staging (c10d::, nccl:, DDP's reducer): the copy is part of communication",
    ),
    (
        AUTOGRAD,
        "the chain runs inside the autograd engine (a *Backward node, AccumulateGrad): gradient work the user's code did not call",
    ),
    (
        REQUESTED,
        "the origin's job is to move data (to, copy_, clone, contiguous, cat, stack, ...) or the chain reads a value back (item)",
    ),
    (
        HIDDEN,
        "the origin is an op that does not ask for a copy (masked_fill > clone > copy_, layer_norm > contiguous > clone)",
    ),
    (
        UNATTRIBUTED,
        "no op holds the launch, or only wrappers do (a compiled region's own kernel, a copy outside any op)",
    ),
)
# A kernel is a copy when its family is 'copy' (kernels.FAMILY_RULES: the one rule for what a kernel
# is): PyTorch's elementwise launcher running a copy functor, torch._foreach_copy_'s Copy functor
# (a CUDA graph's input copies), CatArrayBatchedCopy, layout transposes, KV-cache writes, blit
# copies. The name parser reads template arguments apart, so index_elementwise_kernel<...
# index_copy_kernel_impl ...> stays elementwise.
CHAIN_CATEGORIES = ("cpu_op",)
CHAIN_SEP = "\x1f"
# The events' columns a copy's row keeps (with kind and anchor), and the ops that convert a value.
FOUND_COLUMNS = ("id", "step", "cat", "name", "ts_ns", "dur_ns", "bytes", "device", "stream")
CONVERSIONS = frozenset(("aten::to", "aten::_to_copy"))

# Element sizes for Input type strings as torch.profiler writes them.
DTYPE_BYTES: dict[str, int] = {
    "float": 4,
    "double": 8,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "long int": 8,
    "int": 4,
    "short int": 2,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
    "c10::complex<float>": 8,
    "c10::complex<double>": 16,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
}

COPY_COLUMNS = {
    "id": pl.Int64,
    "step": pl.Int64,
    "kind": pl.String,
    "name": pl.String,
    "ts_ns": pl.Int64,
    "dur_ns": pl.Int64,
    "bytes": pl.Int64,
    "gbps": pl.Float64,
    "device": pl.Int64,
    "stream": pl.Int64,
    "op_chain": pl.List(pl.String),
    "origin": pl.String,
    "copy_class": pl.String,
    "hidden": pl.Boolean,
}


def is_wrapper(name: str) -> bool:
    """An op that only wraps others: an autograd node, a compiled region or an annotation."""
    return op_kind_of(name) in WRAPPING_KINDS


def classify_chain(chain: list[str]) -> tuple[str | None, str]:
    """(origin, copy class) of one op chain, outermost op first (see COPY_CLASSES)."""
    origin = next((name for name in chain if not is_wrapper(name)), None)
    if any(is_collective_op(name) for name in chain):
        return origin, COMMUNICATION
    if any(op_kind_of(name) in AUTOGRAD_KINDS for name in chain):
        return origin, AUTOGRAD
    if origin is None:
        return None, UNATTRIBUTED
    if (
        origin in REQUESTED_COPY_OPS
        or REQUESTED_COPY_SUFFIX.search(origin)
        or any(name in SCALAR_READS for name in chain)
    ):
        return origin, REQUESTED
    return origin, HIDDEN


@per_trace(schema=COPY_COLUMNS)
def copies(trace: Trace) -> pl.DataFrame:
    """Every copy: id, step, kind (DtoD, HtoD, DtoH, PtoP, ..., 'kernel' for a copy kernel, 'cpu'
    in a CPU-only trace), name, ts_ns, dur_ns, bytes (null when unknown), gbps (GB/s), device,
    stream, op_chain (outermost op first), origin (the op the user's code called), copy_class
    (see COPY_CLASSES), hidden (copy_class == 'hidden')."""
    found = _found(trace)
    if found.height == 0:
        return pl.DataFrame(schema=COPY_COLUMNS)
    tree = _Holders(trace, found["anchor"].fill_null(-1).to_numpy())
    keys, which = np.unique(tree.row_chain_keys(), return_inverse=True)
    # Each distinct chain (a few hundred) joined, split and classified once, as a copy's own chain
    # always was (an op named "" or holding CHAIN_SEP reads the same), then gathered for the copies.
    joined = [CHAIN_SEP.join(names) for names in tree.chain_names(keys)]
    verdicts = [classify_chain(chain.split(CHAIN_SEP) if chain else []) for chain in joined]
    chains = [[name for name in chain.split(CHAIN_SEP) if name != ""] for chain in joined]
    row = _index(which)
    verdict_class = pl.Series([verdict[1] for verdict in verdicts], dtype=pl.String).gather(row)
    found = found.with_columns(
        pl.Series("op_chain", chains, dtype=pl.List(pl.String)).gather(row),
        pl.Series("origin", [verdict[0] for verdict in verdicts], dtype=pl.String).gather(row),
        pl.when(pl.col("name").is_in(_kv_cache_writes(found["name"])) & verdict_class.is_in([HIDDEN, UNATTRIBUTED]))
        .then(pl.lit(REQUESTED))
        .otherwise(verdict_class)
        .alias("copy_class"),
        pl.Series("converts", [not CONVERSIONS.isdisjoint(chain) for chain in chains]).gather(row),
        *_shape_bytes(trace, tree.row_inner_copies()),
    )
    # Only a 0-dim source converted by aten::to/_to_copy (`scores * 0.125`) is a scalar conversion;
    # a GPU memcpy is always kept, whatever its size.
    found = found.filter(~(pl.col("scalar") & pl.col("converts") & (pl.col("cat") != "gpu_memcpy")))
    return found.with_columns(pl.coalesce("bytes", "shape_bytes").alias("bytes")).select(
        "id",
        "step",
        "kind",
        _text_of(found["name"]),
        "ts_ns",
        "dur_ns",
        "bytes",
        pl.when(pl.col("dur_ns") > 0).then(pl.col("bytes") / pl.col("dur_ns")).otherwise(None).alias("gbps"),
        "device",
        "stream",
        "op_chain",
        "origin",
        "copy_class",
        (pl.col("copy_class") == HIDDEN).alias("hidden"),
    )


def _found(trace: Trace) -> pl.DataFrame:
    """The copies' events, with only the columns the table uses (a lazy filter gathers no other
    column): kind, and anchor (the event whose op chain is the copy's: its launch, or itself)."""
    ev = trace.events.lazy()
    if trace.has_gpu:
        found = ev.filter(
            (pl.col("cat") == "gpu_memcpy")
            | ((pl.col("cat") == "kernel") & name_is(trace, "family", {"copy"}, ("kernel",)))
        ).select(
            *FOUND_COLUMNS,
            pl.when(pl.col("cat") == "gpu_memcpy")
            .then(pl.col("kind").cast(pl.String))
            .otherwise(pl.lit("kernel"))
            .alias("kind"),
            pl.col("launch").alias("anchor"),
        )
    else:
        found = ev.filter((pl.col("cat") == "cpu_op") & (pl.col("name") == COPY_OP)).select(
            *FOUND_COLUMNS, pl.lit("cpu").alias("kind"), pl.col("id").alias("anchor")
        )
    return found.collect()


def _index(rows: np.ndarray) -> pl.Series:
    """Row numbers for a gather, through Arrow (model.columns.series): a Series built from a numpy
    array makes polars 2 import numpy.ma, which a process's first trace would pay for."""
    return series("rows", np.ascontiguousarray(np.ravel(rows), dtype=np.int64))


def _text_of(names: pl.Series) -> pl.Series:
    """A Categorical column as text, the rows sharing one copy of each distinct name: a cast writes
    every row's own copy (3.5 of the 8.5 MB the table held on the dense 180 MB trace)."""
    codes = names.to_physical().cast(pl.Int64).fill_null(-1).to_numpy()
    _, first, which = np.unique(codes, return_index=True, return_inverse=True)
    return names.gather(_index(first)).cast(pl.String).gather(_index(which)).alias(names.name)


def _distinct(values: np.ndarray) -> np.ndarray:
    """np.unique(values) by a sort: faster than the hash numpy 2 uses for integers."""
    ordered = np.sort(values)
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))] if ordered.size else ordered


def _kv_cache_writes(names: pl.Series) -> list[str]:
    """The names among `names` that are KV-cache writes (rules.is_kv_cache_write), each tested once."""
    return [name for name in names.unique().cast(pl.String).drop_nulls().to_list() if is_kv_cache_write(name)]


class _Holders:
    """The anchors (event ids, -1 for none) and every event that holds one, up to the roots, as
    arrays over those events only: each anchor's op chain (a key per distinct chain of names) and
    its innermost aten::copy_ are found a level at a time, never with a Python step per event.
    Same chains as _op_paths: the cpu_ops that hold the anchor (itself included), ProfilerStep left out."""

    def __init__(self, trace: Trace, anchors: np.ndarray) -> None:
        ev = trace.events
        levels = [_distinct(anchors[anchors >= 0])]
        while levels[-1].size:
            up = ev["parent"].gather(_index(levels[-1])).fill_null(-1).to_numpy()
            levels.append(_distinct(up[up >= 0]))
        self.nodes = nodes = _distinct(np.concatenate(levels))
        self.events, self.anchors = ev, anchors
        # each node's place among the nodes by its event id, read off directly: a binary search of
        # every node's parent and every anchor among 400k nodes took 25 ms
        self._place = np.zeros(ev.height, dtype=np.int64)
        self._place[nodes] = np.arange(nodes.size)
        held = ev.select(pl.col("parent", "depth", "cat", "name").gather(_index(nodes)))
        parent = held["parent"].fill_null(-1).to_numpy()
        up = np.where(parent >= 0, self._place[np.maximum(parent, 0)], -1)  # a node's parent is a node
        marks = names_matching(held["name"], lambda name: name.str.starts_with(STEP_MARK))
        is_op = held.select((pl.col("cat").is_in(CHAIN_CATEGORIES) & ~marks).fill_null(False)).to_series().to_numpy()
        is_copy = is_op & held.select((pl.col("name") == COPY_OP).fill_null(False)).to_series().to_numpy()
        codes = held["name"].to_physical().cast(pl.Int64).fill_null(-1).to_numpy() + 1
        self._walk_down(up, held["depth"].to_numpy(), is_op, is_copy, codes)

    def _walk_down(
        self, up: np.ndarray, depth: np.ndarray, is_op: np.ndarray, is_copy: np.ndarray, codes: np.ndarray
    ) -> None:
        """Roots first, each level's events from their parents': the key of an op's chain interns
        (its parent's key, its name); other events keep their parent's key (-1: no op). A level is
        the events of one depth (the events' depth: a parent's is one less), taken in one sort, not
        found again among the events left at every level."""
        size, span = len(up), (int(codes.max()) + 1 if codes.size else 1)
        key = np.full(size, -1, dtype=np.int64)
        inner = np.full(size, -1, dtype=np.int64)
        self.key_parent: list[int] = []
        self.key_node: list[int] = []
        by_depth = np.argsort(depth, kind="stable")  # each level's events in the nodes' order
        bounds = np.searchsorted(depth[by_depth], np.arange(int(depth.max(initial=-1)) + 2))
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            now = by_depth[lo:hi]
            above = up[now]
            key[now] = np.where(above >= 0, key[np.maximum(above, 0)], -1)
            inner[now] = np.where(is_copy[now], now, np.where(above >= 0, inner[np.maximum(above, 0)], -1))
            ops = now[is_op[now]]
            pairs, first, which = np.unique((key[ops] + 1) * span + codes[ops], return_index=True, return_inverse=True)
            key[ops] = len(self.key_parent) + which.ravel()
            self.key_parent += (pairs // span - 1).tolist()
            self.key_node += self.nodes[ops[first]].tolist()
        self._key, self._inner = key, inner

    def _rows(self, values: np.ndarray) -> np.ndarray:
        if not len(values):
            return np.full(len(self.anchors), -1, dtype=np.int64)
        return np.where(self.anchors >= 0, values[self._place[np.maximum(self.anchors, 0)]], -1)

    def row_chain_keys(self) -> np.ndarray:
        """Each anchor's chain key (-1: no op holds it)."""
        return self._rows(self._key)

    def row_inner_copies(self) -> np.ndarray:
        """Each anchor's innermost aten::copy_ among the ops that hold it (event id, -1: none)."""
        inner = self._rows(self._inner)
        if not self.nodes.size:  # no anchor has a holder (every launch lost): no copy_ either
            return inner
        return np.where(inner >= 0, self.nodes[np.maximum(inner, 0)], -1)

    def chain_names(self, keys: np.ndarray) -> list[list[str]]:
        """The op names of each chain key, outermost first."""
        names = self.events["name"].gather(self.key_node).cast(pl.String).to_list()
        chains: dict[int, list[str]] = {-1: []}
        for key in range(len(names)):  # a key's parent key is always a smaller one
            chains[key] = chains[self.key_parent[key]] + [names[key]]
        return [chains[int(key)] for key in keys]


def _op_paths(trace: Trace, anchors: list[int | None]) -> list[list[int]]:
    """For each anchor event id (a launch call or a CPU op), the ids of the cpu_ops that hold it,
    outermost first (the anchor itself included when it is a cpu_op; ProfilerStep left out).
    Walks parent links with numpy arrays only: no per-event Python objects."""
    ev = trace.events
    parent = ev["parent"].fill_null(-1).to_numpy()
    marks = names_matching(ev["name"], lambda name: name.str.starts_with(STEP_MARK))
    is_op = ev.select(pl.col("cat").is_in(CHAIN_CATEGORIES) & ~marks).to_series().to_numpy()
    cache: dict[int, list[int]] = {}
    out: list[list[int]] = []
    for anchor in anchors:
        if anchor is None:
            out.append([])
            continue
        if anchor not in cache:
            path: list[int] = []
            node = int(anchor)
            while node >= 0:
                if is_op[node]:
                    path.append(node)
                node = int(parent[node])
            path.reverse()
            cache[anchor] = path
        out.append(cache[anchor])
    return out


def _shape_bytes(trace: Trace, inner: np.ndarray) -> tuple[pl.Series, pl.Series]:
    """Bytes for copies that carry none (copy kernels, CPU copies), from the innermost aten::copy_'s
    (event id per copy, -1: none) Input Dims and Input type when shapes were recorded (shape_bytes),
    and whether the copy is a scalar's (scalar); each distinct recorded shape read once."""
    wanted, which = np.unique(inner, return_inverse=True)
    known = wanted[wanted >= 0]
    shapes = trace.events.select(pl.col("input_dims", "input_types").gather(_index(known)))
    # one number per distinct (dims, types) pair from the two Categorical codes (-1: null): equal
    # pairs, equal numbers, without the struct's rank (13 ms of 150k copies)
    dims, types = (shapes[c].to_physical().cast(pl.Int64).fill_null(-1).to_numpy() for c in shapes.columns)
    pair = (dims + 1) * (int(types.max(initial=-1)) + 2) + types + 1
    _, first, shape_of = np.unique(pair, return_index=True, return_inverse=True)
    verdicts = [
        (None, False) if dims is None else _tensor_bytes(dims, types)
        for dims, types in shapes.select(pl.all().gather(_index(first))).rows()
    ]
    verdicts.append((None, False))  # no aten::copy_ holds the copy
    at = which.ravel() - (len(wanted) - len(known))
    lookup = np.append(shape_of.ravel(), len(verdicts) - 1)
    row = _index(lookup[np.where(at >= 0, at, len(lookup) - 1)])
    return (
        pl.Series("shape_bytes", [size for size, _ in verdicts], dtype=pl.Int64).gather(row),
        pl.Series("scalar", [scalar for _, scalar in verdicts], dtype=pl.Boolean).gather(row),
    )


def _tensor_bytes(dims_json: str, types_json: str | None) -> tuple[int | None, bool]:
    """(bytes copied, is a 0-dim scalar copy) from copy_(self, src)'s recorded shapes."""
    try:
        dims = json.loads(dims_json)
        types = json.loads(types_json) if types_json else []
    except (ValueError, RecursionError):  # not JSON, or nested deeper than the json module recurses
        return None, False
    if not isinstance(dims, list) or len(dims) < 2 or not isinstance(dims[1], list):
        return None, False
    src = dims[1]
    if len(src) == 0:
        return None, True
    types = [t if isinstance(t, str) else "" for t in types] if isinstance(types, list) else []
    elem = DTYPE_BYTES.get(types[1] if len(types) > 1 else "", None)
    if elem is None:
        elem = DTYPE_BYTES.get(types[0], None) if types else None
    if elem is None or not all(type(x) is int and x >= 0 for x in src):
        return None, False
    size = math.prod(src) * elem  # exact: np.prod in int64 wraps around on sizes past 2**63
    return (size, False) if size < 2**63 else (None, False)


def copies_in_steps(trace: Trace) -> pl.DataFrame:
    """The copies that belong to a step: the ones per-step figures count."""
    return copies(trace).filter(pl.col("step").is_not_null())


def copy_summary(table: pl.DataFrame) -> pl.DataFrame:
    """Copies grouped by kind and op chain: kind, op_chain, copy_class, hidden, count, bytes
    (summed), dur_ns. Hidden first, then by count; ties in a fixed order (kind, chain)."""
    if table.height == 0:
        return pl.DataFrame(
            schema={
                **{c: COPY_COLUMNS[c] for c in ("kind", "op_chain", "copy_class", "hidden")},
                "count": pl.UInt32,
                **{c: COPY_COLUMNS[c] for c in ("bytes", "dur_ns")},
            }
        )
    return (
        table.group_by("kind", "op_chain", "copy_class", "hidden")
        .agg(
            pl.len().alias("count"),
            # unknown sizes stay unknown rather than summing to 0
            pl.when(pl.col("bytes").is_not_null().any()).then(pl.col("bytes").sum()).alias("bytes"),
            pl.col("dur_ns").sum().alias("dur_ns"),
        )
        .sort(
            [
                pl.col("hidden"),
                pl.col("count"),
                pl.col("kind"),
                pl.col("op_chain").list.join(CHAIN_SEP),
                pl.col("copy_class"),
            ],
            descending=[True, True, False, False, False],
            nulls_last=True,
        )
    )
