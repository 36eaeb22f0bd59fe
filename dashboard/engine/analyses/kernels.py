"""Device work: what ran on the device per step, by kernel and by kernel family.

On a GPU trace the unit of device work is a kernel, GPU memcpy or GPU memset. In a CPU-only trace
(no GPU events at all) it is the leaf cpu_op: an op that does work (not a view, an allocation or
bookkeeping) and holds no other such op. The units are what is counted; the time of a CPU-only
trace is every work op's self time (work_time), so that an op that computes and also holds one
(aten::mul holding the scalar's aten::to) keeps its own time in the family breakdown.
Times are in ns unless a column name says otherwise.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

# The family table lives in rules/families.py with the other name rules; re-exported here.
from dashboard.engine.rules import FAMILIES, FAMILY_RULES, FamilyRule, family_rules, is_fused_attention  # noqa: F401
from dashboard.engine.analyses.lanes import Lanes
from dashboard.engine.model.columns import series
from dashboard.engine.model.trace import EVENTS_SCHEMA, GPU_CATEGORIES, Trace, events_columns, per_trace

# What a name is (family, backend, op kind) is decided once per trace in classes.py; family_of and
# family_expr re-exported.
from dashboard.engine.analyses.classes import (  # noqa: F401
    BOOKKEEPING_KINDS,
    WORKLESS_KINDS,
    family_column,
    family_expr,
    family_of,
    name_is,
)

# cpu_ops with no work of their own, never device work on CPU-only traces: rules/ops.py
# (NOT_MODEL_OP_RULES' bookkeeping and compiled regions; views and allocations). Re-exported.
from dashboard.engine.rules.ops import BOOKKEEPING_OPS, METADATA_OPS  # noqa: F401
from dashboard.engine.model.constants import UNIT_KERNEL  # noqa: F401  (defined light for the CLI; re-exported)

UNIT_LEAF_OP = "leaf cpu_op"

# The tables' columns (the catalogue of analyses, docs/analyses.md); the events' columns keep the events' dtypes.
WORK_EVENTS_SCHEMA = {
    **events_columns("id", "step", "cat", "name"),
    "family": pl.String,
    **events_columns("ts_ns", "dur_ns", "device", "stream"),
}
WORK_TIME_SCHEMA = {
    **events_columns("id", "step", "name"),
    "family": pl.String,
    "time_ns": pl.Int64,
    "unit": pl.Boolean,
}
PER_STEP_SCHEMA = {
    "name": pl.String,
    "step": pl.Int64,
    "kernel": pl.UInt32,
    "gpu_memcpy": pl.UInt32,
    "gpu_memset": pl.UInt32,
    "work": pl.UInt32,
    "busy_ns": pl.Int64,
    "dur_ns": pl.Int64,
}
FAMILY_PER_STEP_SCHEMA = {"step": pl.Int64, "family": pl.String, "count": pl.UInt32, "total_ns": pl.Int64}
KERNEL_TABLE_SCHEMA = {
    "name": pl.String,
    "family": pl.String,
    "count": pl.UInt32,
    "per_step": pl.Float64,
    "total_ns": pl.Int64,
    "mean_ns": pl.Float64,
    "share": pl.Float64,
}


def step_count(trace: Trace) -> int:
    """Number of steps (1 for a trace without ProfilerStep, which is one implicit step)."""
    return max(trace.steps.height, 1)


def work_unit(trace: Trace) -> str:
    """'kernel' when the trace has GPU events, else 'leaf cpu_op'."""
    return UNIT_KERNEL if trace.has_gpu else UNIT_LEAF_OP


@per_trace(schema=WORK_EVENTS_SCHEMA)
def work_events(trace: Trace) -> pl.DataFrame:
    """The units of device work with their family: id, step, cat, name, family, ts_ns, dur_ns,
    device, stream. Kernels/memcpy/memset on a GPU trace; leaf cpu_ops on a CPU-only trace."""
    ev = trace.events
    columns = ("id", "step", "cat", "name", "ts_ns", "dur_ns", "device", "stream")
    if trace.has_gpu:
        # lazy: only the columns selected are filtered
        work = ev.lazy().filter(pl.col("cat").is_in(GPU_CATEGORIES)).select(columns).collect()
    else:
        work = leaf_work_ops(trace).select(columns)
    return work.select(*columns[:4], family_column(trace, work["name"]).alias("family"), *columns[4:])


def cpu_ops(trace: Trace) -> pl.DataFrame:
    """All cpu_ops except profiler and torch.compile bookkeeping."""
    return trace.events.filter((pl.col("cat") == "cpu_op") & ~name_is(trace, "op_kind", BOOKKEEPING_KINDS))


def work_ops(trace: Trace) -> pl.DataFrame:
    """The cpu_ops that do work: not profiler or torch.compile bookkeeping, not views or allocations."""
    return trace.events.filter((pl.col("cat") == "cpu_op") & ~name_is(trace, "op_kind", WORKLESS_KINDS))


@per_trace(schema=EVENTS_SCHEMA)
def leaf_work_ops(trace: Trace) -> pl.DataFrame:
    """The units of work of a CPU-only trace: ops that do work (not views, allocations or
    bookkeeping) and hold no other such op. aten::matmul is not one (its aten::bmm is);
    aten::_scaled_dot_product_flash_attention_for_cpu is (its children only allocate and view)."""
    ops = work_ops(trace)
    parent = trace.events["parent"].fill_null(-1).to_numpy()
    holds_work = np.zeros(trace.events.height, dtype=bool)
    frontier = parent[ops["id"].to_numpy()]
    while True:
        frontier = frontier[frontier >= 0]
        frontier = frontier[
            ~holds_work[frontier]
        ]  # (np.unique would import numpy.ma: setting a flag twice is harmless)
        if frontier.size == 0:
            break
        holds_work[frontier] = True
        frontier = parent[frontier]
    return ops.filter(~series("holds_work", holds_work[ops["id"].to_numpy()]))


@per_trace(schema=WORK_TIME_SCHEMA)
def work_time(trace: Trace) -> pl.DataFrame:
    """Where the work's time goes: id, step, name, family, time_ns, unit (one of work_events'
    units of work, the ones that are counted).

    On a GPU trace, work_events' rows with time_ns = dur_ns. On a CPU-only trace, every work op
    (work_ops: leaf_work_ops' units and the work ops that hold them) with its self time: its
    duration less the durations of the work ops it holds nearest (its children, or a view's or an
    allocation's children: a view's or an allocation's own time stays with the op that holds it),
    at least 0. So the time of a step's work ops adds up to that of its outermost work ops, and
    aten::mul holding the scalar's aten::to keeps the multiply's time, which its leaves leave out."""
    if trace.has_gpu:
        return work_events(trace).select(
            "id", "step", "name", "family", pl.col("dur_ns").alias("time_ns"), pl.lit(True).alias("unit")
        )
    ops = work_ops(trace)
    ids = ops["id"].to_numpy()
    dur = ops["dur_ns"].to_numpy()
    parent = trace.events["parent"].fill_null(-1).to_numpy()
    is_work = np.zeros(trace.events.height, dtype=bool)
    is_work[ids] = True
    # each work op's nearest work-op ancestor (-1: none), climbing through the ops that are not work
    holder = parent[ids]
    climbing = np.flatnonzero(holder >= 0)
    climbing = climbing[~is_work[holder[climbing]]]
    while climbing.size:
        holder[climbing] = parent[holder[climbing]]
        climbing = climbing[holder[climbing] >= 0]
        climbing = climbing[~is_work[holder[climbing]]]
    held = series("holder", holder, valid=holder >= 0)
    by_holder = (
        pl.DataFrame([held, series("held_ns", dur)])  # through Arrow: pl.Series(numpy) imports numpy.ma
        .drop_nulls("holder")
        .group_by("holder")
        .agg(pl.col("held_ns").sum(), pl.len().alias("holds"))
    )
    return (
        ops.select("id", "step", "name", family_column(trace, ops["name"]).alias("family"), "dur_ns")
        .join(by_holder, left_on="id", right_on="holder", how="left", maintain_order="left")
        .select(
            "id",
            "step",
            "name",
            "family",
            (pl.col("dur_ns") - pl.col("held_ns").fill_null(0)).clip(lower_bound=0).alias("time_ns"),
            pl.col("holds").is_null().alias("unit"),
        )
    )


@per_trace(schema=PER_STEP_SCHEMA)
def per_step(trace: Trace) -> pl.DataFrame:
    """One row per step: name, step, kernel, gpu_memcpy, gpu_memset, work (units of device work),
    busy_ns (union of device work intervals on the busiest device; on a CPU-only trace the union
    of all op intervals, since a fused op's own time is not in its leaves), dur_ns (the step's
    CPU span)."""
    work = work_events(trace)
    counts = (
        work.lazy()  # (a third faster than the eager group_by in polars 2.1)
        .group_by("step")
        .agg(
            (pl.col("cat") == "kernel").sum().alias("kernel"),
            (pl.col("cat") == "gpu_memcpy").sum().alias("gpu_memcpy"),
            (pl.col("cat") == "gpu_memset").sum().alias("gpu_memset"),
            pl.len().alias("work"),
        )
        .collect()
    )
    if trace.has_gpu:
        # the same unions as step_device_times' busy_ns (the step's work, per device), which the
        # summary computes anyway: read there, not sorted and swept a second time
        busy = step_device_times(trace).group_by("step").agg(pl.col("busy_ns").max())
    else:
        busy = busy_time(cpu_ops(trace))
    table = (
        trace.steps.select("name", "step", "dur_ns")
        .join(counts, on="step", how="left", maintain_order="left")  # the steps' order, not one a join happens to keep
        .join(busy, on="step", how="left", maintain_order="left")
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
            (pl.col("end_ns") - pl.max_horizontal("ts_ns", pl.col("covered").fill_null(0)))
            .clip(lower_bound=0)
            .alias("new_ns")
        )
        .group_by("step", "dev")
        .agg(pl.col("new_ns").sum())
        .group_by("step")
        .agg(pl.col("new_ns").max().alias("busy_ns"))
    )


@per_trace(schema=FAMILY_PER_STEP_SCHEMA)
def family_per_step(trace: Trace) -> pl.DataFrame:
    """Per step and family: count (units of work: kernels, or leaf ops on a CPU-only trace) and
    total_ns (device time; on a CPU-only trace the work ops' self time, work_time, so a step's
    families add up to its outermost work ops' time; a family of ops that only hold others, as
    aten::to's 'other', has count 0)."""
    return (
        work_time(trace)
        .filter(pl.col("step").is_not_null())
        .group_by("step", "family")
        .agg(pl.col("unit").sum().cast(pl.UInt32).alias("count"), pl.col("time_ns").sum().alias("total_ns"))
        .sort("step", "family")
    )


@per_trace(schema=KERNEL_TABLE_SCHEMA)
def kernel_table(trace: Trace) -> pl.DataFrame:
    """One row per kernel name over all steps: name, family, count, per_step (count / steps),
    total_ns, mean_ns, share (of all device work time, 0..1). On a CPU-only trace one row per work
    op name (work_time: the leaf ops and the ops that hold them), count its calls and total_ns its
    self time, so the shares add up to 1 over every op that took time."""
    work = work_time(trace).filter(pl.col("step").is_not_null())
    steps = step_count(trace)
    total = work["time_ns"].sum() or 1
    return (
        work.group_by("name", "family")
        .agg(pl.len().alias("count"), pl.col("time_ns").sum().alias("total_ns"))
        .with_columns(
            pl.col("name").cast(pl.String),
            (pl.col("count") / steps).alias("per_step"),
            (pl.col("total_ns") / pl.col("count")).alias("mean_ns"),
            (pl.col("total_ns") / total).alias("share"),
        )
        .sort(["total_ns", "name", "family"], descending=[True, False, False], nulls_last=True)  # ties in a fixed order
        .select("name", "family", "count", "per_step", "total_ns", "mean_ns", "share")
    )


STEP_DEVICE_SCHEMA: dict[str, Any] = {  # step_device_times' columns (ns)
    "step": pl.Int64,
    "device": pl.Int64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "span_ns": pl.Int64,
    "busy_ns": pl.Int64,
    "idle_ns": pl.Int64,
    "comm_ns": pl.Int64,
}


@per_trace(schema=STEP_DEVICE_SCHEMA)
def step_device_times(trace: Trace) -> pl.DataFrame:
    """Per step and device, on the device's own timeline: the step's device work is the device
    events it launched (steps.assign_steps), wherever and whenever they ran, so a step whose CPU
    ran ahead is measured by its own work, not cut to its CPU span. Columns (ns): step, device,
    start_ns and end_ns (the work's first start and last end), span_ns (end - start), busy_ns (the
    union of the work's intervals), idle_ns (the longest stretch inside the span where none of the
    step's work runs), comm_ns (the union of its collectives: a subset of the same work, so never
    more than busy_ns). Every share the checks give has numerator and denominator from this one
    set of events."""
    schema = STEP_DEVICE_SCHEMA
    if not trace.has_gpu or trace.steps.height == 0:
        return pl.DataFrame(schema=schema)
    work = (
        work_events(trace)
        .lazy()  # lazy: the names and families are not filtered, only what the sweep reads
        .filter(pl.col("step").is_not_null())
        .select(
            "step",
            pl.col("device").fill_null(-1).cast(pl.Int64),
            "ts_ns",
            "dur_ns",
            (pl.col("family") == "communication").alias("comm"),
            "id",
        )
        .collect()
    )
    times = _union_gaps(work).join(
        _union_gaps(work.filter(pl.col("comm"))).select("step", "device", pl.col("busy_ns").alias("comm_ns")),
        on=["step", "device"],
        how="left",
    )
    return (
        times.with_columns(pl.col("comm_ns").fill_null(0), (pl.col("end_ns") - pl.col("start_ns")).alias("span_ns"))
        .select(*schema)
        .sort("step", "device")
        .cast(schema)
    )


def _union_gaps(work: pl.DataFrame) -> pl.DataFrame:
    """Per (step, device) of work events: start_ns, end_ns, busy_ns (the length of the union of
    their intervals) and idle_ns (the longest gap between the merged intervals)."""
    lanes = Lanes(work, ("step", "device"))
    ts, end, first = lanes.ts, lanes.end, lanes.first
    covered = np.where(first, ts, lanes.covered)  # a lane's first event follows nothing
    new = np.maximum(end - np.maximum(ts, covered), 0)  # what each event adds to the union
    gap = np.maximum(ts - covered, 0)
    return pl.DataFrame(
        [
            *lanes.keys(work, "step", "device"),
            series("start_ns", ts[lanes.starts]),  # the lanes are in time order
            series("end_ns", lanes.per_lane(end, np.maximum)),
            series("busy_ns", lanes.per_lane(new, np.add)),
            series("idle_ns", lanes.per_lane(gap, np.maximum)),
        ]
    )
