"""Device work: what ran on the device per step, by kernel and by kernel family.

On a GPU trace the unit of device work is a kernel, GPU memcpy or GPU memset. In a CPU-only trace
(no GPU events at all) it is the leaf cpu_op: an op that does work (not a view, an allocation or
bookkeeping) and holds no other such op.
Times are in ns unless a column name says otherwise.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from dashboard.engine.model import GPU_CATEGORIES, Trace, per_trace

UNIT_KERNEL = "kernel"
UNIT_LEAF_OP = "leaf cpu_op"

# Kernel family by name, first match wins (case-insensitive regex). One table for GPU kernels and
# for CPU ops, so that both kinds of trace speak the same families.
FAMILY_PATTERNS: tuple[tuple[str, str], ...] = (
    ("fused attention", r"flash_fwd|flash_bwd|flash_attn|fmha|native_sdpa|scaled_dot_product|efficient_attention|attention_kernel|_attention|attn_fwd|attn_bwd"),
    ("communication", r"nccl|rccl|allreduce|all_reduce|allgather|all_gather|reduce_scatter|alltoall|c10d::"),
    ("memset", r"^memset|aten::zero_|aten::fill_"),
    ("copy", r"^memcpy|direct_copy_kernel|copy_kernel|copy_device|aten::copy_|aten::clone|aten::contiguous|catarraybatchedcopy|aten::cat\b"),
    ("softmax", r"softmax"),
    ("gemm", r"gemm|cutlass|cublas|nvjet|wgmma|xmma|cijk_|matmul|aten::(mm|bmm|addmm|baddbmm|linear|matmul)\b|triton_tem_fused_(mm|bmm|addmm)"),
    ("reduction", r"reduce|reduction|layer_norm|batch_norm|group_norm|rms_norm|instance_norm|aten::norm\b|vector_norm|splitk|aten::(sum|mean|max|min|amax|amin|argmax|prod|var|std)\b|triton_red|triton_per|cub::"),
    ("elementwise", r"elementwise|triton_poi|aten::(add|sub|mul|div|masked_fill|where|exp|tanh|relu|gelu|silu|neg|pow|sqrt|rsqrt|tril|triu|sigmoid|clamp|ge|le|lt|gt|eq|ne|logical_\w+)_?\b"),
)

# cpu_ops that do no work of their own, never counted as device work on CPU-only traces:
# profiler and torch.compile bookkeeping, and ops that only make a new view or allocate.
BOOKKEEPING_OPS = r"^(TorchDynamo Cache Lookup|Torch-Compiled Region|Pregraph bytecode|AOTDispatcher|ProfilerStep#|## )"
METADATA_OPS = (
    r"^aten::(view|_unsafe_view|_reshape_alias|reshape|view_as|as_strided|transpose|t|permute|expand|expand_as|"
    r"unsqueeze|squeeze|slice|select|narrow|split|split_with_sizes|chunk|unbind|detach|alias|resolve_conj|"
    r"resolve_neg|empty|empty_like|empty_strided|lift_fresh|contiguous|flatten|unflatten|numpy_T|"
    r"broadcast_tensors|result_type|size|stride|dim|is_same_size|lift)$"
)


def family_expr(name: pl.Expr, cat: pl.Expr | None = None) -> pl.Expr:
    """A polars expression that maps event names to a kernel family (see FAMILY_PATTERNS).
    GPU memcpy events are 'copy' and GPU memset events are 'memset' whatever their name."""
    lowered = name.cast(pl.String).str.to_lowercase()
    expr = pl.when(pl.lit(False)).then(pl.lit(None, dtype=pl.String))
    if cat is not None:
        expr = pl.when(cat == "gpu_memcpy").then(pl.lit("copy")).when(cat == "gpu_memset").then(pl.lit("memset"))
    for family, pattern in FAMILY_PATTERNS:
        expr = expr.when(lowered.str.contains(pattern)).then(pl.lit(family))
    return expr.otherwise(pl.lit("other"))


def step_count(trace: Trace) -> int:
    """Number of steps (1 for a trace without ProfilerStep, which is one implicit step)."""
    return max(trace.steps.height, 1)


def work_unit(trace: Trace) -> str:
    """'kernel' when the trace has GPU events, else 'leaf cpu_op'."""
    return UNIT_KERNEL if trace.has_gpu else UNIT_LEAF_OP


@per_trace
def work_events(trace: Trace) -> pl.DataFrame:
    """The units of device work with their family: id, step, cat, name, family, ts_ns, dur_ns,
    device, stream. Kernels/memcpy/memset on a GPU trace; leaf cpu_ops on a CPU-only trace."""
    ev = trace.events
    if trace.has_gpu:
        work = ev.filter(pl.col("cat").is_in(GPU_CATEGORIES))
    else:
        work = leaf_work_ops(trace)
    return work.select(
        "id", "step", "cat", "name", family_expr(pl.col("name"), pl.col("cat")).alias("family"),
        "ts_ns", "dur_ns", "device", "stream",
    )


def cpu_ops(trace: Trace) -> pl.DataFrame:
    """All cpu_ops except profiler and torch.compile bookkeeping."""
    return trace.events.filter(
        (pl.col("cat") == "cpu_op") & ~pl.col("name").cast(pl.String).str.contains(BOOKKEEPING_OPS)
    )


@per_trace
def leaf_work_ops(trace: Trace) -> pl.DataFrame:
    """The units of work of a CPU-only trace: ops that do work (not views, allocations or
    bookkeeping) and hold no other such op. aten::matmul is not one (its aten::bmm is);
    aten::_scaled_dot_product_flash_attention_for_cpu is (its children only allocate and view)."""
    ops = cpu_ops(trace).filter(~pl.col("name").cast(pl.String).str.contains(METADATA_OPS))
    parent = trace.events["parent"].fill_null(-1).to_numpy()
    holds_work = np.zeros(trace.events.height, dtype=bool)
    frontier = parent[ops["id"].to_numpy()]
    while True:
        frontier = np.unique(frontier[frontier >= 0])
        frontier = frontier[~holds_work[frontier]]
        if frontier.size == 0:
            break
        holds_work[frontier] = True
        frontier = parent[frontier]
    return ops.filter(~pl.Series(holds_work[ops["id"].to_numpy()]))


@per_trace
def per_step(trace: Trace) -> pl.DataFrame:
    """One row per step: name, step, kernel, gpu_memcpy, gpu_memset, work (units of device work),
    busy_ns (union of device work intervals on the busiest device; on a CPU-only trace the union
    of all op intervals, since a fused op's own time is not in its leaves), dur_ns (the step's
    CPU span)."""
    work = work_events(trace)
    counts = work.group_by("step").agg(
        (pl.col("cat") == "kernel").sum().alias("kernel"),
        (pl.col("cat") == "gpu_memcpy").sum().alias("gpu_memcpy"),
        (pl.col("cat") == "gpu_memset").sum().alias("gpu_memset"),
        pl.len().alias("work"),
    )
    busy = busy_time(work if trace.has_gpu else cpu_ops(trace))
    table = (
        trace.steps.select("name", "step", "dur_ns")
        .join(counts, on="step", how="left")
        .join(busy, on="step", how="left")
        .with_columns(pl.col("kernel", "gpu_memcpy", "gpu_memset", "work", "busy_ns").fill_null(0))
    )
    return table.select("name", "step", "kernel", "gpu_memcpy", "gpu_memset", "work", "busy_ns", "dur_ns")


def busy_time(work: pl.DataFrame) -> pl.DataFrame:
    """Per step: the length of the union of work intervals on each device (ns), and of those the
    busiest device's: overlapping kernels on two streams count once, and N GPUs working side by
    side take the time of one, not N times it."""
    device = pl.col("device").fill_null(-1)
    return (
        work.filter(pl.col("step").is_not_null())
        .with_columns(device.alias("dev"), (pl.col("ts_ns") + pl.col("dur_ns")).alias("end_ns"))
        .sort("step", "dev", "ts_ns")
        .with_columns(pl.col("end_ns").cum_max().shift(1).over("step", "dev").alias("covered"))
        .with_columns(
            (pl.col("end_ns") - pl.max_horizontal("ts_ns", pl.col("covered").fill_null(0))).clip(lower_bound=0).alias("new_ns")
        )
        .group_by("step", "dev")
        .agg(pl.col("new_ns").sum())
        .group_by("step")
        .agg(pl.col("new_ns").max().alias("busy_ns"))
    )


@per_trace
def family_per_step(trace: Trace) -> pl.DataFrame:
    """Per step and family: count and total_ns of device work."""
    return (
        work_events(trace)
        .filter(pl.col("step").is_not_null())
        .group_by("step", "family")
        .agg(pl.len().alias("count"), pl.col("dur_ns").sum().alias("total_ns"))
        .sort("step", "family")
    )


@per_trace
def kernel_table(trace: Trace) -> pl.DataFrame:
    """One row per kernel name (leaf op name on CPU traces) over all steps: name, family, count,
    per_step (count / steps), total_ns, mean_ns, share (of all device work time, 0..1)."""
    work = work_events(trace).filter(pl.col("step").is_not_null())
    steps = step_count(trace)
    total = work["dur_ns"].sum() or 1
    return (
        work.group_by("name", "family")
        .agg(pl.len().alias("count"), pl.col("dur_ns").sum().alias("total_ns"))
        .with_columns(
            pl.col("name").cast(pl.String),
            (pl.col("count") / steps).alias("per_step"),
            (pl.col("total_ns") / pl.col("count")).alias("mean_ns"),
            (pl.col("total_ns") / total).alias("share"),
        )
        .sort("total_ns", descending=True)
        .select("name", "family", "count", "per_step", "total_ns", "mean_ns", "share")
    )


def kernel_delta(base: Trace, other: Trace) -> pl.DataFrame:
    """Kernels per step in `other` against `base`: name, family, base_per_step, other_per_step,
    delta_per_step, base_mean_ns, other_mean_ns, change ('added', 'removed', 'more', 'fewer',
    'slower', 'faster', 'same'). Slower/faster use a 5% threshold on the mean duration."""
    a = kernel_table(base).select("name", "family", pl.col("per_step").alias("base_per_step"), pl.col("mean_ns").alias("base_mean_ns"))
    b = kernel_table(other).select("name", "family", pl.col("per_step").alias("other_per_step"), pl.col("mean_ns").alias("other_mean_ns"))
    joined = a.join(b, on=["name", "family"], how="full", coalesce=True).with_columns(
        pl.col("base_per_step", "other_per_step").fill_null(0.0)
    )
    ratio = pl.col("other_mean_ns") / pl.col("base_mean_ns")
    change = (
        pl.when(pl.col("base_per_step") == 0).then(pl.lit("added"))
        .when(pl.col("other_per_step") == 0).then(pl.lit("removed"))
        .when(pl.col("other_per_step") > pl.col("base_per_step")).then(pl.lit("more"))
        .when(pl.col("other_per_step") < pl.col("base_per_step")).then(pl.lit("fewer"))
        .when(ratio > 1.05).then(pl.lit("slower"))
        .when(ratio < 0.95).then(pl.lit("faster"))
        .otherwise(pl.lit("same"))
    )
    return (
        joined.with_columns((pl.col("other_per_step") - pl.col("base_per_step")).alias("delta_per_step"), change.alias("change"))
        .select("name", "family", "base_per_step", "other_per_step", "delta_per_step", "base_mean_ns", "other_mean_ns", "change")
        .sort(pl.col("delta_per_step").abs(), descending=True)
    )
