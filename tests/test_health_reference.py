"""The health checks that read event names as text only where they need them (duration_overflow,
_overflowed_steps, device_before_launch, device_event_without_launch, _overlaps: the names column
is Categorical, and reading it whole as text was most of health's time and the first open's peak)
against the obvious versions they replaced, which read every event's name as text: equal findings
on every real trace in tests/data, and on the bundled H200 run with each fault injected (a long
op, a step that runs past every event, a kernel before its launch, one without its launch,
kernels overlapping), so that the rows and examples the findings give are compared too.
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import oracle
from dashboard.engine import load_trace
from dashboard.engine.analyses import health
from dashboard.engine.model.formatting import ns_duration as _us
from dashboard.engine.model.trace import LAUNCH_CATEGORIES
from dashboard.engine.rules.devices import accelerator, unlaunched_by_design
from dashboard.engine.rules.ops import STEP_MARK
from dashboard.engine.rules.peaks import dependent_launch, device_properties

DATA = Path(__file__).parent / "data"
REAL = sorted(DATA.glob("*.json.gz"))
NAIVE = Path(__file__).parent.parent / "sample_traces" / "h200" / "naive.json.gz"
LAUNCH = ("cuda_runtime", "cuda_driver")
DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")


def device_events(trace) -> pl.DataFrame:
    """The device events' columns the checks read, names as text (what health read them as first)."""
    return trace.events.filter(pl.col("cat").is_in(DEVICE)).select(
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


def slow_longer(trace) -> pl.DataFrame:
    """duration_overflow's long events as first written: every name read as text."""
    ev = trace.events
    span = int(ev.select(pl.col("ts_ns").max() - pl.col("ts_ns").min()).item() or 0)
    timed = ev.filter(
        ~pl.col("cat").is_in(["user_annotation", "gpu_user_annotation", "python_function"]),
        ~pl.col("name").cast(pl.String).str.starts_with(STEP_MARK),
    )
    return timed.filter(pl.col("dur_ns") > 2 * span)


def slow_overflowed_steps(trace) -> pl.DataFrame:
    if trace.steps.height == 0 or trace.implicit_step:
        return pl.DataFrame(schema={"name": pl.String, "written_ns": pl.Int64, "dur_ns": pl.Int64})
    written = (
        trace.events.filter(
            (pl.col("cat") != "gpu_user_annotation") & pl.col("name").cast(pl.String).str.starts_with(STEP_MARK)
        )
        .select(pl.col("name").cast(pl.String), pl.col("ts_ns").alias("start_ns"), pl.col("dur_ns").alias("written_ns"))
        .unique(["name", "start_ns"], keep="first")
    )
    return (
        trace.steps.select("name", "start_ns", "dur_ns")
        .join(written, on=["name", "start_ns"], how="inner")
        .filter(pl.col("written_ns") > pl.col("dur_ns"))
        .sort("start_ns")
        .select("name", "written_ns", "dur_ns")
    )


def slow_device_before_launch(trace) -> tuple[int, str] | None:
    dev = device_events(trace).filter(pl.col("launch").is_not_null())
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
    return early.height, f"{worst['name'][:80]} starts {_us(worst['skew'])} before its launch {worst['launch_name']}"


def slow_overlaps(trace) -> pl.DataFrame:
    """_overlaps as first written: the device events' names read as text before anything else."""
    dev = device_events(trace).sort(["device", "stream", "ts_ns", "id"], nulls_last=True)
    if dev.height < 2:
        return dev.clear().with_columns(
            pl.lit(None, pl.String).alias("prev_name"), pl.lit(0).alias("overlap_ns"), pl.lit(False).alias("dependent")
        )
    lane = (pl.col("device").fill_null(-1).cast(pl.Int64) * (1 << 32)) + pl.col("stream").fill_null(-1).cast(pl.Int64)
    dev = dev.with_columns(lane.alias("lane"), (pl.col("ts_ns") + pl.col("dur_ns")).alias("end_ns"))
    dev = dev.with_columns(
        pl.col("end_ns").cum_max().shift(1).over("lane").alias("prev_end"),
        pl.col("dur_ns").shift(1).over("lane").alias("prev_dur"),
        pl.col("name").shift(1).over("lane").alias("prev_name"),
    )
    hits = dev.filter(
        pl.col("prev_end").is_not_null() & (pl.col("ts_ns") < pl.col("prev_end") - health.OVERLAP_TOLERANCE_NS)
    )
    capable = {
        d for d in hits["device"].unique().drop_nulls().to_list() if dependent_launch(device_properties(trace.meta, d))
    }
    overlap = pl.col("prev_end") - pl.col("ts_ns")
    return hits.with_columns(overlap.alias("overlap_ns")).with_columns(
        (
            pl.col("device").is_in(list(capable))
            & (pl.col("end_ns") > pl.col("prev_end"))
            & (2 * pl.col("overlap_ns") < pl.min_horizontal("dur_ns", "prev_dur"))
            & (pl.len().over("prev_name", "name") >= health.DEPENDENT_REPEATS)
        ).alias("dependent")
    )


def slow_device_event_without_launch(trace) -> tuple[int, str] | None:
    if not trace.events["cat"].is_in(LAUNCH_CATEGORIES).any():
        return None
    lost = device_events(trace).filter(pl.col("launch").is_null())
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
    return lost.height, f"{row['name'][:80]} (correlation {row['correlation']}) has no launch call in the trace{said}"


def fast_longer(trace) -> pl.DataFrame:
    """The long events health.duration_overflow now counts (the same query, its filters reordered)."""
    ev = trace.events
    span = int(ev.select(pl.col("ts_ns").max() - pl.col("ts_ns").min()).item() or 0)
    return ev.filter(pl.col("dur_ns") > 2 * span).filter(
        ~pl.col("cat").is_in(["user_annotation", "gpu_user_annotation", "python_function"]),
        ~pl.col("name").cast(pl.String).str.starts_with(STEP_MARK),
    )


def assert_same(trace) -> None:
    assert_frame_equal(fast_longer(trace), slow_longer(trace))
    assert_frame_equal(health._overflowed_steps(trace), slow_overflowed_steps(trace))
    fast, slow = health._overlaps(trace), slow_overlaps(trace)
    if slow.height == 0:  # the old version's empty table had its own columns; the one schema now
        assert fast.height == 0 and list(fast.schema.items()) == list(health.OVERLAPS_SCHEMA.items())
    else:
        assert_frame_equal(fast.select(slow.columns), slow)
    for name, slow in (
        ("device_before_launch", slow_device_before_launch),
        ("device_event_without_launch", slow_device_event_without_launch),
    ):
        fast = health._REGISTRY[name](trace)
        assert (None if fast is None else (fast["count"], fast["example"])) == slow(trace)


@pytest.mark.parametrize("path", REAL, ids=[p.name for p in REAL])
def test_the_name_reading_checks_equal_their_slow_versions_on_every_real_trace(path):
    assert_same(load_trace(path))


def long_op(d: dict) -> None:
    events = oracle.complete(d)
    starts = [float(e["ts"]) for e in events]
    ends = [float(e["ts"]) + float(e.get("dur", 0)) for e in events]
    [e for e in events if e.get("cat") == "cpu_op"][3]["dur"] = 10 * (max(ends) - min(starts))


def overflowed_step(d: dict) -> None:
    name, _, _ = oracle.step_spans(d)[-1]
    for step in (e for e in oracle.complete(d) if e.get("name") == name and e.get("cat") != "gpu_user_annotation"):
        step["dur"] = float(step["dur"]) * 20


def skewed_kernel(d: dict) -> None:
    events = oracle.complete(d)
    first = min((e for e in events if e.get("cat") in DEVICE), key=lambda e: float(e["ts"]))
    corr = first["args"]["correlation"]
    launch = next(e for e in events if e.get("cat") in LAUNCH and e["args"].get("correlation") == corr)
    first["ts"] = float(launch["ts"]) - 50.0


def lost_launch(d: dict) -> None:
    events = oracle.complete(d)
    kernel = sorted((e for e in events if e.get("cat") in DEVICE), key=lambda e: float(e["ts"]))[2]
    corr = kernel["args"]["correlation"]
    d["traceEvents"] = [
        e for e in d["traceEvents"] if not (e.get("cat") in LAUNCH and e.get("args", {}).get("correlation") == corr)
    ]


def overlap(d: dict) -> None:
    events = sorted((e for e in oracle.complete(d) if e.get("cat") in DEVICE), key=lambda e: float(e["ts"]))
    events[5]["ts"] = float(events[4]["ts"]) + float(events[4]["dur"]) - 5.0


def staggered(d: dict) -> None:
    """Every other kernel starts 2 µs under its predecessor's tail: on the H200, the pairs that
    repeat across steps are programmatic dependent launch (dependent), the rest faults."""
    kernels = sorted((e for e in oracle.complete(d) if e.get("cat") == "kernel"), key=lambda e: float(e["ts"]))
    for a, b in zip(kernels[::2], kernels[1::2]):
        if min(float(a["dur"]), float(b["dur"])) > 6.0:
            b["ts"] = float(a["ts"]) + float(a["dur"]) - 2.0


@pytest.mark.skipif(not NAIVE.is_file(), reason="the bundled H200 collection is missing")
@pytest.mark.parametrize(
    "fault, finds",
    [
        (long_op, fast_longer),
        (overflowed_step, health._overflowed_steps),
        (skewed_kernel, None),
        (overlap, health._overlaps),
        (staggered, None),
        (lost_launch, None),
    ],
    ids=["long_op", "overflowed_step", "skewed_kernel", "overlap", "staggered", "lost_launch"],
)
def test_they_are_equal_where_each_finds_its_fault(fault, finds, tmp_path):
    d = copy.deepcopy(oracle.raw(NAIVE))
    fault(d)
    path = tmp_path / "fault.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump(d, fh)
    trace = load_trace(path)
    # the fault is found, so the rows and the example are compared, not only two empty answers
    if fault is staggered:
        assert health._overlaps(trace)["dependent"].any()
    elif fault is lost_launch:
        assert health._REGISTRY["device_event_without_launch"](trace)["count"] == 1
    elif finds is None:
        assert health._REGISTRY["device_before_launch"](trace)["count"] == 1
    else:
        assert finds(trace).height == 1
    assert_same(trace)
