"""The review's tables by run: copies grouped by op chain (with their alarms), kernel families,
counts of kernel changes and of a sequence diff's ops, attention efficiency and the roofline's
points. Runs are passed as {label: Trace} in display order. Units: `*_us` columns are
microseconds, `*_bytes` bytes, `share` a fraction 0..1."""

from __future__ import annotations

import polars as pl

from dashboard.engine.analyses.rates import ROOFLINE_POINT_SCHEMA
from dashboard.engine.analyses.copies import copies_in_steps
from dashboard.engine.analyses.efficiency import efficiency_block
from dashboard.engine.analyses.kernels import family_per_step, per_step, step_count
from dashboard.engine.analyses.roofline import ROOFLINE_ROW_SCHEMA, own_roofline
from dashboard.engine.compare.diff import CHANGES
from dashboard.engine.compare.speed import step_time_column
from dashboard.engine.model.constants import COPY_ALARM_BYTES, COPY_ALARM_SHARE
from dashboard.engine.model.trace import Trace, per_trace

COPY_GROUP_SCHEMA: dict[str, pl.DataType] = {
    "run": pl.String,
    "kind": pl.String,
    "op_chain": pl.String,
    "origin": pl.String,
    "hidden": pl.Boolean,
    "copy_class": pl.String,
    "count": pl.Int64,
    "per_step": pl.Float64,
    "bytes_per_step": pl.Float64,
    "us_per_step": pl.Float64,
    "share": pl.Float64,
    "alarm": pl.Boolean,
}


def step_time_total_ns(trace: Trace) -> int:
    """The time the step-time statistics use, summed over all steps (ns): device busy time on
    GPU traces, the CPU step span otherwise (the same choice as speed.step_time)."""
    return int(per_step(trace)[step_time_column(trace)].sum() or 0)


def copy_groups(
    runs: dict[str, Trace], alarm_share: float = COPY_ALARM_SHARE, alarm_bytes: float = COPY_ALARM_BYTES
) -> pl.DataFrame:
    """Copies of every run grouped by (kind, op chain): run, kind, op_chain (' > '-joined,
    outermost op first), origin, hidden, copy_class (copies.COPY_CLASSES: hidden, requested,
    autograd, communication, unattributed; only hidden ones are alarms), count, per_step (count / steps), bytes_per_step (None
    when the trace does not tell the size), us_per_step (µs), share (copy time / step time, the
    step time being device busy time on GPU traces and the step span on CPU traces), alarm (a
    hidden chain that costs at least `alarm_share` of the step or `alarm_bytes` bytes a step).
    Hidden copies first, then by time."""
    frames = []
    for label, trace in runs.items():
        table = copies_in_steps(trace)
        if table.height == 0:
            continue
        n = step_count(trace)
        total = step_time_total_ns(trace) or None
        frames.append(
            table.group_by("kind", "op_chain", "origin", "hidden", "copy_class")
            .agg(
                pl.len().cast(pl.Int64).alias("count"),
                pl.when(pl.col("bytes").is_null().all()).then(None).otherwise(pl.col("bytes").sum()).alias("bytes"),
                pl.col("dur_ns").sum().alias("dur_ns"),
            )
            .select(
                pl.lit(label).alias("run"),
                "kind",
                pl.col("op_chain").list.join(" > "),
                "origin",
                "hidden",
                "copy_class",
                "count",
                (pl.col("count") / n).alias("per_step"),
                (pl.col("bytes") / n).cast(pl.Float64).alias("bytes_per_step"),
                (pl.col("dur_ns") / n / 1000.0).alias("us_per_step"),
                (pl.col("dur_ns") / total if total else pl.lit(None)).cast(pl.Float64).alias("share"),
            )
        )
    if not frames:
        return pl.DataFrame(schema=COPY_GROUP_SCHEMA)
    out = (
        pl.concat(frames)
        .with_columns(
            (
                pl.col("hidden")
                & (
                    (pl.col("share").fill_null(0.0) >= alarm_share)
                    | (pl.col("bytes_per_step").fill_null(0.0) >= alarm_bytes)
                )
            ).alias("alarm")
        )
        .cast(COPY_GROUP_SCHEMA)
    )
    order = {label: i for i, label in enumerate(runs)}
    return (
        out.with_columns(pl.col("run").replace_strict(order, return_dtype=pl.Int64).alias("_order"))
        .sort(
            ["_order", "hidden", "us_per_step", "kind", "op_chain", "origin", "copy_class"],  # ties in a fixed order
            descending=[False, True, True, False, False, False, False],
            nulls_last=True,
        )
        .drop("_order")
    )


def families(runs: dict[str, Trace]) -> pl.DataFrame:
    """Device work by kernel family per run, averaged over the run's steps: run, family,
    count_per_step, us_per_step (µs)."""
    frames = []
    for label, trace in runs.items():
        n = step_count(trace)
        fam = family_per_step(trace)
        frames.append(
            fam.group_by("family")
            .agg(
                (pl.col("count").sum() / n).alias("count_per_step"),
                (pl.col("total_ns").sum() / n / 1000.0).alias("us_per_step"),
            )
            .select(pl.lit(label).alias("run"), "family", "count_per_step", "us_per_step")
            .sort("family")
        )
    schema = {"run": pl.String, "family": pl.String, "count_per_step": pl.Float64, "us_per_step": pl.Float64}
    if not frames:
        return pl.DataFrame(schema=schema)
    return pl.concat(frames).cast(schema)


KERNEL_CHANGES: tuple[str, ...] = tuple(c for c in CHANGES if c != "same")  # diff.CHANGES, but 'same'
SEQUENCE_OPS: tuple[str, ...] = ("equal", "delete", "insert", "replace")  # diff.sequence_diff's ops


def kernel_change_counts(changes: pl.DataFrame, runs: list[str]) -> pl.DataFrame:
    """How many distinct kernels (or ops) changed against the baseline, by kind of change. `changes`:
    diff.kernel_diff (or diff.op_diff) frames of several runs stacked, with a `run` column; `runs`: the runs to list,
    in order (a run without any change gets zeros). Columns: run, then one Int64 count per kind
    of change that occurs, in KERNEL_CHANGES order (kinds not known there last)."""
    changed = changes.filter(pl.col("change") != "same")
    kinds = set(changed["change"].to_list())
    present = [c for c in KERNEL_CHANGES if c in kinds] + sorted(kinds - set(KERNEL_CHANGES))
    out = pl.DataFrame({"run": runs}, schema={"run": pl.String})
    if not present:
        return out
    counts = changed.group_by("run").agg(*[(pl.col("change") == c).sum().cast(pl.Int64).alias(c) for c in present])
    return out.join(counts, on="run", how="left", maintain_order="left").with_columns(pl.col(present).fill_null(0))


def sequence_counts(seq: pl.DataFrame) -> dict[str, int]:
    """How many aligned positions of a diff.sequence_diff frame have each op: {op: count} for
    every op in SEQUENCE_OPS (0 when absent)."""
    counts = dict(seq.group_by("op").len().iter_rows())
    return {op: int(counts.get(op, 0)) for op in SEQUENCE_OPS}


EFFICIENCY_SCHEMA: dict[str, pl.DataType] = {
    "run": pl.String,
    "measure": pl.String,
    "device": pl.String,
    "calls": pl.Int64,
    "measured": pl.Int64,
    "tflops": pl.Float64,
    "pct_of_roofline": pl.Float64,
    "reason": pl.String,
}
MEASURE_STEP = "whole step"  # the collector's shape over the step's device time (naive variants included)
MEASURE_OPS = "attention ops"  # the recorded attention calls with their shapes and kernels


@per_trace(json="{device, calls, measured, time_us, ..., tflops, pct_of_roofline, rows, reasons, per_step, ...}")
def _efficiency(trace: Trace) -> dict:
    """efficiency.efficiency_block, once per trace (the table and the chart both read it)."""
    return efficiency_block(trace)


def attention_efficiency(runs: dict[str, Trace]) -> pl.DataFrame:
    """How close each run's attention comes to its device's roofline, one row per run
    (EFFICIENCY_SCHEMA), and on collectors' traces a second row for their attention calls when
    they have any: measure (MEASURE_STEP first on collectors' traces, where every variant does the
    same attention per step, so naive and fused variants compare; MEASURE_OPS, the number `summary`
    and `check` give, on every trace with attention calls), device
    (the peaks table's row, or the device's name), calls and measured (attention calls found, and
    those with work, time and a roofline; None for MEASURE_STEP), tflops (achieved TFLOP/s),
    pct_of_roofline (0..100; None when there is no roofline: a CPU, a device the peaks table
    lacks) and reason (why a number is missing; None when both are there). From
    efficiency.efficiency_block; nothing is estimated."""
    rows = []
    for label, trace in runs.items():
        block = _efficiency(trace)
        device = block["device"]["matched"] or block["device"]["name"] or ("cpu" if not trace.has_gpu else None)
        step = block["per_step"][0] if block["per_step"] else None
        if step is not None:
            rows.append(
                {
                    "run": label,
                    "measure": MEASURE_STEP,
                    "device": step["device"] or device,
                    "calls": block["calls"],
                    "measured": None,
                    "tflops": step["tflops"],
                    "pct_of_roofline": step["pct_of_roofline"],
                    "reason": step["reason"],
                }
            )
            if block["calls"] == 0:
                continue  # a naive variant: no attention call of its own, the whole step is its measure
        reasons = block["reasons"] or ([block["device"]["reason"]] if block["device"]["reason"] else [])
        if block["calls"] == 0:
            reason = "no attention op or kernel the engine recognises, and no collector metadata to give the shape"
        elif block["measured"] == 0:
            reason = "; ".join(reasons) or "no attention call could be measured"
        elif block["measured"] < block["calls"]:
            reason = f"{block['calls'] - block['measured']:,} of {block['calls']:,} calls not measured: " + "; ".join(
                reasons
            )
        else:
            reason = None
        rows.append(
            {
                "run": label,
                "measure": MEASURE_OPS,
                "device": device,
                "calls": block["calls"],
                "measured": block["measured"],
                "tflops": block["tflops"],
                "pct_of_roofline": block["pct_of_roofline"],
                "reason": reason,
            }
        )
    return pl.DataFrame(rows, schema=EFFICIENCY_SCHEMA)


ROOFLINE_SCHEMA = ROOFLINE_POINT_SCHEMA  # one schema for the roofline's points (analyses.rates)
LEFT_OUT_SCHEMA: dict[str, pl.DataType] = {
    "run": pl.String,
    "measure": pl.String,
    "name": pl.String,
    "reason": pl.String,
}


def _roofline_rows(runs: dict[str, Trace]) -> pl.DataFrame:
    """roofline.own_roofline of every run, with its run label; the whole step named by its variant."""
    frames = [
        own_roofline(trace).with_columns(
            pl.lit(label).alias("run"),
            pl.when(pl.col("measure") == MEASURE_STEP)
            .then(pl.coalesce("name", pl.lit(label)))
            .otherwise(pl.col("name"))
            .alias("name"),
        )
        for label, trace in runs.items()
    ]
    return (
        pl.concat(frames, how="vertical_relaxed")
        if frames
        else pl.DataFrame(schema={"run": pl.String, **ROOFLINE_ROW_SCHEMA})
    )


def roofline_points(runs: dict[str, Trace]) -> pl.DataFrame:
    """The points of a roofline chart (ROOFLINE_SCHEMA): each run's attention op/kernel groups
    (measure MEASURE_OPS; name = the op, else the kernel) and, on collectors' traces, the whole step
    (MEASURE_STEP; name = the variant), each at the bytes its own kernels move, read from the
    recorded shapes (roofline.py: naive attention's five passes over the scores matrix included, a
    fused kernel's Q, K, V and O): bytes per call (per step), intensity in FLOP/byte, tflops and
    peak_tflops in TFLOP/s, tbps and peak_tbps in TB/s (peaks None without a roofline),
    pct_of_roofline and bound against the roof at that intensity. Only rows with an achieved rate
    and known bytes: roofline_left_out lists the others that have a rate."""
    rows = _roofline_rows(runs)
    return rows.filter(pl.col("tflops").is_not_null() & pl.col("intensity").is_not_null()).select(list(ROOFLINE_SCHEMA))


def roofline_left_out(runs: dict[str, Trace]) -> pl.DataFrame:
    """The roofline's missing points (LEFT_OUT_SCHEMA: run, measure, name, reason): rows with an
    achieved rate whose bytes cannot be told from the trace (an inductor-generated kernel, a CUDA
    graph's replay, an op without a byte rule), left out rather than guessed."""
    rows = _roofline_rows(runs)
    return rows.filter(pl.col("tflops").is_not_null() & pl.col("intensity").is_null()).select(list(LEFT_OUT_SCHEMA))
