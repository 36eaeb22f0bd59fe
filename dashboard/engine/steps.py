"""Nesting on each thread, ProfilerStep spans, and which step each event belongs to.

A GPU event (kernel, gpu_memcpy, gpu_memset) belongs to the step whose CPU span holds its launch
(the cuda_runtime/cuda_driver call with the same correlation); a CPU event belongs to the step
that contains its start. A trace without ProfilerStep gets one implicit step over the whole trace.
"""

from __future__ import annotations

import re

import numpy as np
import polars as pl

from dashboard.engine.model import GPU_CATEGORIES, Trace

STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
# Python frames interleave with ops on the same thread in some traces; they nest on a lane of their own.
_OWN_LANE = ("python_function",)


def nesting(frame: pl.DataFrame) -> pl.DataFrame:
    """Add depth (0 = outermost) and parent (id of the innermost enclosing event) per thread.

    The frame must be sorted by (pid, tid, ts_ns, -dur_ns) with id = row number. Vectorized: for
    properly nested spans, an event's depth is the number of earlier-starting spans on its thread
    minus those that ended at or before its start; its parent is the last earlier span one level up.
    """
    n = frame.height
    lane = (
        frame.select(
            pl.struct(
                "pid", "tid", pl.col("cat").cast(pl.String).is_in(_OWN_LANE).alias("own")
            ).rank("dense").cast(pl.Int64)
        )
        .to_series()
        .to_numpy()
    )
    ts = frame["ts_ns"].to_numpy()
    end = ts + frame["dur_ns"].to_numpy()
    # Python frames sort among the ops of their thread; order rows by lane so lanes are contiguous.
    order = np.lexsort((-(end - ts), ts, lane))
    lane_o, ts_o, end_o = lane[order], ts[order], end[order]
    depth_o = np.empty(n, dtype=np.int64)
    bounds = np.flatnonzero(np.diff(lane_o)) + 1
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, n]):
        ends_sorted = np.sort(end_o[lo:hi])
        closed = np.searchsorted(ends_sorted, ts_o[lo:hi], side="right")
        closed -= end_o[lo:hi] == ts_o[lo:hi]  # a zero-length span does not close itself
        depth_o[lo:hi] = np.maximum(np.arange(hi - lo) - closed, 0)
    parent_o = np.full(n, -1, dtype=np.int64)
    positions = np.arange(n)
    for d in range(1, int(depth_o.max(initial=0)) + 1):
        here = positions[depth_o == d]
        above = positions[depth_o == d - 1]
        if not len(here) or not len(above):
            continue
        k = np.searchsorted(above, here) - 1
        ok = k >= 0
        cand = np.where(ok, above[np.maximum(k, 0)], -1)
        same_lane = ok & (lane_o[np.maximum(cand, 0)] == lane_o[here])
        parent_o[here] = np.where(same_lane, order[np.maximum(cand, 0)], -1)
    depth = np.empty(n, dtype=np.int64)
    parent = np.empty(n, dtype=np.int64)
    depth[order] = depth_o
    parent[order] = parent_o
    return frame.with_columns(
        pl.Series("depth", depth, dtype=pl.Int32),
        pl.Series("parent", parent, dtype=pl.Int64).replace(-1, None),
    )


def find_steps(frame: pl.DataFrame) -> pl.DataFrame:
    """The ProfilerStep#N spans on the CPU (not their gpu_user_annotation mirrors), in time order."""
    marks = (
        frame.filter(
            (pl.col("cat") != "gpu_user_annotation")
            & pl.col("name").cast(pl.String).str.contains(r"^ProfilerStep#\d+$")
        )
        .select(
            pl.col("name").cast(pl.String),
            pl.col("name").cast(pl.String).str.extract(r"#(\d+)$", 1).cast(pl.Int64).alias("step"),
            pl.col("ts_ns").alias("start_ns"),
            (pl.col("ts_ns") + pl.col("dur_ns")).alias("end_ns"),
            pl.col("dur_ns"),
        )
        .unique("step", keep="first")
        .sort("start_ns")
        .with_columns(pl.lit(False).alias("implicit"))
    )
    if marks.height:
        return marks
    end = frame.select((pl.col("ts_ns") + pl.col("dur_ns")).max()).item()
    return pl.DataFrame(
        {"name": ["whole trace (no ProfilerStep)"], "step": [0], "start_ns": [0], "end_ns": [end], "dur_ns": [end], "implicit": [True]},
        schema={"name": pl.String, "step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64, "dur_ns": pl.Int64, "implicit": pl.Boolean},
    )


def assign_steps(frame: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """Add `step`: GPU events through their launch (one whose launch is not in the trace belongs
    to no step), CPU events by their own start time. In the implicit step of a trace without
    ProfilerStep every event belongs to the one step, launched or not."""
    implicit = pl.lit(bool(steps["implicit"][0]))
    spans = steps.select("start_ns", "end_ns", "step").sort("start_ns")
    anchor = (
        frame.select(
            "id",
            pl.when(pl.col("cat").is_in(GPU_CATEGORIES) & ~implicit).then(pl.col("launch")).otherwise(pl.col("id")).alias("anchor"),
        )
        .join(frame.select(pl.col("id").alias("anchor"), pl.col("ts_ns").alias("anchor_ts")), on="anchor", how="left")
        .filter(pl.col("anchor_ts").is_not_null())
        .sort("anchor_ts")
    )
    placed = (
        anchor.join_asof(spans, left_on="anchor_ts", right_on="start_ns", strategy="backward")
        .filter(pl.col("anchor_ts") < pl.col("end_ns"))
        .select("id", "step")
    )
    return frame.join(placed, on="id", how="left", maintain_order="left")
