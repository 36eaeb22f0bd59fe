"""The host side of a trace: what each attention call costs the CPU, how long a launch waits before
its work starts on the device, and whether a step's device waits on the host.

Definitions (units: ns in the frames, µs in host_block):
- launch call: a runtime or driver call (model.trace.LAUNCH_CATEGORIES) that device work names as
  its launch by correlation (Trace.events' `launch` column). A cudaGetDevice or cudaStreamIsCapturing
  that queues nothing is not one.
- host time of an attention call: the span of its CPU op's subtree on its thread, from the op's start
  to the last end of the op and every event nested under it (the runtime calls included).
- launches of a call: the launch calls nested under its op.
- launch latency: from a launch call's start to the start of the first device event it launched
  (the queueing, plus the launch itself). One number per launch call: a graph launch that replays
  many kernels counts once, to its first kernel.
- waiting on the host: within a step's window on one device (_step_windows: from the step's CPU
  start, or the end of the earlier steps' device work there when that is later, to the end of the
  device events the step launched, kernels.step_device_times' set), an idle gap before a device
  event is waiting on the host when that event's launch call started at or after the end of all
  earlier device work on that device (nothing was queued); the lead before the step's first device
  event counts the same way. A step is host-bound when its waiting time is more than its device
  busy time; both as shares of the window.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from dashboard.engine.analyses.attention_calls import _attention_work, attention_calls, nearest_marked
from dashboard.engine.analyses.kernels import step_device_times, work_events
from dashboard.engine.analyses.lanes import Lanes
from dashboard.engine.model.columns import series
from dashboard.engine.model.trace import GPU_CATEGORIES, Trace, per_trace

CALL_HOST_SCHEMA: dict[str, pl.DataType] = {
    "call": pl.Int64,
    "step": pl.Int64,
    "op": pl.String,
    "backend": pl.String,
    "host_ns": pl.Int64,
    "launches": pl.Int64,
}
LATENCY_SCHEMA: dict[str, pl.DataType] = {
    "launch": pl.Int64,
    "step": pl.Int64,
    "device": pl.Int64,
    "latency_ns": pl.Int64,
}
STEP_HOST_SCHEMA: dict[str, pl.DataType] = {
    "step": pl.Int64,
    "device": pl.Int64,
    "span_ns": pl.Int64,
    "busy_ns": pl.Int64,
    "waiting_ns": pl.Int64,
    "busy_share": pl.Float64,
    "waiting_share": pl.Float64,
    "host_bound": pl.Boolean,
    "launches": pl.Int64,
    "latency_median_ns": pl.Float64,
    "latency_p90_ns": pl.Float64,
}


def _launch_ids(trace: Trace) -> pl.Series:
    """Ids of the launch calls: those some device event names as its launch."""
    device = trace.events.lazy().filter(pl.col("cat").is_in(GPU_CATEGORIES))  # lazy: one column filtered
    return device.select(pl.col("launch").drop_nulls().unique()).collect().to_series()


def _outermost(trace: Trace, calls: pl.Series) -> np.ndarray:
    """For each attention call's op id, the id of the outermost attention op around it (itself when
    none is): scaled_dot_product_attention around _scaled_dot_product_flash_attention around
    _flash_attention_forward, the op the user's code called."""
    found = _attention_work(trace)
    outer = found[2] if found is not None else {}
    tops = []
    for call in calls.to_list():
        while outer.get(call, -1) >= 0:
            call = outer[call]
        tops.append(call)
    return np.array(tops, dtype=np.int64)


@per_trace(schema=CALL_HOST_SCHEMA)
def call_host(trace: Trace) -> pl.DataFrame:
    """One row per attention call made by an op (attention_calls' rows with an op; a kernel that no
    op launched has no host side to read): call (the call's event id, attention_calls' `call`), step,
    op (the outermost attention op around the call, the one the user's code called: its host time
    holds the dispatch and a backend's setup), backend, host_ns (the span of that op's subtree on its
    thread), launches (launch calls nested under it). CALL_HOST_SCHEMA."""
    calls = attention_calls(trace).filter(pl.col("op").is_not_null())
    if calls.height == 0:
        return pl.DataFrame(schema=CALL_HOST_SCHEMA)
    ev = trace.events
    top = _outermost(trace, calls["call"])
    host = ev.select(~pl.col("cat").is_in(GPU_CATEGORIES)).to_series().fill_null(True).to_numpy()
    is_top = np.zeros(ev.height, dtype=bool)
    is_top[top] = True
    parent = ev["parent"].fill_null(-1).to_numpy()
    ids = np.flatnonzero(host)
    owner = nearest_marked(parent, ids, is_top)
    keep = owner >= 0
    is_launch = np.zeros(ev.height, dtype=bool)  # (np.isin sorts through np.unique, which imports numpy.ma)
    is_launch[_launch_ids(trace).to_numpy()] = True
    sub = pl.DataFrame(  # through Arrow (columns.series): a Series from numpy would import numpy.ma
        [
            series("top", owner[keep].astype(np.int64)),
            series("end_ns", (ev["ts_ns"] + ev["dur_ns"].fill_null(0)).to_numpy()[ids[keep]].astype(np.int64)),
            series("launch", is_launch[ids[keep]]),
        ]
    )
    per_top = sub.group_by("top").agg(pl.col("end_ns").max(), pl.col("launch").sum().cast(pl.Int64).alias("launches"))
    start = ev.select(pl.col("id").alias("top"), "ts_ns", "step", pl.col("name").cast(pl.String).alias("top_op"))
    return (
        calls.select("call", "backend")
        .with_columns(series("top", np.asarray(top, dtype=np.int64)))
        .join(start, on="top", how="left")
        .join(per_top, on="top", how="left")
        .select(
            "call",
            "step",
            pl.col("top_op").alias("op"),
            "backend",
            (pl.col("end_ns") - pl.col("ts_ns")).alias("host_ns"),
            pl.col("launches").fill_null(0),
        )
        .cast(CALL_HOST_SCHEMA)
        .sort("call")
    )


@per_trace(schema=LATENCY_SCHEMA)
def launch_latency(trace: Trace) -> pl.DataFrame:
    """One row per launch call: launch (its event id), step and device (of its first device event),
    latency_ns (its first device event's start - the call's start). LATENCY_SCHEMA, in launch order."""
    ev = trace.events
    gpu = (
        ev.lazy()
        .filter(pl.col("cat").is_in(GPU_CATEGORIES) & pl.col("launch").is_not_null())
        .select("launch", "ts_ns", "id")
        .collect()
    )
    # Each launch's first device event (earliest start, then lowest id) by one numpy sort of the
    # device events: a polars sort and a group_by over 300k launches took 5-10 times as long.
    launch = gpu["launch"].to_numpy()
    order = np.lexsort((gpu["id"].to_numpy(), gpu["ts_ns"].to_numpy(), launch))
    first = order[np.concatenate(([True], launch[order[1:]] != launch[order[:-1]]))] if order.size else order
    ids = series("id", gpu["id"].to_numpy()[first])  # through Arrow: pl.Series(numpy) imports numpy.ma
    calls = series("launch", launch[first])
    return pl.DataFrame(
        [
            calls,
            ev["step"].gather(ids),
            ev["device"].gather(ids).fill_null(-1).cast(pl.Int64),
            (ev["ts_ns"].gather(ids) - ev["ts_ns"].gather(calls)).alias("latency_ns"),  # ids are row numbers
        ]
    ).cast(LATENCY_SCHEMA)


def waiting_on_host(trace: Trace) -> pl.DataFrame:
    """Per (step, device): inner_ns (the idle gaps between the step's device events that wait on the
    host: see the module's definition) and first_launch_ns (the start of the launch call of the
    step's first device event there; null when it has none)."""
    work = (
        work_events(trace)
        .lazy()  # lazy: the names and families are not filtered, only what the sweep reads
        .filter(pl.col("step").is_not_null())
        .select("id", "step", pl.col("device").fill_null(-1), "ts_ns", "dur_ns")
        .collect()
    )
    ev = trace.events
    lanes = Lanes(work, ("step", "device"))
    # ids are row numbers: each event's launch start is gathered (null: no launch), not joined over every event
    launch_ts = ev["ts_ns"].gather(ev["launch"].gather(work["id"]))
    launched = launch_ts.fill_null(0).to_numpy()[lanes.order]
    queued = launch_ts.is_not_null().to_numpy()[lanes.order]
    waits = ~lanes.first & queued & (launched >= lanes.covered)  # nothing was queued
    gap = np.where(waits, np.maximum(lanes.ts - lanes.covered, 0), 0)
    return pl.DataFrame(
        [
            *lanes.keys(work, "step", "device"),
            series("inner_ns", lanes.per_lane(gap, np.add)),
            launch_ts.gather(series("rows", lanes.order[lanes.starts])).alias("first_launch_ns"),
        ]
    )


def _step_windows(trace: Trace) -> pl.DataFrame:
    """Per (step, device) of step_device_times: the step's window on the device, from open_ns (when its
    work could start: the step's CPU start, or the end of the earlier steps' device work there when
    that is later; never after its first device event) to end_ns; span_ns = end_ns - open_ns; busy_ns;
    waiting_ns (inner_ns, plus the lead from open_ns to the first device event when that event's
    launch started at or after the earlier steps' device work had ended, or there was none)."""
    times = step_device_times(trace).join(
        trace.steps.select("step", pl.col("start_ns").alias("cpu_ns")), on="step", how="left"
    )
    prev = pl.col("end_ns").cum_max().shift(1).over("device")
    opened = pl.min_horizontal("start_ns", pl.max_horizontal("cpu_ns", "prev_end").fill_null(pl.col("start_ns")))
    lead_waits = pl.col("first_launch_ns") >= pl.coalesce("prev_end", "open_ns")
    return (
        times.sort("device", "start_ns", "step")
        .with_columns(prev.alias("prev_end"))
        .with_columns(opened.alias("open_ns"))
        .join(waiting_on_host(trace), on=["step", "device"], how="left")
        .with_columns(
            (pl.col("end_ns") - pl.col("open_ns")).alias("span_ns"),
            (
                pl.col("inner_ns").fill_null(0)
                + pl.when(lead_waits).then(pl.col("start_ns") - pl.col("open_ns")).otherwise(0).fill_null(0)
            ).alias("waiting_ns"),
        )
        .select("step", "device", "open_ns", "end_ns", "span_ns", "busy_ns", "waiting_ns")
    )


@per_trace(schema=STEP_HOST_SCHEMA)
def step_host(trace: Trace) -> pl.DataFrame:
    """Per step and device with device work (STEP_HOST_SCHEMA): span_ns (the step's window on the
    device: _step_windows), busy_ns (kernels.step_device_times), waiting_ns (_step_windows),
    busy_share and waiting_share (of span_ns, 0..1), host_bound (waiting_ns > busy_ns), launches (launch
    calls whose first device event is the step's on that device), latency_median_ns and
    latency_p90_ns (over those calls; p90 by linear interpolation)."""
    if step_device_times(trace).height == 0:
        return pl.DataFrame(schema=STEP_HOST_SCHEMA)
    lat = (
        launch_latency(trace)
        .filter(pl.col("step").is_not_null())
        .group_by("step", "device")
        .agg(
            pl.len().alias("launches"),
            pl.col("latency_ns").cast(pl.Float64).median().alias("latency_median_ns"),
            pl.col("latency_ns").cast(pl.Float64).quantile(0.9, "linear").alias("latency_p90_ns"),
        )
    )
    span = pl.col("span_ns").cast(pl.Float64)
    return (
        _step_windows(trace)
        .join(lat, on=["step", "device"], how="left")
        .with_columns(pl.col("launches").fill_null(0))
        .with_columns(
            pl.when(span > 0).then(pl.col("busy_ns") / span).otherwise(None).alias("busy_share"),
            pl.when(span > 0).then(pl.col("waiting_ns") / span).otherwise(None).alias("waiting_share"),
            (pl.col("waiting_ns") > pl.col("busy_ns")).alias("host_bound"),
        )
        .select(list(STEP_HOST_SCHEMA))
        .cast(STEP_HOST_SCHEMA)
        .sort("step", "device")
    )


def call_host_per_step(trace: Trace) -> pl.DataFrame:
    """Per step with attention calls: step, host_ns (the mean host time of its calls: the step's
    calls' host time / their number), in step order; what the gate's host_time rule bootstraps."""
    calls = call_host(trace).filter(pl.col("step").is_not_null())
    return calls.group_by("step").agg(pl.col("host_ns").cast(pl.Float64).mean()).sort("step")


def _us(value: float | None) -> float | None:
    return None if value is None else round(float(value) / 1000.0, 3)


def _median(values: pl.Series) -> float | None:
    values = values.drop_nulls()
    return None if values.len() == 0 else float(values.median())  # type: ignore[arg-type]


def _calls_block(calls: pl.DataFrame) -> dict[str, Any]:
    def one(part: pl.DataFrame) -> dict[str, Any]:
        return {
            "count": part.height,
            "host_us": _us(_median(part["host_ns"])),
            "launches": _median(part["launches"].cast(pl.Float64)),
        }

    by_backend = {
        str(b): one(part)
        for (b,), part in calls.filter(pl.col("backend").is_not_null())
        .sort("backend")
        .group_by(["backend"], maintain_order=True)
    }
    return {**one(calls), "by_backend": by_backend}


def _calls_per_step(trace: Trace) -> dict[int, dict[str, Any]]:
    """step -> {"calls", "call_host_us" (mean host time of the step's calls: call_host_per_step),
    "call_launches" (mean launches a call)}."""
    calls = call_host(trace).filter(pl.col("step").is_not_null())
    per = calls.group_by("step").agg(
        pl.len().alias("calls"),
        pl.col("host_ns").cast(pl.Float64).mean().alias("host_ns"),
        pl.col("launches").cast(pl.Float64).mean().alias("launches"),
    )
    return {
        int(r["step"]): {"calls": int(r["calls"]), "call_host_us": _us(r["host_ns"]), "call_launches": r["launches"]}
        for r in per.iter_rows(named=True)
    }


@per_trace(
    json="{steps, waiting_share, busy_share, host_bound_steps, latency_median_us, latency_p90_us, calls}, or null"
)
def host_block(trace: Trace) -> dict[str, Any] | None:
    """The summary's `host` block (µs, shares 0..1), or None for a trace without launch calls (a
    CPU-only trace, a device-only export). steps: per step on its busiest device (ties: the lowest
    id), step_host's row in µs with the step's attention calls (calls, and the mean call_host_us and
    call_launches of a call); waiting_share and busy_share: their medians over steps; host_bound_steps:
    how many steps are host-bound; latency_median_us and latency_p90_us: over every launch call of
    the steps; calls: the attention calls' count, median host_us and launches, and the same by backend."""
    if not trace.has_gpu or launch_latency(trace).height == 0:  # a row per launch call (_launch_ids)
        return None
    busiest = (
        step_host(trace)
        .sort(["step", "busy_ns", "device"], descending=[False, True, False])
        .group_by("step", maintain_order=True)
        .first()
    )
    lat = launch_latency(trace).filter(pl.col("step").is_not_null())["latency_ns"].cast(pl.Float64)
    per_call = _calls_per_step(trace)
    return {
        "steps": [
            {
                "step": int(r["step"]),
                "device": int(r["device"]),
                "span_us": _us(r["span_ns"]),
                "busy_us": _us(r["busy_ns"]),
                "waiting_us": _us(r["waiting_ns"]),
                "busy_share": r["busy_share"],
                "waiting_share": r["waiting_share"],
                "host_bound": bool(r["host_bound"]),
                "launches": int(r["launches"]),
                "latency_median_us": _us(r["latency_median_ns"]),
                "latency_p90_us": _us(r["latency_p90_ns"]),
                **per_call.get(int(r["step"]), {"calls": 0, "call_host_us": None, "call_launches": None}),
            }
            for r in busiest.iter_rows(named=True)
        ],
        "waiting_share": _median(busiest["waiting_share"]),
        "busy_share": _median(busiest["busy_share"]),
        "host_bound_steps": int(busiest["host_bound"].sum()),
        "latency_median_us": _us(_median(lat)),
        "latency_p90_us": _us(lat.quantile(0.9, "linear") if lat.len() else None),
        "calls": _calls_block(call_host(trace)),
    }


def host_line(block: dict[str, Any] | None) -> str | None:
    """One sentence of the host block for the summary's text: host-bound or device-bound with the
    shares, and the attention call's host time, launches and launch latency; None without a block."""
    if not block or not block["steps"]:
        return None
    waiting, busy = block["waiting_share"] or 0.0, block["busy_share"] or 0.0
    n = len(block["steps"])
    bound = "host-bound" if block["host_bound_steps"] * 2 > n else "device-bound"
    line = (
        f"{bound}: the device waits on launches {waiting:.0%} of the step and is busy {busy:.0%} "
        f"(median over steps; {block['host_bound_steps']} of {n} steps host-bound)"
    )
    calls = block["calls"]
    if calls["count"]:
        n = calls["launches"]
        line += f"; attention call: {calls['host_us']:,.1f} µs host, {n:g} launch{'' if n == 1 else 'es'}"
    if block["latency_median_us"] is not None:
        line += f", launch latency median {block['latency_median_us']:,.1f} µs (p90 {block['latency_p90_us']:,.1f} µs)"
    return line


HOST_TABLE_SCHEMA: dict[str, pl.DataType] = {
    "run": pl.String,
    "backend": pl.String,
    "calls": pl.Int64,
    "host_us": pl.Float64,
    "launches": pl.Float64,
    "latency_median_us": pl.Float64,
    "latency_p90_us": pl.Float64,
    "waiting_share": pl.Float64,
    "busy_share": pl.Float64,
    "host_bound_steps": pl.Int64,
    "steps": pl.Int64,
}


def host_table(runs: dict[str, Trace]) -> pl.DataFrame:
    """One row per run with launch calls (HOST_TABLE_SCHEMA), in run order: backend (its attention
    calls' one backend, else the backends joined by '+'), calls, host_us and launches (median a
    call), the launch latency (µs), waiting_share and busy_share (median over steps, 0..1),
    host_bound_steps of steps: host_block's numbers side by side, for the dashboard."""
    rows = []
    for label, trace in runs.items():
        block = host_block(trace)
        if not block:
            continue
        calls = block["calls"]
        rows.append(
            (
                label,
                "+".join(calls["by_backend"]) or None,
                calls["count"],
                calls["host_us"],
                calls["launches"],
                block["latency_median_us"],
                block["latency_p90_us"],
                block["waiting_share"],
                block["busy_share"],
                block["host_bound_steps"],
                len(block["steps"]),
            )
        )
    return pl.DataFrame(rows, schema=HOST_TABLE_SCHEMA, orient="row")
