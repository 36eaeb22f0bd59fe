"""The roofline maths: a device's peaks (rules.peaks, or the user's), and the achieved rates of rows
with FLOPs, bytes and device time against them: TFLOP/s, TB/s, intensity, the roof at that
intensity, the share of it, and what bounds it. With the one typed schema of those columns, which
efficiency's tables, the roofline's rows and the review's roofline points share."""

from __future__ import annotations

from typing import Mapping, Sequence

import polars as pl

from dashboard.engine.analyses.formulas import DTYPES
from dashboard.engine.rules.devices import accelerator, gpu_vendor
from dashboard.engine.model.trace import Trace
from dashboard.engine.rules.peaks import DeviceMatch, DevicePeak, device_properties, match_device, with_override


# The rate columns every table of achieved rates ends with, typed once: flops and bytes per call
# (per step), tflops / tbps achieved, intensity (FLOP/byte), the device's peaks, the roof at that
# intensity, pct_of_roofline (0..100), bound ('compute' or 'memory'), reason (why a number is missing).
RATE_SCHEMA: dict[str, pl.DataType] = {
    "flops": pl.Int64,
    "bytes": pl.Int64,
    "tflops": pl.Float64,
    "tbps": pl.Float64,
    "intensity": pl.Float64,
    "peak_tflops": pl.Float64,
    "peak_tbps": pl.Float64,
    "roofline_tflops": pl.Float64,
    "pct_of_roofline": pl.Float64,
    "bound": pl.String,
    "reason": pl.String,
}
# efficiency.efficiency: one row per (op, kernel, shape, device) group of attention calls.
EFFICIENCY_SCHEMA: dict[str, pl.DataType] = {
    "op": pl.String,
    "called": pl.String,
    "kernel": pl.String,
    "backend": pl.String,
    "pass": pl.String,
    "shape": pl.String,
    "dtype": pl.String,
    "device": pl.String,
    "count": pl.Int64,
    "kernels_per_call": pl.Float64,
    "mean_us": pl.Float64,
    "total_us": pl.Float64,
    "other_us": pl.Float64,
    **RATE_SCHEMA,
}
# efficiency.step_efficiency: the whole variant per step of a collectors' trace.
STEP_SCHEMA: dict[str, pl.DataType] = {
    "variant": pl.String,
    "shape": pl.String,
    "dtype": pl.String,
    "device": pl.String,
    "steps": pl.Int64,
    "mean_us": pl.Float64,
    **RATE_SCHEMA,
}
# roofline.roofline_rows: the attention's op groups and whole step at the bytes their own kernels move.
# Their bytes are whole numbers too, but a chart's coordinate: Float64, as the reviews' JSON has always
# written them (a structural change leaves that output as it is).
ROOFLINE_ROW_SCHEMA: dict[str, pl.DataType] = {
    "measure": pl.String,
    "name": pl.String,
    "backend": pl.String,
    "shape": pl.String,
    "dtype": pl.String,
    "device": pl.String,
    "count": pl.Int64,
    "mean_us": pl.Float64,
    **RATE_SCHEMA,
    "bytes": pl.Float64,  # keeps its place among the rate columns
}
# A roofline chart's points (compare.review.roofline_points): each run's roofline rows, with rates.
ROOFLINE_POINT_SCHEMA: dict[str, pl.DataType] = {
    "run": pl.String,
    **{
        c: ROOFLINE_ROW_SCHEMA[c]
        for c in ("measure", "name", "backend", "shape", "dtype", "device", "count", "mean_us", "bytes", "intensity")
        + ("tflops", "tbps", "peak_tflops", "peak_tbps", "pct_of_roofline", "bound")
    },
}

CPU_REASON = "CPU trace: the peaks table holds GPUs only"
LOST_REASON = (
    "the file is cut before its device events, which Kineto writes after the host ops: the CPU spans "
    "left time the launches, not the attention"
)


def device_lost(trace: Trace) -> bool:
    """A trace of an accelerator, cut off before any of its device events was written: its CPU
    spans time the launches, so no rate is read from them (the cut warning says the same)."""
    return (
        trace.cut is not None
        and not trace.cut.events_whole
        and not trace.has_gpu
        and (accelerator(trace.raw_categories) or gpu_vendor(trace.meta)) is not None
    )


def device_matches(
    trace: Trace, devices: Sequence[int | None], peak: DevicePeak | Mapping[str, float] | None = None
) -> dict[int | None, DeviceMatch]:
    """The peak of each device id (None: the CPU of a CPU-only trace), user's peak laid over it."""
    out = {}
    for device in devices:
        if trace.has_gpu and device is not None:
            match = match_device(device_properties(trace.meta, device))
        else:
            match = DeviceMatch(None, None, {}, LOST_REASON if device_lost(trace) else CPU_REASON)
        out[device] = with_override(match, peak)
    return out


def _join_null_safe(left: pl.DataFrame, right: pl.DataFrame, on: list[str]) -> pl.DataFrame:
    """A left join where a null key matches a null key (polars' nulls_equal/join_nulls flag
    changed its name across the versions pyproject admits, so the keys are made null-free here)."""
    keys = [f"_key_{name}" for name in on]
    marked = [pl.col(name).cast(pl.String).fill_null("\x00").alias(key) for name, key in zip(on, keys)]
    return (
        left.with_columns(marked)
        .join(right.with_columns(marked).drop(on), on=keys, how="left", maintain_order="left")
        .drop(keys)
    )


def with_rates(groups: pl.DataFrame, peaks: pl.DataFrame) -> pl.DataFrame:
    """Add mean_us, total_us, tflops, tbps, intensity, peak and roofline columns, pct_of_roofline and
    bound to rows with flops and bytes (per call), total_ns over `timed` calls, device and dtype;
    `device` becomes the device's name and a missing peak fills `reason`."""
    # no timed call, zero device time, zero bytes or a zero roofline give no rate (null), never NaN or inf
    timed = pl.col("timed") > 0
    per_ns = pl.when(timed).then(pl.col("total_ns") / pl.col("timed"))
    rated = per_ns > 0
    intensity = pl.when(pl.col("bytes") > 0).then(pl.col("flops") / pl.col("bytes"))
    memory_roof = intensity * pl.col("peak_tbps")
    roof = pl.when(pl.col("peak_tflops").is_not_null() & memory_roof.is_not_null()).then(
        pl.min_horizontal("peak_tflops", memory_roof)
    )
    return (
        _join_null_safe(groups, peaks, ["device", "dtype"])
        .with_columns(
            (per_ns / 1e3).alias("mean_us"),
            pl.when(timed).then(pl.col("total_ns") / 1e3).alias("total_us"),
            pl.when(rated).then(pl.col("flops") / per_ns / 1e3).alias("tflops"),
            pl.when(rated).then(pl.col("bytes") / per_ns / 1e3).alias("tbps"),
            intensity.alias("intensity"),
            roof.alias("roofline_tflops"),
            pl.when(roof.is_not_null())
            .then(pl.when(pl.col("peak_tflops") <= memory_roof).then(pl.lit("compute")).otherwise(pl.lit("memory")))
            .alias("bound"),
        )
        .with_columns(
            pl.when(pl.col("roofline_tflops") > 0)
            .then(100 * pl.col("tflops") / pl.col("roofline_tflops"))
            .alias("pct_of_roofline")
        )
        .with_columns(
            pl.coalesce(
                "reason",
                pl.when(pl.col("flops").is_not_null() & pl.col("roofline_tflops").is_null()).then(
                    pl.col("peak_reason")
                ),
            ).alias("reason"),
            pl.col("device_name").alias("device"),
        )
    )


def peak_frame(trace: Trace, groups: pl.DataFrame, peak: DevicePeak | Mapping[str, float] | None) -> pl.DataFrame:
    """device, dtype -> device_name, peak_tflops, peak_tbps, peak_reason (why there is no roofline)."""
    pairs = groups.select("device", "dtype").unique().rows()
    matches = device_matches(trace, sorted({d for d, _ in pairs}, key=lambda d: (d is None, d or 0)), peak)
    rows = []
    for device, dtype in pairs:
        match = matches[device]
        kind = DTYPES.get(dtype or "", (None, 0))[0]
        tflops = match.peak.tflops(kind) if match.peak and kind else None
        tbps = match.peak.bandwidth_tbps if match.peak else None
        label = (
            match.peak.name
            if match.peak
            else (str(match.device.get("name") or "") or ("cpu" if device is None else f"device {device}"))
        )
        if match.peak is None:
            why = match.reason
        elif tflops is None or tbps is None:
            why = f"{label}: no published dense {kind} peak{' or bandwidth' if tbps is None else ''} in the peaks table: give it"
        else:
            why = None
        rows.append((device, dtype, label, tflops, tbps, why))
    schema = {
        "device": pl.Int64,
        "dtype": pl.String,
        "device_name": pl.String,
        "peak_tflops": pl.Float64,
        "peak_tbps": pl.Float64,
        "peak_reason": pl.String,
    }
    return pl.DataFrame(rows, schema=schema, orient="row")
