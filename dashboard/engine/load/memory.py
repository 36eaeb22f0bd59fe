"""The memory table of a trace recorded with profile_memory=True (Trace.memory): the loader's
"[memory]" events in time order, each with its step and the op that holds it. What the analyses
read of them is analyses/memory.py."""

from __future__ import annotations

import numpy as np
import polars as pl

from dashboard.engine.load.steps import innermost_holders
from dashboard.engine.model.columns import series
from dashboard.engine.model.trace import MEMORY_SCHEMA, empty_memory


def memory_table(raw: pl.DataFrame | None, events: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """The loader's memory events (file order; ts_ns relative to the trace start; pid, tid,
    device_type, device_id, bytes, total_allocated, total_reserved, addr) -> Trace.memory:
    sorted by (ts_ns, file order), with `step` (the ProfilerStep whose span [start, end) holds
    ts_ns, as for a CPU event) and `op` (the innermost cpu_op of the same (pid, tid) lane that
    holds ts_ns: op.ts <= ts < op.end, by the nesting rule of steps.nesting). `events` and `steps`
    are the trace's tables. MEMORY_SCHEMA's columns, no rows when `raw` is None or empty."""
    if raw is None or raw.height == 0:
        return empty_memory()
    frame = (
        raw.with_row_index("order")
        .with_columns(pl.col("device_type", "device_id").cast(pl.Int32, strict=False))
        .sort("ts_ns", "order", maintain_order=True)
    )
    ts = frame["ts_ns"].to_numpy()
    frame = frame.with_columns(_steps_of(ts, steps).alias("step"), _ops_of(frame, events).alias("op"))
    return frame.select(pl.col(name).cast(dtype) for name, dtype in MEMORY_SCHEMA.items())


def _steps_of(ts: np.ndarray, steps: pl.DataFrame) -> pl.Series:
    """The step whose span holds each time (ns), null where none does (a binary search of the
    step starts, as steps.assign_steps finds a CPU event's)."""
    spans = steps.select("start_ns", "end_ns", "step").sort("start_ns", maintain_order=True)
    start, end, number = (spans[c].to_numpy() for c in ("start_ns", "end_ns", "step"))
    span = np.searchsorted(start, ts, side="right") - 1
    inside = span >= 0
    inside[inside] = ts[inside] < end[span[inside]]
    values = number[np.maximum(span, 0)] if len(number) else np.zeros(len(ts), dtype=np.int64)
    return series("step", values.astype(np.int64), valid=inside)


def _ops_of(frame: pl.DataFrame, events: pl.DataFrame) -> pl.Series:
    """For each memory event of `frame` (in its row order), the name of the innermost cpu_op of its
    (pid, tid) that holds its ts_ns, or null. The cpu_ops of the threads that have memory events and
    the memory events (zero-length: they hold nothing) are sorted together by (lane, ts, -duration,
    ops before memory events at one time, file order) and handed to steps.innermost_holders."""
    # lanes joined as text (polars before 1.32 refuses to compare the Categoricals of two frames);
    # a missing pid or tid is a lane like any other ("\0": no text a trace writes)
    thread = [pl.col(c).cast(pl.String).fill_null("\0") for c in ("pid", "tid")]
    lanes = frame.select(thread).unique(maintain_order=True).with_row_index("lane")
    points = frame.select(
        pl.int_range(0, pl.len(), dtype=pl.Int64).alias("row"),
        *thread,
        "ts_ns",
        pl.lit(0, dtype=pl.Int64).alias("dur"),
    ).join(lanes, on=["pid", "tid"], how="left", maintain_order="left")
    ops = (
        events.lazy()
        .filter(pl.col("cat") == "cpu_op")
        .select(pl.col("id").alias("row"), *thread, "ts_ns", pl.col("dur_ns").alias("dur"))
        .join(lanes.lazy(), on=["pid", "tid"], how="inner", maintain_order="left")
        .collect()
    )
    n_ops = ops.height
    lane = np.concatenate([ops["lane"].to_numpy(), points["lane"].to_numpy()]).astype(np.int64)
    ts = np.concatenate([ops["ts_ns"].to_numpy(), points["ts_ns"].to_numpy()])
    dur = np.concatenate([ops["dur"].to_numpy(), points["dur"].to_numpy()])
    kind = np.concatenate([np.zeros(n_ops, dtype=np.int8), np.ones(points.height, dtype=np.int8)])
    row = np.concatenate([ops["row"].to_numpy(), points["row"].to_numpy()])
    order = np.lexsort((row, kind, -dur, ts, lane))
    holder = innermost_holders(lane[order], ts[order], (ts + dur)[order])
    at = np.full(len(order), -1, dtype=np.int64)
    at[order] = np.where(
        holder >= 0, order[np.maximum(holder, 0)], -1
    )  # each row's holder, as an index before the sort
    held = at[n_ops:]  # the memory events', in the frame's row order; an index < n_ops is an op
    names = events["name"].gather(
        series("id", ops["row"].to_numpy()[np.maximum(held, 0)] if n_ops else np.zeros(len(held), dtype=np.int64))
    )
    return names.alias("op").to_frame().select(pl.when(series("held", held >= 0)).then(pl.col("op"))).to_series()
