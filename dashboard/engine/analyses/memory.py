"""Memory over time from a trace recorded with profile_memory=True: the peak allocated per step.

The profiler writes one "[memory]" instant event per allocation and free, with the allocator's
Total Allocated on that device after it (see Trace.memory). From them, per ProfilerStep and
device: the peak allocated, the level the step started at, how much it added, and the op whose
allocation reached the peak. Units: bytes (decimal MB only where a text is written), ns from the
trace start for times.
"""

from __future__ import annotations

import polars as pl

from dashboard.engine.model.trace import MEMORY_SCHEMA, Trace, per_trace

# c10's DeviceType numbers as the profiler writes them in "Device Type" (c10/core/DeviceType.h).
# ROCm builds report their GPUs as CUDA (1).
DEVICE_TYPES: dict[int, str] = {
    0: "cpu",
    1: "cuda",
    2: "mkldnn",
    3: "opengl",
    4: "opencl",
    5: "ideep",
    6: "hip",
    7: "fpga",
    8: "maia",
    9: "xla",
    10: "vulkan",
    11: "metal",
    12: "xpu",
    13: "mps",
    14: "meta",
    15: "hpu",
    16: "ve",
    17: "lazy",
    18: "ipu",
    19: "mtia",
    20: "privateuse1",
}

# memory_peaks' columns; the memory table's own (step, device_type, device_id) keep its dtypes
PEAKS_SCHEMA: dict[str, pl.DataType | type] = {
    **{name: MEMORY_SCHEMA[name] for name in ("step", "device_type", "device_id")},
    "device": pl.String,
    "peak_allocated_bytes": pl.Int64,
    "start_allocated_bytes": pl.Int64,
    "added_bytes": pl.Int64,
    "peak_ts_ns": pl.Int64,
    "peak_op": pl.String,
    "peak_reserved_bytes": pl.Int64,
    "allocations": pl.Int64,
    "events": pl.Int64,
}
# memory_peak's columns: the same peaks over the whole trace, with the step that holds the peak
PEAK_SCHEMA: dict[str, pl.DataType | type] = {
    **{
        n: PEAKS_SCHEMA[n]
        for n in ("device_type", "device_id", "device", "peak_allocated_bytes", "peak_ts_ns", "peak_op")
    },
    "peak_step": MEMORY_SCHEMA["step"],
    **{name: PEAKS_SCHEMA[name] for name in ("peak_reserved_bytes", "allocations", "events")},
}


def device_label(device_type: int | None, device_id: int | None) -> str:
    """'cpu' (the CPU allocator writes Device Id -1), 'cuda:0', or 'device type 42:0' for a number
    DEVICE_TYPES lacks."""
    kind = DEVICE_TYPES.get(device_type, f"device type {device_type}") if device_type is not None else "unknown device"
    return kind if device_id is None or device_id < 0 else f"{kind}:{device_id}"


def _with_peaks(frame: pl.LazyFrame, keys: list[str]) -> pl.LazyFrame:
    """Per group of `keys` over memory events in time order: the peak of total_allocated and the
    first event that reached it, the level before the group's first event, allocations counted."""
    at_peak = pl.col("total_allocated") == pl.col("total_allocated").max()
    return frame.group_by(keys, maintain_order=True).agg(
        pl.col("total_allocated").max().alias("peak_allocated_bytes"),
        (pl.col("total_allocated").first() - pl.col("bytes").first()).alias("start_allocated_bytes"),
        pl.col("ts_ns").filter(at_peak).first().alias("peak_ts_ns"),
        pl.col("op").cast(pl.String).filter(at_peak).first().alias("peak_op"),
        pl.col("total_reserved").max().alias("peak_reserved_bytes"),
        (pl.col("bytes") > 0).sum().cast(pl.Int64).alias("allocations"),
        pl.len().cast(pl.Int64).alias("events"),
    )


def _with_device(frame: pl.DataFrame) -> pl.DataFrame:
    """`device` (device_label) added to a frame of a few rows (one per step and device)."""
    labels = [
        device_label(kind, ident) for kind, ident in zip(frame["device_type"].to_list(), frame["device_id"].to_list())
    ]
    return frame.with_columns(pl.Series("device", labels, dtype=pl.String))


@per_trace(schema=PEAKS_SCHEMA)
def memory_peaks(trace: Trace) -> pl.DataFrame:
    """One row per ProfilerStep and device (device_type, device_id) that has memory events, in
    step order: peak_allocated_bytes (the most Total Allocated in the step, bytes),
    start_allocated_bytes (the level the step started at: Total Allocated before its first memory
    event on that device, i.e. that event's Total Allocated minus its Bytes), added_bytes (peak -
    start: what the step allocated on top of what it started with, bytes), peak_ts_ns (the first
    event that reached the peak, ns from the trace start), peak_op (the cpu_op that holds that
    event, see Trace.memory; null outside any op), peak_reserved_bytes (the most Total Reserved,
    bytes), allocations (events with Bytes > 0), events, and device ('cpu', 'cuda:0').
    Byte columns are null where the trace gives no Total Allocated (2021 traces). No rows for a
    trace recorded without profile_memory (or without memory events inside a step)."""
    mem = trace.memory
    if mem.height == 0:
        return pl.DataFrame(schema=PEAKS_SCHEMA)
    keys = ["step", "device_type", "device_id"]
    out = _with_peaks(mem.lazy().filter(pl.col("step").is_not_null()), keys).collect()
    out = out.with_columns((pl.col("peak_allocated_bytes") - pl.col("start_allocated_bytes")).alias("added_bytes"))
    return _with_device(out).sort(keys).select(list(PEAKS_SCHEMA))


@per_trace(schema=PEAK_SCHEMA)
def memory_peak(trace: Trace) -> pl.DataFrame:
    """The whole trace's peak per device, every memory event counted (inside a step or not): one row
    per (device_type, device_id), the highest peak first: device, peak_allocated_bytes (bytes),
    peak_ts_ns (ns from the trace start), peak_op, peak_step (the step that holds the peak event,
    null outside any), peak_reserved_bytes, allocations and events. No rows without memory events."""
    schema = PEAK_SCHEMA
    mem = trace.memory
    if mem.height == 0:
        return pl.DataFrame(schema=schema)
    at_peak = pl.col("total_allocated") == pl.col("total_allocated").max()
    out = (
        mem.lazy()
        .group_by("device_type", "device_id")
        .agg(
            pl.col("total_allocated").max().alias("peak_allocated_bytes"),
            pl.col("ts_ns").filter(at_peak).first().alias("peak_ts_ns"),
            pl.col("op").cast(pl.String).filter(at_peak).first().alias("peak_op"),
            pl.col("step").filter(at_peak).first().alias("peak_step"),
            pl.col("total_reserved").max().alias("peak_reserved_bytes"),
            (pl.col("bytes") > 0).sum().cast(pl.Int64).alias("allocations"),
            pl.len().cast(pl.Int64).alias("events"),
        )
        .collect()
    )
    out = _with_device(out)
    return out.sort(
        ["peak_allocated_bytes", "device_type", "device_id"], descending=[True, False, False], nulls_last=True
    ).select(list(schema))


def memory_block(trace: Trace) -> dict[str, object]:
    """The "memory" block of `attnscope summary --json` (ints and strings only, rows in step and
    device order): recorded (profile_memory=True: the trace holds memory events, or its top level
    says "profile_memory": 1), events (memory events), device (the device the headline is about: the accelerator with the highest peak, else the
    CPU), peak_allocated_bytes, peak_op, peak_step and peak_ts_ns (the whole trace's peak on that
    device, see memory_peak), added_bytes (what the peak's step added on that device, see
    memory_peaks; null outside any step), totals_recorded (False for traces whose memory events
    lack Total Allocated, as 2021 ones do: every byte figure is then null), and per_step (memory_peaks'
    rows: step, device, peak_allocated_bytes, start_allocated_bytes, added_bytes, peak_ts_ns,
    peak_op, allocations). Bytes are bytes; times ns from the trace start."""
    mem = trace.memory
    flag = trace.meta.get("profile_memory")  # newer Kineto writes "profile_memory": 1 at the top level
    block: dict[str, object] = {
        "recorded": mem.height > 0 or (type(flag) in (int, bool) and flag == 1),
        "events": mem.height,
        "device": None,
        "peak_allocated_bytes": None,
        "peak_op": None,
        "peak_step": None,
        "peak_ts_ns": None,
        "added_bytes": None,
        "totals_recorded": bool(mem.height and mem["total_allocated"].is_not_null().any()),
        "per_step": [],
    }
    if not mem.height:
        return block
    peaks = memory_peak(trace)
    known = peaks.filter(pl.col("peak_allocated_bytes").is_not_null())
    chosen = known.filter(pl.col("device_type") != 0) if known.filter(pl.col("device_type") != 0).height else known
    head = (chosen if chosen.height else peaks).row(0, named=True)
    per_step = memory_peaks(trace)
    block.update(
        device=head["device"],
        peak_allocated_bytes=head["peak_allocated_bytes"],
        peak_op=head["peak_op"],
        peak_step=head["peak_step"],
        peak_ts_ns=head["peak_ts_ns"],
    )
    if head["peak_step"] is not None:
        same = per_step.filter(
            (pl.col("step") == head["peak_step"])
            & (pl.col("device_type") == head["device_type"])
            & (pl.col("device_id") == head["device_id"])
        )
        block["added_bytes"] = same["added_bytes"][0] if same.height else None
    keys = (
        "step",
        "device",
        "peak_allocated_bytes",
        "start_allocated_bytes",
        "added_bytes",
        "peak_ts_ns",
        "peak_op",
        "allocations",
    )
    block["per_step"] = [{key: row[key] for key in keys} for row in per_step.iter_rows(named=True)]
    return block


def memory_by_run(runs: dict[str, Trace]) -> pl.DataFrame:
    """memory_peaks of several runs ({label: Trace}, in display order) stacked, with `run` first:
    the runs without memory events (recorded without profile_memory) have no rows."""
    frames = [
        memory_peaks(trace).select(pl.lit(label, dtype=pl.String).alias("run"), pl.all())
        for label, trace in runs.items()
    ]
    schema = {"run": pl.String, **PEAKS_SCHEMA}
    return pl.concat(frames) if frames else pl.DataFrame(schema=schema)
