"""How close attention runs to the hardware: each attention call's work from its recorded shapes
(formulas.py states the conventions), its device time, achieved TFLOP/s and TB/s, and the share of
the roofline limit (rates.py): efficiency() by call group, step_efficiency() per collectors' step,
efficiency_block() as JSON-ready data for `summary --json` and the gate.

The parts, each a module of this floor: formulas (FLOPs and minimum bytes), serving (serving step annotations), shapes (an op's shape from the record),
attention_calls (the calls, their device work and their shapes), rates (peaks and the roofline maths);
where each op keeps its arguments is a name table, rules.op_readers.
Their public names are importable from here too.
Times are ns in the work, µs in the result columns that say so; TFLOP/s = 10^12 FLOP/s, TB/s = 10^12 bytes/s.
"""

from __future__ import annotations

from typing import Any, Mapping

import polars as pl

from dashboard.engine.analyses.attention_calls import (
    CONCRETE_COLUMN,
    attention_calls,
    attention_device_ns,
    attention_others,
)
from dashboard.engine.analyses.formulas import (
    BOTTOM_RIGHT,
    COLLECTOR_DTYPES,
    DTYPES,
    TOP_LEFT,
    attention_work,
    causal_pairs,
)
from dashboard.engine.analyses.rates import (
    EFFICIENCY_SCHEMA,
    LOST_REASON,
    STEP_SCHEMA,
    device_lost,
    device_matches,
    peak_frame,
    with_rates,
)
from dashboard.engine.analyses.serving import ServingBatch
from dashboard.engine.analyses.shapes import AttentionShape, collector_shape, kernel_causal, read_shape
from dashboard.engine.model.trace import GPU_CATEGORIES, Trace
from dashboard.engine.rules.peaks import DevicePeak


def efficiency(trace: Trace, peak: DevicePeak | Mapping[str, float] | None = None) -> pl.DataFrame:
    """Achieved rates of attention, one row per (op, kernel, shape, device) group (EFFICIENCY_SCHEMA):
    count (calls), kernels_per_call (the attention kernels a call's time sums), mean_us / total_us
    (attention device time per call / in all; on a CPU-only trace the op's span), other_us (the device
    time of what the calls launched beside their attention kernels, in all: attention_others), flops / bytes (per call), tflops (TFLOP/s) and tbps (TB/s)
    achieved, intensity (FLOP/byte), peak_tflops (dense peak for the dtype) and peak_tbps,
    roofline_tflops = min(peak_tflops, intensity * peak_tbps), pct_of_roofline (0..100), bound
    ('compute' or 'memory'), reason (why a number is missing). peak: a DevicePeak or a mapping such as
    {"bf16": 989.5, "bandwidth_tbps": 3.35} for a device the table lacks (or to replace its row)."""
    calls = attention_calls(trace)
    if calls.height == 0:
        return pl.DataFrame(schema=EFFICIENCY_SCHEMA)
    keys = ["op", "called", "kernel", "backend", "pass", "shape", "dtype", "device", "flops", "bytes", "reason"]
    groups = calls.group_by(keys, maintain_order=True).agg(
        pl.len().cast(pl.Int64).alias("count"),
        pl.col("kernels").mean().alias("kernels_per_call"),
        pl.col("time_ns").sum().alias("total_ns"),
        pl.col("time_ns").count().alias("timed"),
        (pl.col("other_ns").sum() / 1e3).alias("other_us"),
    )
    if device_lost(trace):  # the op spans left time launches: no rate
        groups = groups.with_columns(
            pl.lit(None, pl.Int64).alias("total_ns"),
            pl.lit(0, pl.UInt32).alias("timed"),
            pl.coalesce("reason", pl.lit(LOST_REASON)).alias("reason"),
        )
    table = with_rates(groups, peak_frame(trace, groups, peak))
    return table.sort("total_us", descending=True, nulls_last=True, maintain_order=True).select(
        list(EFFICIENCY_SCHEMA)
    )  # ties: call order


def step_efficiency(trace: Trace, peak: DevicePeak | Mapping[str, float] | None = None) -> pl.DataFrame:
    """The whole variant per step, for collectors' traces (one attention forward per step), naive
    variants included: one row (STEP_SCHEMA) with steps, mean_us (per step: the summed durations of
    the device events launched in the step; on a CPU-only trace the step's attention:: annotation),
    flops and bytes of the collector's shape, and the rates of efficiency()."""
    found = step_groups(trace)
    if found is None:
        return pl.DataFrame(schema=STEP_SCHEMA)
    groups, _ = found
    table = with_rates(groups, peak_frame(trace, groups, peak))
    return table.select(list(STEP_SCHEMA))


def step_groups(trace: Trace) -> tuple[pl.DataFrame, AttentionShape] | None:
    """(the whole step's row before its rates: variant, shape, dtype, device (id), steps, flops,
    bytes (the collector's shape's minimum), total_ns and timed (the steps' device time, see
    step_efficiency), reason; the collector's shape), or None on a trace without one."""
    shape = collector_shape(trace)
    if isinstance(shape, str):
        return None
    ev = trace.events.lazy().filter(pl.col("step").is_not_null())  # lazy: only the columns used are filtered
    if trace.has_gpu:
        work = ev.filter(pl.col("cat").is_in(GPU_CATEGORIES)).select("step", "device", "dur_ns").collect()
        device = (
            work["device"].drop_nulls().mode().sort().first() if work["device"].null_count() < work.height else None
        )
    else:
        work = (
            ev.filter(
                (pl.col("cat") == "user_annotation") & pl.col("name").cast(pl.String).str.starts_with("attention::")
            )
            .select("step", "dur_ns")
            .collect()
        )
        device = None
    per_step = work.group_by("step").agg(pl.col("dur_ns").sum())
    w = shape.work()
    lost = device_lost(trace)  # the attention:: spans left time launches: no rate
    groups = pl.DataFrame(
        {
            "variant": [trace.collector.get("variant")],
            "shape": [shape.describe()],
            "dtype": [shape.dtype],
            "device": [device],
            "steps": [per_step.height],
            "flops": [w.flops],
            "bytes": [w.bytes],
            "total_ns": [per_step["dur_ns"].sum() if per_step.height and not lost else None],
            "timed": [0 if lost else per_step.height],
            "reason": [LOST_REASON if lost else None if per_step.height else "no attention work inside any step"],
        },
        schema_overrides={"device": pl.Int64, "reason": pl.String, "total_ns": pl.Int64, "variant": pl.String},
    )
    return groups, shape


def efficiency_block(trace: Trace, peak: DevicePeak | Mapping[str, float] | None = None) -> dict[str, Any]:
    """The efficiency of attention as plain JSON-ready data for `summary --json`:
    {"device": {name, matched, matched_by, source, reason}, "calls", "measured" (calls with work,
    time and a roofline), "time_us" and "ideal_us" (over measured calls: device time, and the time
    at the roofline), "tflops" (achieved over measured calls), "pct_of_roofline" (100 * ideal / time:
    the gate's number; None when nothing was measured), "attention_device_ns" (the trace's
    attention device time, attention_device_ns()), "measured_device_ns" (the device time of the
    measured calls), "measured_share" (measured_device_ns / attention_device_ns, 0..1; None without
    attention time), "unmeasured_without_shapes" (True when every unmeasured call's time lacks
    shapes, i.e. has no FLOPs, rather than a roofline), "rows" (efficiency() as dicts), "reasons"
    (distinct reasons some rows have no number), "per_step" (step_efficiency() as dicts: the
    whole variant per step on collectors' traces, [] on others), "others" (attention_others() as
    dicts: what the attention ops launched beside their attention kernels, left out of its time),
    "other_device_ns" (their device time)}.

    The headline rests on most of the attention or says it cannot: when the measured calls cover less
    than MIN_COVERAGE of the attention device time, "pct_of_roofline" is None and "coverage_reason"
    says what they cover (it is also the first of "reasons"); "measured_pct_of_roofline" keeps the
    measured calls' own number."""
    table = efficiency(trace, peak)
    measured = table.filter(pl.col("pct_of_roofline").is_not_null())
    time_us = float(measured["total_us"].sum()) if measured.height else 0.0
    attention_ns = attention_device_ns(trace)
    measured_ns = int(round(time_us * 1e3))
    unmeasured = table.filter(pl.col("pct_of_roofline").is_null() & (pl.col("total_us").fill_null(0) > 0))
    ideal_us = (
        float((measured["flops"] * measured["count"] / measured["roofline_tflops"] / 1e6).sum())
        if measured.height
        else 0.0
    )
    flops = float((measured["flops"] * measured["count"]).sum()) if measured.height else 0.0
    device_ids = (
        trace.events.lazy()
        .filter(pl.col("cat") == "kernel")
        .select(pl.col("device").drop_nulls().unique().sort())
        .collect()
        .to_series()
        .to_list()
        if trace.has_gpu
        else []
    )
    match = device_matches(trace, [device_ids[0] if device_ids else None], peak)
    first = next(iter(match.values()))
    pct = 100 * ideal_us / time_us if time_us else None
    share = min(measured_ns / attention_ns, 1.0) if attention_ns else None
    coverage = coverage_reason(share) if pct is not None else None
    reasons = sorted({r for r in table["reason"].to_list() if r})
    others = attention_others(trace)
    return {
        "device": {
            "name": first.device.get("name") if first.device else None,
            "matched": first.peak.name if first.peak else None,
            "matched_by": first.matched_by,
            "source": first.peak.source if first.peak else None,
            "reason": first.reason,
        },
        "calls": int(table["count"].sum()) if table.height else 0,
        "measured": int(measured["count"].sum()) if measured.height else 0,
        "time_us": time_us,
        "ideal_us": ideal_us,
        "tflops": flops / time_us / 1e6 if time_us else None,
        "pct_of_roofline": pct if coverage is None else None,
        "measured_pct_of_roofline": pct,
        "coverage_reason": coverage,
        "attention_device_ns": attention_ns,
        "measured_device_ns": measured_ns,
        "measured_share": share,
        "unmeasured_without_shapes": bool(unmeasured.height) and unmeasured["flops"].null_count() == unmeasured.height,
        "rows": table.to_dicts(),
        "reasons": ([coverage] if coverage else []) + reasons,
        "per_step": step_efficiency(trace, peak).to_dicts(),
        "others": others.to_dicts(),
        "other_device_ns": int(round(float(others["total_us"].sum()) * 1e3)) if others.height else 0,
    }


# The share of the attention device time the measured calls must cover for a trace's % of the roofline.
MIN_COVERAGE = 0.5


def coverage_reason(share: float | None) -> str | None:
    """Why a trace's headline gives no % of the roofline: its measured calls cover less than
    MIN_COVERAGE of the attention device time (share, 0..1); None when they cover enough (or there is
    no attention time to cover)."""
    if share is None or share >= MIN_COVERAGE:
        return None
    percent = f"{100 * share:.0f}%" if share == 0 or share >= 0.01 else "<1%"
    return (
        f"the measured calls cover {percent} of the attention device time, less than {100 * MIN_COVERAGE:.0f}%: "
        "no percentage of the roofline for the trace"
    )


# Importable from here, where the callers (compare.fingerprint, the charts, the tests) look for them.
__all__ = [
    "BOTTOM_RIGHT",
    "COLLECTOR_DTYPES",
    "CONCRETE_COLUMN",
    "DTYPES",
    "EFFICIENCY_SCHEMA",
    "LOST_REASON",
    "MIN_COVERAGE",
    "STEP_SCHEMA",
    "TOP_LEFT",
    "AttentionShape",
    "ServingBatch",
    "attention_calls",
    "attention_device_ns",
    "attention_others",
    "attention_work",
    "causal_pairs",
    "coverage_reason",
    "efficiency",
    "efficiency_block",
    "kernel_causal",
    "read_shape",
    "step_efficiency",
    "step_groups",
]
