"""A trace's health, checked before any number is read from it: the ways a torch.profiler trace
is quietly wrong that the anchors' users lose days to.

Each check is a name, a count and one example, in HEALTH_CHECKS order:
- overlapping_kernels: two device events on one (device, stream) overlap in time. A stream runs
  its work in order, so an overlap means the profiler dropped or misplaced events (CUPTI buffer
  overflow, clock corrections).
- duration_overflow: an op, runtime call or device event longer than twice the time between the
  trace's first and last event starts (an overflowed or garbage duration: it would stretch the trace it belongs to), or one the
  loader read with a negative or absurd (over 36 years) duration (read as zero-length).
- device_event_without_launch: a kernel, memcpy or memset whose correlation id matches no launch
  call: its CPU side is missing (dropped at the start of a session, or a trace cut in two).
- device_before_launch: a device event that starts before the call that launched it: the CPU and
  device clocks disagree (skew), so every CPU/GPU interval read from the trace is off.
- missing_device_events: a step whose launch calls have no device event at all (the profiler
  lost the device side of that step).
- idle_gap: a device idle for one stretch longer than IDLE_GAP_SHARE of a step's span: the step's
  time is not the device's work (a host stall, a sync, a data loader).
- comm_dominated: a step where collectives are more than COMM_SHARE of the device's busy time.

Units: times in ns. Every finding is a dict {"check", "count", "example"}; a healthy trace gives [].
"""

from __future__ import annotations

import re
from typing import Any

import polars as pl

from dashboard.engine.kernels import work_events
from dashboard.engine.model import GPU_CATEGORIES, LAUNCH_CATEGORIES, Trace, per_trace

HEALTH_CHECKS: tuple[str, ...] = (
    "overlapping_kernels",
    "duration_overflow",
    "device_event_without_launch",
    "device_before_launch",
    "missing_device_events",
    "idle_gap",
    "comm_dominated",
)
from dashboard.engine.constants import WAITING_CHECKS  # noqa: E402,F401  (light, for the CLI's text; re-exported)

IDLE_GAP_SHARE = 0.5
"""An idle stretch of the device longer than this share of the step's span is a finding."""
COMM_SHARE = 0.5
"""Collectives over this share of a step's device busy time make the step communication-bound."""
OVERLAP_TOLERANCE_NS = 1_000
"""Integer-µs traces round start and duration apart: overlaps within one µs are rounding."""
_LOADER_DURATION = re.compile(
    r"([\d,]+) events with a (negative duration|duration over 36 years) were read as zero-length"
)


def _us(ns: int | float) -> str:
    return f"{ns / 1000:,.1f} µs" if ns < 10_000_000 else f"{ns / 1e6:,.1f} ms"


def _finding(check: str, count: int, example: str) -> dict[str, Any]:
    return {"check": check, "count": int(count), "example": example}


def _device_events(trace: Trace) -> pl.DataFrame:
    return trace.events.filter(pl.col("cat").is_in(GPU_CATEGORIES)).select(
        "id",
        "cat",
        pl.col("name").cast(pl.String),
        "ts_ns",
        "dur_ns",
        "device",
        "stream",
        "correlation",
        "launch",
        "step",
    )


def overlapping_kernels(trace: Trace) -> dict[str, Any] | None:
    """Device events on one (device, stream) that start before the previous one ended (by more
    than OVERLAP_TOLERANCE_NS)."""
    dev = _device_events(trace).sort(["device", "stream", "ts_ns", "id"], nulls_last=True)
    if dev.height < 2:
        return None
    lane = (pl.col("device").fill_null(-1).cast(pl.Int64) * (1 << 32)) + pl.col("stream").fill_null(-1).cast(pl.Int64)
    dev = dev.with_columns(lane.alias("lane"), (pl.col("ts_ns") + pl.col("dur_ns")).alias("end_ns"))
    dev = dev.with_columns(
        pl.col("end_ns").cum_max().shift(1).over("lane").alias("prev_end"),
        pl.col("name").shift(1).over("lane").alias("prev_name"),
    )
    hits = dev.filter(pl.col("prev_end").is_not_null() & (pl.col("ts_ns") < pl.col("prev_end") - OVERLAP_TOLERANCE_NS))
    if hits.height == 0:
        return None
    row = hits.row(0, named=True)
    return _finding(
        "overlapping_kernels",
        hits.height,
        f"{row['name'][:80]} starts {_us(row['prev_end'] - row['ts_ns'])} before the previous event on "
        f"device {row['device']} stream {row['stream']} ends ({row['prev_name'][:60]})",
    )


def duration_overflow(trace: Trace) -> dict[str, Any] | None:
    """Events longer than twice the span of the trace's event starts, plus those the loader read as
    zero-length because their duration was negative or over 36 years (its warnings give the counts).
    The span is taken over starts, not ends, so that the overflowed event does not stretch it; twice,
    so that a step that holds the whole trace (it ends after the last start) is never one."""
    ev = trace.events
    if ev.height == 0:
        return None
    span = int(ev.select(pl.col("ts_ns").max() - pl.col("ts_ns").min()).item() or 0)
    # annotations and steps may rightly span a wait with nothing recorded in it (a sleep, a compile)
    timed = ev.filter(
        ~pl.col("cat").is_in(["user_annotation", "gpu_user_annotation", "python_function"]),
        ~pl.col("name").cast(pl.String).str.starts_with("ProfilerStep#"),
    )
    longer = timed.filter(pl.col("dur_ns") > 2 * span)
    loader = [
        (int(m.group(1).replace(",", "")), m.group(2))
        for w in trace.warnings
        for m in [_LOADER_DURATION.search(w)]
        if m
    ]
    count = longer.height + sum(n for n, _ in loader)
    if count == 0:
        return None
    if longer.height:
        row = longer.row(0, named=True)
        example = f"{row['name']} lasts {_us(row['dur_ns'])}, more than twice the trace's span of starts ({_us(span)})"
    else:
        example = "; ".join(f"{n:,} events with a {what} (read as zero-length)" for n, what in loader)
    return _finding("duration_overflow", count, example)


def device_event_without_launch(trace: Trace) -> dict[str, Any] | None:
    """Device events whose correlation id matches no launch call in the trace."""
    if not trace.events["cat"].is_in(LAUNCH_CATEGORIES).any():
        return None  # a trace with no launch calls at all (device-only export) is read as such elsewhere
    lost = _device_events(trace).filter(pl.col("launch").is_null())
    if lost.height == 0:
        return None
    row = lost.row(0, named=True)
    return _finding(
        "device_event_without_launch",
        lost.height,
        f"{row['name'][:80]} (correlation {row['correlation']}) has no launch call in the trace",
    )


def device_before_launch(trace: Trace) -> dict[str, Any] | None:
    """Device events that start before the launch call that queued them (clock skew)."""
    dev = _device_events(trace).filter(pl.col("launch").is_not_null())
    if dev.height == 0:
        return None
    launches = trace.events.select(
        pl.col("id").alias("launch"),
        pl.col("ts_ns").alias("launch_ts"),
        pl.col("name").cast(pl.String).alias("launch_name"),
    )
    early = dev.join(launches, on="launch", how="inner").filter(pl.col("ts_ns") < pl.col("launch_ts"))
    if early.height == 0:
        return None
    worst = (
        early.with_columns((pl.col("launch_ts") - pl.col("ts_ns")).alias("skew"))
        .sort(["skew", "id"], descending=[True, False])
        .row(0, named=True)
    )
    return _finding(
        "device_before_launch",
        early.height,
        f"{worst['name'][:80]} starts {_us(worst['skew'])} before its launch {worst['launch_name']}",
    )


def missing_device_events(trace: Trace) -> dict[str, Any] | None:
    """Steps whose launch calls have no device event at all."""
    if not trace.has_gpu or trace.steps.height == 0:
        return None
    ev = trace.events
    launched = (
        ev.filter(pl.col("cat").is_in(LAUNCH_CATEGORIES) & pl.col("correlation").is_not_null()).group_by("step").len()
    )
    done = ev.filter(pl.col("cat").is_in(GPU_CATEGORIES)).group_by("step").len().rename({"len": "device"})
    empty = (
        launched.join(done, on="step", how="left")
        .filter(pl.col("device").is_null() & pl.col("step").is_not_null())
        .sort("step")
    )
    if empty.height == 0:
        return None
    row = empty.row(0, named=True)
    return _finding(
        "missing_device_events",
        empty.height,
        f"step {row['step']} launched {row['len']:,} calls and has no kernel, memcpy or memset",
    )


@per_trace
def _step_device_times(trace: Trace) -> pl.DataFrame:
    """Per step and device: the longest idle stretch of the device within the step's CPU span
    (between the span's edges and the merged busy intervals of the step's device work), busy_ns,
    comm_ns (collectives' busy time) and the span dur_ns."""
    schema = {
        "step": pl.Int64,
        "device": pl.Int64,
        "idle_ns": pl.Int64,
        "busy_ns": pl.Int64,
        "comm_ns": pl.Int64,
        "dur_ns": pl.Int64,
    }
    if not trace.has_gpu or trace.steps.height == 0:
        return pl.DataFrame(schema=schema)
    work = work_events(trace).filter(pl.col("step").is_not_null())
    steps = trace.steps.select("step", "start_ns", "end_ns", "dur_ns")
    rows = []
    for (step, device), part in work.sort("ts_ns").group_by(["step", "device"], maintain_order=True):
        span = steps.filter(pl.col("step") == step)
        if span.height == 0:
            continue
        _, start, end, dur = span.row(0)
        busy = _merge(
            [
                (max(s, start), min(s + d, end))
                for s, d in zip(part["ts_ns"], part["dur_ns"])
                if s + d > start and s < end
            ]
        )
        comm = _merge(
            [(s, s + d) for s, d, f in zip(part["ts_ns"], part["dur_ns"], part["family"]) if f == "communication"]
        )
        edges = [start] + [x for iv in busy for x in iv] + [end]
        idle = max((edges[i + 1] - edges[i] for i in range(0, len(edges) - 1, 2)), default=dur)
        rows.append(
            {
                "step": step,
                "device": device,
                "idle_ns": max(int(idle), 0),
                "busy_ns": sum(b - a for a, b in busy),
                "comm_ns": sum(b - a for a, b in comm),
                "dur_ns": int(dur),
            }
        )
    return pl.DataFrame(rows, schema=schema) if rows else pl.DataFrame(schema=schema)


def _merge(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for a, b in sorted(intervals):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def idle_gap(trace: Trace) -> dict[str, Any] | None:
    """Steps where a device sits idle for one stretch longer than IDLE_GAP_SHARE of the step."""
    times = _step_device_times(trace)
    idle = times.filter((pl.col("dur_ns") > 0) & (pl.col("idle_ns") > IDLE_GAP_SHARE * pl.col("dur_ns")))
    if idle.height == 0:
        return None
    worst = idle.sort([pl.col("idle_ns") / pl.col("dur_ns"), "step"], descending=[True, False]).row(0, named=True)
    steps = idle["step"].n_unique()
    return _finding(
        "idle_gap",
        steps,
        f"step {worst['step']}: device {worst['device']} idle for {_us(worst['idle_ns'])} of a "
        f"{_us(worst['dur_ns'])} step ({worst['idle_ns'] / worst['dur_ns']:.0%})",
    )


def comm_dominated(trace: Trace) -> dict[str, Any] | None:
    """Steps where collectives take more than COMM_SHARE of a device's busy time."""
    times = _step_device_times(trace)
    heavy = times.filter((pl.col("busy_ns") > 0) & (pl.col("comm_ns") > COMM_SHARE * pl.col("busy_ns")))
    if heavy.height == 0:
        return None
    worst = heavy.sort([pl.col("comm_ns") / pl.col("busy_ns"), "step"], descending=[True, False]).row(0, named=True)
    return _finding(
        "comm_dominated",
        heavy["step"].n_unique(),
        f"step {worst['step']}: collectives are {worst['comm_ns'] / worst['busy_ns']:.0%} of device "
        f"{worst['device']}'s busy time ({_us(worst['comm_ns'])} of {_us(worst['busy_ns'])})",
    )


_CHECKS = (
    overlapping_kernels,
    duration_overflow,
    device_event_without_launch,
    device_before_launch,
    missing_device_events,
    idle_gap,
    comm_dominated,
)


@per_trace
def health(trace: Trace) -> list[dict[str, Any]]:
    """Every finding of the trace's health checks, in HEALTH_CHECKS order: [{"check", "count",
    "example"}, ...]; [] for a healthy trace."""
    return [found for check in _CHECKS if (found := check(trace)) is not None]
