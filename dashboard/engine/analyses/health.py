"""A trace's health, checked before any number is read from it: the ways a torch.profiler trace
is quietly wrong that the anchors' users lose days to.

Each check is a name, a count and one example, in HEALTH_CHECKS order:
- overlapping_kernels: two device events on one (device, stream) overlap in time. A stream runs
  its work in order, so an overlap means the profiler dropped or misplaced events (CUPTI buffer
  overflow, clock corrections).
- dependent_launch_overlap: overlaps of the same kernel pair, staggered and small, on an NVIDIA
  device from Hopper on (programmatic dependent launch lets a kernel start before its
  predecessor on the stream ends): a fact of the run, not a fault of the trace.
- duration_overflow: a ProfilerStep span that runs past every other event of the trace and lasts
  more than twice the events it holds (steps.overflowed; the loader measures such a step by its
  events, and every number downstream reads that), an op, runtime call or device event longer
  than twice the time between the trace's first and last event starts (an overflowed or garbage
  duration: it would stretch the trace it belongs to), or one the loader read with a negative or
  absurd (over 36 years) duration (read as zero-length).
- device_event_without_launch: a kernel, memcpy or memset whose correlation id matches no launch
  call: its CPU side is missing (dropped at the start of a session, or a trace cut in two).
- device_before_launch: a device event that starts before the call that launched it: the CPU and
  device clocks disagree (skew), so every CPU/GPU interval read from the trace is off.
- missing_device_events: a step whose launch calls have no device event at all (the profiler
  lost the device side of that step).
- idle_gap: a device idle for one stretch longer than IDLE_GAP_SHARE of the span of a step's
  device work (step_device_times: the work the step launched, on the device's own timeline): the
  step's time is not the device's work (a host stall, a sync, a data loader).
- comm_dominated: a step where collectives are more than COMM_SHARE of the device's busy time
  (both from the step's own device work).

Units: times in ns. Every finding is a dict {"check", "count", "example"}; a healthy trace gives [].
"""

from __future__ import annotations

import functools
import re
from typing import Any, Callable

import polars as pl

from dashboard.engine.analyses.kernels import step_device_times, work_events
from dashboard.engine.analyses.lanes import time_order
from dashboard.engine.model.columns import series
from dashboard.engine.model.constants import HEALTH_KINDS, WAITING_CHECKS  # noqa: F401  (WAITING_CHECKS re-exported)
from dashboard.engine.model.formatting import ns_duration as _us
from dashboard.engine.rules.devices import accelerator, unlaunched_by_design
from dashboard.engine.model.trace import (
    GPU_CATEGORIES,
    LAUNCH_CATEGORIES,
    Trace,
    events_columns,
    names_by_category,
    per_trace,
)
from dashboard.engine.rules.ops import STEP_MARK
from dashboard.engine.rules.peaks import dependent_launch, device_properties

HEALTH_CHECKS: tuple[str, ...] = tuple(HEALTH_KINDS)
"""Every check's name, in the order findings are listed (constants.HEALTH_KINDS, with each kind)."""

IDLE_GAP_SHARE = 0.5
"""An idle stretch of the device longer than this share of the step's span is a finding."""
COMM_SHARE = 0.5
"""Collectives over this share of a step's device busy time make the step communication-bound."""
DEPENDENT_REPEATS = 2
"""A kernel pair that overlaps at least this many times on a device with programmatic dependent
launch overlaps by design (health._overlaps)."""
OVERLAP_TOLERANCE_NS = 1_000
"""Integer-µs traces round start and duration apart: overlaps within one µs are rounding."""
_LOADER_DURATION = re.compile(
    r"([\d,]+) events with a (negative duration|duration over 36 years) were read as zero-length"
)


Found = tuple[int, str]  # a check's count and one example
_REGISTRY: dict[str, Callable[[Trace], dict[str, Any] | None]] = {}


def _check(find: Callable[[Trace], Found | None]) -> Callable[[Trace], dict[str, Any] | None]:
    """Register a check under its function's name (one of constants.HEALTH_KINDS); the function
    returns (count, example) or None, the registered check the finding {"check", "count", "example"}."""
    name = find.__name__
    if name not in HEALTH_KINDS:
        raise ValueError(f"health check {name!r} is not in constants.HEALTH_KINDS")

    @functools.wraps(find)
    def run(trace: Trace) -> dict[str, Any] | None:
        found = find(trace)
        return None if found is None else {"check": name, "count": int(found[0]), "example": found[1]}

    _REGISTRY[name] = run
    return run


# The device events' columns the checks read (_overlaps' hits, device_event_without_launch's lost events)
_DEVICE_COLUMNS = ("id", "cat", "name", "ts_ns", "dur_ns", "device", "stream", "correlation", "launch", "step")

# _overlaps' columns: the device events' (name as text), their lane and the overlap with the lane's earlier events
OVERLAPS_SCHEMA: dict[str, Any] = {
    **events_columns(
        "id", "cat", "name", "ts_ns", "dur_ns", "device", "stream", "correlation", "launch", "step", name=pl.String
    ),
    "lane": pl.Int64,
    "end_ns": pl.Int64,
    "prev_end": pl.Int64,
    "prev_dur": pl.Int64,
    "prev_name": pl.String,
    "overlap_ns": pl.Int64,
    "dependent": pl.Boolean,
}


@per_trace(schema=OVERLAPS_SCHEMA)
def _overlaps(trace: Trace) -> pl.DataFrame:
    """Device events on one (device, stream) that start more than OVERLAP_TOLERANCE_NS before the
    earlier events of the lane have ended, each with overlap_ns, prev_name (the event before it on
    the lane), and dependent (True when it looks like programmatic dependent launch: a device that
    allows it (peaks.dependent_launch), the later event ends after the earlier ones (staggered,
    not nested: no time is lost or counted twice), overlapping less than half of either event,
    and the same (earlier, later) pair of names overlapping at least DEPENDENT_REPEATS times)."""
    # The lanes are swept over the device events' integer columns only and the hits' other columns
    # gathered afterwards by row number (ids are row numbers): sorting all ten columns of every
    # device event took most of the time. Names stay Categorical until the few hits are found: a
    # String column filtered down to them would keep every device event's name text alive with the
    # cached result (36 MB on the dense ~180 MB trace, for the trace's life).
    ev = trace.events
    dev = (
        ev.lazy()
        .filter(pl.col("cat").is_in(GPU_CATEGORIES))
        .select("id", "ts_ns", "dur_ns", "device", "stream")
        .collect()
    )
    if dev.height < 2:
        return pl.DataFrame(schema=OVERLAPS_SCHEMA)
    dev = dev.select(pl.all().gather(series("rows", time_order(dev, ("device", "stream")))))
    lane = (pl.col("device").fill_null(-1).cast(pl.Int64) * (1 << 32)) + pl.col("stream").fill_null(-1).cast(pl.Int64)
    dev = dev.with_columns(lane.alias("lane"), (pl.col("ts_ns") + pl.col("dur_ns")).alias("end_ns"))
    dev = dev.with_columns(
        pl.col("end_ns").cum_max().shift(1).over("lane").alias("prev_end"),
        pl.col("id").shift(1).over("lane").alias("prev_id"),  # the event before it on the lane
    )
    found = dev.filter(pl.col("prev_end").is_not_null() & (pl.col("ts_ns") < pl.col("prev_end") - OVERLAP_TOLERANCE_NS))
    at, before = found["id"], found["prev_id"]
    hits = pl.concat(
        [
            ev.select(pl.col(*_DEVICE_COLUMNS).gather(at)),
            found.select("lane", "end_ns", "prev_end"),
            ev.select(
                pl.col("dur_ns").gather(before).alias("prev_dur"), pl.col("name").gather(before).alias("prev_name")
            ),
        ],
        how="horizontal",
    )
    capable = {
        d for d in hits["device"].unique().drop_nulls().to_list() if dependent_launch(device_properties(trace.meta, d))
    }
    overlap = pl.col("prev_end") - pl.col("ts_ns")
    return (
        hits.with_columns(overlap.alias("overlap_ns"))
        .with_columns(
            (
                pl.col("device").is_in(list(capable))
                & (pl.col("end_ns") > pl.col("prev_end"))
                & (2 * pl.col("overlap_ns") < pl.min_horizontal("dur_ns", "prev_dur"))
                & (pl.len().over("prev_name", "name") >= DEPENDENT_REPEATS)
            ).alias("dependent")
        )
        .with_columns(pl.col("name", "prev_name").cast(pl.String))
    )


@_check
def overlapping_kernels(trace: Trace) -> Found | None:
    """Device events on one (device, stream) that start before the previous one ended (by more
    than OVERLAP_TOLERANCE_NS), except the overlaps of programmatic dependent launch (_overlaps)."""
    hits = _overlaps(trace).filter(~pl.col("dependent"))
    if hits.height == 0:
        return None
    row = hits.row(0, named=True)
    return (
        hits.height,
        f"{row['name'][:80]} starts {_us(row['overlap_ns'])} before the previous event on "
        f"device {row['device']} stream {row['stream']} ends ({row['prev_name'][:60]})",
    )


@_check
def dependent_launch_overlap(trace: Trace) -> Found | None:
    """Overlaps of the same kernel pair on a device with programmatic dependent launch (_overlaps):
    the hardware starting a kernel's prologue under its predecessor's tail, not a fault of the
    trace."""
    hits = _overlaps(trace).filter(pl.col("dependent"))
    if hits.height == 0:
        return None
    pairs = (
        hits.group_by("prev_name", "name")
        .agg(pl.len(), pl.col("overlap_ns").max())
        .sort(["len", "prev_name", "name"], descending=[True, False, False])
    )
    top = pairs.row(0, named=True)
    others = pairs.height - 1
    return (
        hits.height,
        f"likely programmatic dependent launch: {top['name'][:60]} starts under the tail of {top['prev_name'][:60]} "
        f"{top['len']:,} times (up to {_us(top['overlap_ns'])})"
        + (f", and {others} other {'pair' if others == 1 else 'pairs'}" if others else ""),
    )


@_check
def duration_overflow(trace: Trace) -> Found | None:
    """Events longer than twice the span of the trace's event starts, plus those the loader read as
    zero-length because their duration was negative or over 36 years (its warnings give the counts).
    The span is taken over starts, not ends, so that the overflowed event does not stretch it; twice,
    so that a step that holds the whole trace (it ends after the last start) is never one."""
    ev = trace.events
    if ev.height == 0:
        return None
    span = int(ev.select(pl.col("ts_ns").max() - pl.col("ts_ns").min()).item() or 0)
    # annotations and steps may rightly span a wait with nothing recorded in it (a sleep, a compile);
    # the long ones first (a handful): the names are read as text for them only, not for every event
    longer = (
        ev.lazy()
        .filter(pl.col("dur_ns") > 2 * span)
        .select("cat", "name", "dur_ns")  # lazy: the other columns are not filtered
        .collect()
        .filter(
            ~pl.col("cat").is_in(["user_annotation", "gpu_user_annotation", "python_function"]),
            ~pl.col("name").cast(pl.String).str.starts_with(STEP_MARK),
        )
    )
    steps = _overflowed_steps(trace)
    loader = [
        (int(m.group(1).replace(",", "")), m.group(2))
        for w in trace.warnings
        for m in [_LOADER_DURATION.search(w)]
        if m
    ]
    count = steps.height + longer.height + sum(n for n, _ in loader)
    if count == 0:
        return None
    if steps.height:
        row = steps.row(0, named=True)
        example = (
            f"{row['name']} lasts {_us(row['written_ns'])} as written, past the end of every other event, but "
            f"the events it holds end {_us(row['dur_ns'])} after it starts: measured as {_us(row['dur_ns'])}"
        )
    elif longer.height:
        row = longer.row(0, named=True)
        example = f"{row['name']} lasts {_us(row['dur_ns'])}, more than twice the trace's span of starts ({_us(span)})"
    else:
        example = "; ".join(f"{n:,} events with a {what} (read as zero-length)" for n, what in loader)
    return count, example


def _step_names(trace: Trace) -> list[str]:
    """The distinct event names that start with STEP_MARK, from names_by_category: the distinct
    names are read there once for every analysis, not found again over every event."""
    return sorted({name for names in names_by_category(trace).values() for name in names if name.startswith(STEP_MARK)})


def _overflowed_steps(trace: Trace) -> pl.DataFrame:
    """Steps whose ProfilerStep span as written is longer than the span the loader measured
    (steps.overflowed: measured by the events they hold): name, written_ns, dur_ns."""
    if trace.steps.height == 0 or trace.implicit_step:
        return pl.DataFrame(schema={"name": pl.String, "written_ns": pl.Int64, "dur_ns": pl.Int64})
    written = (
        trace.events.lazy()  # lazy: only the columns selected are filtered
        .filter((pl.col("cat") != "gpu_user_annotation") & pl.col("name").is_in(_step_names(trace)))
        .select(pl.col("name").cast(pl.String), pl.col("ts_ns").alias("start_ns"), pl.col("dur_ns").alias("written_ns"))
        .collect()
        .unique(["name", "start_ns"], keep="first")
    )
    return (
        trace.steps.select("name", "start_ns", "dur_ns")
        .join(written, on=["name", "start_ns"], how="inner")
        .filter(pl.col("written_ns") > pl.col("dur_ns"))
        .sort("start_ns")
        .select("name", "written_ns", "dur_ns")
    )


@_check
def device_event_without_launch(trace: Trace) -> Found | None:
    """Device events whose correlation id matches no launch call in the trace, except those of a
    device class that the device queues itself (rules.devices.DEVICE_CLASSES, launched=False: an
    MTIA dma_request or pe_exe with no correlation is by design, not a lost launch)."""
    if not any(cat in LAUNCH_CATEGORIES for cat in names_by_category(trace)):
        return None  # a trace with no launch calls at all (device-only export) is read as such elsewhere
    lost = (
        trace.events.lazy()  # lazy: the lost ones' columns only, their names as text
        .filter(pl.col("cat").is_in(GPU_CATEGORIES) & pl.col("launch").is_null())
        .select(_DEVICE_COLUMNS)
        .with_columns(pl.col("name").cast(pl.String))
        .collect()
    )
    design = pl.lit(False)
    for row in unlaunched_by_design(trace.raw_categories):
        design = design | pl.col("name").str.contains("(?i)" + row.name)
    queued = lost.filter(design).group_by("name").len().sort(["len", "name"], descending=[True, False])
    by_design = [f"{n:,} {name}" for name, n in queued.iter_rows()]
    lost = lost.filter(~design)
    if lost.height == 0:
        return None
    row = lost.row(0, named=True)
    said = (
        f"; not counted: {', '.join(by_design)} events, which the {accelerator(trace.raw_categories)} device "
        "queues itself (no launch by design)"
        if by_design
        else ""
    )
    return (
        lost.height,
        f"{row['name'][:80]} (correlation {row['correlation']}) has no launch call in the trace{said}",
    )


@_check
def device_before_launch(trace: Trace) -> Found | None:
    """Device events that start before the launch call that queued them (clock skew)."""
    # Only a launch whose first device event starts before it (host.launch_latency's negative
    # latency) has such events: a healthy trace's are not gathered and compared one by one. (Imported
    # here: host imports this module.)
    from dashboard.engine.analyses.host import launch_latency

    skewed = launch_latency(trace).filter(pl.col("latency_ns") < 0)["launch"]
    if skewed.len() == 0:
        return None
    ev = trace.events
    dev = (
        ev.lazy()
        .filter(pl.col("cat").is_in(GPU_CATEGORIES) & pl.col("launch").is_in(skewed.to_list()))
        .select("id", "name", "ts_ns", "launch")
        .collect()
    )
    # each launch's start gathered by its id (the row number), not joined over every event; names are
    # read as text for the early events and the worst one's launch only, not for every event
    early = (
        dev.with_columns(ev["ts_ns"].gather(dev["launch"]).alias("launch_ts"))
        .filter(pl.col("ts_ns") < pl.col("launch_ts"))
        .with_columns(pl.col("name").cast(pl.String))
    )
    worst = (
        early.with_columns((pl.col("launch_ts") - pl.col("ts_ns")).alias("skew"))
        .sort(["skew", "id"], descending=[True, False])
        .row(0, named=True)
    )
    launch_name = ev["name"][worst["launch"]]  # ids are row numbers
    return (
        early.height,
        f"{worst['name'][:80]} starts {_us(worst['skew'])} before its launch {launch_name}",
    )


@_check
def missing_device_events(trace: Trace) -> Found | None:
    """Steps whose launch calls have no device event at all."""
    if not trace.has_gpu or trace.steps.height == 0:
        return None
    # a GPU trace's work_events are its device events (kernels, memcpys, memsets), with their steps;
    # an event's step is one of trace.steps' (load.steps.assign_steps), so only the launch calls of
    # the steps without device work are counted: on most traces there is none, and no event is read
    done = work_events(trace)["step"].drop_nulls().unique()
    idle = trace.steps.filter(~pl.col("step").is_in(done.to_list()))["step"]
    if idle.len() == 0:
        return None
    empty = (
        trace.events.lazy()  # lazy: three columns are read
        .filter(
            pl.col("cat").is_in(LAUNCH_CATEGORIES)
            & pl.col("correlation").is_not_null()
            & pl.col("step").is_in(idle.to_list())
        )
        .group_by("step")
        .len()
        .sort("step")
        .collect()
    )
    if empty.height == 0:
        return None
    row = empty.row(0, named=True)
    return (
        empty.height,
        f"step {row['step']} launched {row['len']:,} calls and has no kernel, memcpy or memset",
    )


@_check
def idle_gap(trace: Trace) -> Found | None:
    """Steps where a device sits idle for one stretch longer than IDLE_GAP_SHARE of the span of
    the step's work on it (step_device_times: first start to last end of the work it launched)."""
    times = step_device_times(trace)
    idle = times.filter((pl.col("span_ns") > 0) & (pl.col("idle_ns") > IDLE_GAP_SHARE * pl.col("span_ns")))
    if idle.height == 0:
        return None
    worst = idle.sort([pl.col("idle_ns") / pl.col("span_ns"), "step"], descending=[True, False]).row(0, named=True)
    return (
        idle["step"].n_unique(),
        f"step {worst['step']}: device {worst['device']} idle for {_us(worst['idle_ns'])} in one stretch of the "
        f"{_us(worst['span_ns'])} its work spans ({worst['idle_ns'] / worst['span_ns']:.0%})",
    )


@_check
def comm_dominated(trace: Trace) -> Found | None:
    """Steps where collectives take more than COMM_SHARE of a device's busy time (both the unions
    of the step's own device work: step_device_times)."""
    times = step_device_times(trace)
    heavy = times.filter((pl.col("busy_ns") > 0) & (pl.col("comm_ns") > COMM_SHARE * pl.col("busy_ns")))
    if heavy.height == 0:
        return None
    worst = heavy.sort([pl.col("comm_ns") / pl.col("busy_ns"), "step"], descending=[True, False]).row(0, named=True)
    return (
        heavy["step"].n_unique(),
        f"step {worst['step']}: collectives are {worst['comm_ns'] / worst['busy_ns']:.0%} of device "
        f"{worst['device']}'s busy time ({_us(worst['comm_ns'])} of {_us(worst['busy_ns'])})",
    )


@per_trace(json="[{check, count, example}, ...]: one per check that found something, in HEALTH_KINDS order")
def health(trace: Trace) -> list[dict[str, Any]]:
    """Every finding of the trace's health checks, in HEALTH_CHECKS order: [{"check", "count",
    "example"}, ...]; [] for a healthy trace."""
    return [found for name in HEALTH_KINDS if (found := _REGISTRY[name](trace)) is not None]
