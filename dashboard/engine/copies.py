"""Copies: every GPU memcpy and copy kernel (or, in a CPU-only trace, every tensor aten::copy_),
attributed to the chain of CPU ops that caused it, e.g. aten::masked_fill > aten::clone > aten::copy_.

A copy is *hidden* when the op that started its chain is not one that asks for a copy
(aten::copy_, aten::to, aten::clone, ...): the copy was made inside another op, as the
out-of-place masked_fill does with its clone. Reading a value back to Python (aten::item in the
chain, as `if tensor:` does) is asked for, not hidden. A copy that only converts a Python scalar
(a 0-dim input, as `scores * 0.125` produces) is not a tensor copy and is left out.
"""

from __future__ import annotations

import json

import numpy as np
import polars as pl

from dashboard.engine.model import Trace, per_trace

# Outermost ops that ask for a copy: a copy under one of these is expected, not hidden.
REQUESTED_COPY_OPS = frozenset(
    {
        "aten::copy_", "aten::to", "aten::_to_copy", "aten::clone", "aten::contiguous",
        "aten::_local_scalar_dense", "aten::item", "aten::cpu", "aten::cuda", "aten::lift_fresh",
    }
)
# A chain through one of these reads a value back to Python (`.item()`, `if tensor:`): the user
# asked for that value, so its tiny device-to-host copy is a sync to know about, not a hidden copy.
SCALAR_READS = frozenset({"aten::item", "aten::_local_scalar_dense"})
# Ops that only wrap other ops: never the origin of a copy.
WRAPPER_OPS = (
    r"^(autograd::engine::evaluate_function: |CompiledFunction|TorchDynamo Cache Lookup|Torch-Compiled Region|"
    r"Pregraph bytecode|AOTDispatcher|## |DistributedDataParallel|nn\.Module: )|^[A-Za-z]+Backward\d*$"
)
COPY_KERNEL = r"direct_copy_kernel|copy_kernel|copy_device_to_device"
CHAIN_CATEGORIES = ("cpu_op",)
CHAIN_SEP = "\x1f"

# Element sizes for Input type strings as torch.profiler writes them.
DTYPE_BYTES: dict[str, int] = {
    "float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "int": 4,
    "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1, "c10::complex<float>": 8,
    "c10::complex<double>": 16, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1,
}

COPY_COLUMNS = {
    "id": pl.Int64, "step": pl.Int64, "kind": pl.String, "name": pl.String, "ts_ns": pl.Int64,
    "dur_ns": pl.Int64, "bytes": pl.Int64, "gbps": pl.Float64, "device": pl.Int64, "stream": pl.Int64,
    "op_chain": pl.List(pl.String), "origin": pl.String, "hidden": pl.Boolean,
}


@per_trace
def copies(trace: Trace) -> pl.DataFrame:
    """Every copy: id, step, kind (DtoD, HtoD, DtoH, PtoP, ..., 'kernel' for a copy kernel, 'cpu'
    in a CPU-only trace), name, ts_ns, dur_ns, bytes (null when unknown), gbps (GB/s), device,
    stream, op_chain (outermost op first), origin (the op that started the chain), hidden."""
    ev = trace.events
    if trace.has_gpu:
        found = ev.filter(
            (pl.col("cat") == "gpu_memcpy")
            | ((pl.col("cat") == "kernel") & pl.col("name").cast(pl.String).str.contains(COPY_KERNEL))
        ).with_columns(
            pl.when(pl.col("cat") == "gpu_memcpy").then(pl.col("kind")).otherwise(pl.lit("kernel")).alias("kind"),
            pl.col("launch").alias("anchor"),
        )
    else:
        found = ev.filter((pl.col("cat") == "cpu_op") & (pl.col("name") == "aten::copy_")).with_columns(
            pl.lit("cpu").alias("kind"), pl.col("id").alias("anchor")
        )
    if found.height == 0:
        return pl.DataFrame(schema=COPY_COLUMNS)
    paths = _op_paths(trace, found["anchor"].to_list())
    names = _names_of(trace, {node for path in paths for node in path})
    # joined then split in polars: building a list column element by element is slow
    joined = [CHAIN_SEP.join(names[node] for node in path) for path in paths]
    found = found.with_columns(
        pl.Series("op_chain", joined, dtype=pl.String).str.split(CHAIN_SEP).list.eval(pl.element().filter(pl.element() != ""))
    )
    found = _fill_bytes_from_shapes(trace, found, paths, names)
    # Only a 0-dim source converted by aten::to/_to_copy (`scores * 0.125`) is a scalar conversion;
    # a GPU memcpy is always kept, whatever its size.
    converts = pl.col("op_chain").list.eval(pl.element().is_in(["aten::to", "aten::_to_copy"])).list.any()
    found = found.filter(~(pl.col("scalar") & converts & (pl.col("cat") != "gpu_memcpy")))
    # The origin is the outermost op that is not a wrapper (autograd node, compiled region, ...).
    origin = pl.col("op_chain").list.eval(pl.element().filter(~pl.element().str.contains(WRAPPER_OPS))).list.first()
    return found.select(
        "id", "step", "kind", pl.col("name").cast(pl.String), "ts_ns", "dur_ns", "bytes",
        pl.when(pl.col("dur_ns") > 0).then(pl.col("bytes") / pl.col("dur_ns")).otherwise(None).alias("gbps"),
        "device", "stream", "op_chain",
        origin.alias("origin"),
        (
            origin.is_not_null()
            & ~origin.is_in(list(REQUESTED_COPY_OPS))
            & ~pl.col("op_chain").list.eval(pl.element().is_in(list(SCALAR_READS))).list.any()
        ).fill_null(False).alias("hidden"),
    )


def _op_paths(trace: Trace, anchors: list[int | None]) -> list[list[int]]:
    """For each anchor event id (a launch call or a CPU op), the ids of the cpu_ops that hold it,
    outermost first (the anchor itself included when it is a cpu_op; ProfilerStep left out).
    Walks parent links with numpy arrays only: no per-event Python objects."""
    ev = trace.events
    parent = ev["parent"].fill_null(-1).to_numpy()
    is_op = (ev["cat"].cast(pl.String).is_in(CHAIN_CATEGORIES) & ~ev["name"].cast(pl.String).str.starts_with("ProfilerStep#")).to_numpy()
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


def _names_of(trace: Trace, ids: set[int]) -> dict[int, str]:
    order = sorted(ids)
    return dict(zip(order, trace.events["name"].cast(pl.String).gather(order).to_list()))


def _fill_bytes_from_shapes(trace: Trace, found: pl.DataFrame, paths: list[list[int]], names: dict[int, str]) -> pl.DataFrame:
    """Bytes for copies that carry none (copy kernels, CPU copies), from the innermost
    aten::copy_'s Input Dims and Input type when shapes were recorded; and mark scalar copies."""
    inner = [next((node for node in reversed(path) if names[node] == "aten::copy_"), None) for path in paths]
    wanted = sorted({node for node in inner if node is not None})
    shapes = trace.events.select("input_dims", "input_types")[wanted] if wanted else None
    recorded = dict(zip(wanted, shapes.iter_rows())) if shapes is not None else {}
    sizes: dict[tuple[str, str | None], tuple[int | None, bool]] = {}
    shape_bytes: list[int | None] = []
    scalar: list[bool] = []
    for node in inner:
        dims, types = recorded.get(node, (None, None)) if node is not None else (None, None)
        if dims is None:
            shape_bytes.append(None)
            scalar.append(False)
            continue
        if (dims, types) not in sizes:
            sizes[(dims, types)] = _tensor_bytes(dims, types)
        size, is_scalar = sizes[(dims, types)]
        shape_bytes.append(size)
        scalar.append(is_scalar)
    return found.with_columns(
        pl.coalesce(pl.col("bytes"), pl.Series(shape_bytes, dtype=pl.Int64)).alias("bytes"),
        pl.Series("scalar", scalar, dtype=pl.Boolean),
    )


def _tensor_bytes(dims_json: str, types_json: str | None) -> tuple[int | None, bool]:
    """(bytes copied, is a 0-dim scalar copy) from copy_(self, src)'s recorded shapes."""
    try:
        dims = json.loads(dims_json)
        types = json.loads(types_json) if types_json else []
    except json.JSONDecodeError:
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
    if elem is None or not all(isinstance(x, int) for x in src):
        return None, False
    return int(np.prod(src, dtype=np.int64)) * elem, False


def copies_in_steps(trace: Trace) -> pl.DataFrame:
    """The copies that belong to a step: the ones per-step figures count."""
    return copies(trace).filter(pl.col("step").is_not_null())


def copy_summary(table: pl.DataFrame) -> pl.DataFrame:
    """Copies grouped by kind and op chain: kind, op_chain, hidden, count, bytes (summed), dur_ns."""
    if table.height == 0:
        return pl.DataFrame(schema={"kind": pl.String, "op_chain": pl.List(pl.String), "hidden": pl.Boolean, "count": pl.UInt32, "bytes": pl.Int64, "dur_ns": pl.Int64})
    return (
        table.group_by("kind", "op_chain", "hidden")
        .agg(
            pl.len().alias("count"),
            # unknown sizes stay unknown rather than summing to 0
            pl.when(pl.col("bytes").is_not_null().any()).then(pl.col("bytes").sum()).alias("bytes"),
            pl.col("dur_ns").sum().alias("dur_ns"),
        )
        .sort(["hidden", "count"], descending=[True, True])
    )

