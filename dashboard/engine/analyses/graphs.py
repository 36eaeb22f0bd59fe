"""CUDA/HIP graph replays: one launch call (cudaGraphLaunch, hipGraphLaunch) replays many kernels,
all carrying the launch's correlation id. Each replayed kernel belongs to the step of its graph
launch and is blamed on the CPU op that holds that launch, if any.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from dashboard.engine.model.trace import GPU_CATEGORIES, LAUNCH_CATEGORIES, Trace, per_trace
from dashboard.engine.analyses.classes import names_where  # graph replays: rules.LAUNCH_CALLS' graph rows

GRAPH_REPLAY_SCHEMA: dict[str, Any] = {  # graph_replays' columns
    "launch": pl.Int64,
    "step": pl.Int64,
    "name": pl.String,
    "op": pl.String,
    "kernels": pl.UInt32,
    "device_ns": pl.Int64,
}


@per_trace(schema=GRAPH_REPLAY_SCHEMA)
def graph_replays(trace: Trace) -> pl.DataFrame:
    """One row per graph launch: launch (event id), step, name, op (the innermost cpu_op holding
    the launch, None when no op does), kernels (device events it replayed), device_ns (their
    summed duration). Sorted by the launch's time."""
    ev = trace.events
    schema = GRAPH_REPLAY_SCHEMA
    graph_names = names_where(trace, "launch", {"graph"}, LAUNCH_CATEGORIES)
    if not graph_names:
        return pl.DataFrame(schema=schema)
    launches = ev.select("id", "step", "cat", "name", "ts_ns").filter(
        pl.col("cat").is_in(LAUNCH_CATEGORIES) & pl.col("name").is_in(graph_names)
    )
    replayed = (
        ev.lazy()  # the device events first (a test of the categories' codes), then their launches
        .filter(pl.col("cat").is_in(GPU_CATEGORIES))
        .select("launch", "dur_ns")
        .collect()
        .filter(pl.col("launch").is_in(launches["id"].to_list()))
        .group_by("launch")
        .agg(pl.len().alias("kernels"), pl.col("dur_ns").sum().alias("device_ns"))
    )
    return (
        launches.select(pl.col("id").alias("launch"), "step", pl.col("name").cast(pl.String), "ts_ns")
        .with_columns(pl.Series("op", _holding_op(trace, launches["id"].to_numpy()), dtype=pl.String))
        .join(replayed, on="launch", how="left")
        .with_columns(pl.col("kernels").fill_null(0).cast(pl.UInt32), pl.col("device_ns").fill_null(0))
        .sort("ts_ns", "launch")
        .select(list(schema))
    )


def _holding_op(trace: Trace, ids: np.ndarray) -> list[str | None]:
    """For each event id: the name of the innermost cpu_op that holds it (None when none does)."""
    parent = trace.events["parent"].fill_null(-1).to_numpy()
    is_op = (trace.events["cat"] == "cpu_op").to_numpy()
    holders: list[int | None] = []
    for node in ids:
        node = int(parent[node])
        while node >= 0 and not is_op[node]:
            node = int(parent[node])
        holders.append(node if node >= 0 else None)
    # the holders' names only, in one gather (a null index gives a null name): not the whole column as text
    return trace.events["name"].gather(pl.Series(holders, dtype=pl.Int64)).cast(pl.String).to_list()


def replay_share(trace: Trace) -> dict[str, Any]:
    """How much of a trace's device time graph launches replayed: {"kernels", "device_us", "share"
    (of every device event's time; None without device time)}: time no op of this trace explains
    (compare.graph_source attributes it through a source trace), which is neither idle nor "no ops"."""
    table = graph_replays(trace)
    device = trace.events.lazy().filter(pl.col("cat").is_in(GPU_CATEGORIES))  # lazy: one column filtered
    total = int(device.select(pl.col("dur_ns").sum()).collect().item() or 0)
    replayed = int(table["device_ns"].sum() or 0) if table.height else 0
    return {
        "kernels": int(table["kernels"].sum() or 0) if table.height else 0,
        "device_us": round(replayed / 1e3, 3),
        "share": round(replayed / total, 4) if total else None,
    }


def graph_summary(trace: Trace) -> dict[str, Any]:
    """{"launches": graph launches, "kernels": device events they replayed, "without_op": replayed
    device events whose launch no CPU op holds (counted in their step, blamed on no op),
    "ops": {op name: replayed device events}} for `summary --json`; with replays, also "device_us"
    and "share" (replay_share: the replayed share of the device time, which the trace's ops do not
    attribute)."""
    table = graph_replays(trace)
    if table.height == 0:
        return {"launches": 0, "kernels": 0, "without_op": 0, "ops": {}}
    ops = table.filter(pl.col("op").is_not_null()).group_by("op").agg(pl.col("kernels").sum()).sort("op")
    share = replay_share(trace)
    return {
        "launches": table.height,
        "kernels": int(table["kernels"].sum() or 0),
        "without_op": int(table.filter(pl.col("op").is_null())["kernels"].sum() or 0),
        "ops": {row["op"]: int(row["kernels"]) for row in ops.iter_rows(named=True)},
        "device_us": share["device_us"],
        "share": share["share"],
    }


def graph_warning(trace: Trace) -> str | None:
    """A line for the summary's warnings when replayed kernels cannot be blamed on an op."""
    found = graph_summary(trace)
    if not found["without_op"]:
        return None
    return (
        f"{trace.source}: {found['without_op']:,} device events replayed by {found['launches']:,} graph launch"
        f"{'es' if found['launches'] != 1 else ''} sit under no CPU op: they count in their step, but no op can be blamed "
        "for them (profile with record_shapes/with_stack around the graph's replay to see its caller)"
    )
