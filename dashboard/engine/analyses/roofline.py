"""Where attention sits on the roofline: each variant at the bytes its own kernels move, read from
the shapes the trace records, so that naive attention (which writes and reads the B*H*Sq*Sk scores
matrix five times over) is not drawn at the few bytes a fused kernel needs.

efficiency.py's `bytes` stay the attention's minimum (read Q, K, V once, write O once): the number
its % of the roofline, the gate and `summary` use. This module gives the roofline chart its own
bytes: what the kernels of a call, or of a whole step, read and write in device memory.

Where the bytes come from:
- a GPU kernel: the op whose launch call holds it (the innermost cpu_op around the launch), by the
  op rules below, from its Input Dims, Input types and (for reductions) Concrete Inputs. An op
  that launches more than one kernel has no bytes: how they split its work, and what passes
  between them, is not in the trace.
- a GPU memcpy: its recorded bytes, twice when it copies device to device (read and written in
  device memory), once otherwise; a GPU memset: its recorded bytes, written.
- a fused attention kernel replayed from a CUDA graph (no op, no shapes) whose collectors' trace
  gives the shape of the step's one attention call: that call's bytes (efficiency.attention_calls).
- on a CPU-only trace the ops are the work: each op with a rule counts its bytes; an op whose work
  is done by the ops it calls (aten::matmul, aten::masked_fill, aten::clone, aten::softmax, an
  attention op that computes through aten::bmm...) counts theirs instead.

Op rules: roofline_bytes.py, which gives one op's bytes.

Units: bytes; FLOP; µs in `*_us`; TFLOP/s and TB/s as efficiency.py.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import polars as pl

from dashboard.engine.analyses.attention_calls import _attention_work, attention_calls, nearest_marked
from dashboard.engine.analyses.efficiency import step_groups
from dashboard.engine.model.trace import LAUNCH_CATEGORIES
from dashboard.engine.analyses.classes import BOOKKEEPING_KINDS, name_is, names_where
from dashboard.engine.analyses.rates import LOST_REASON, ROOFLINE_ROW_SCHEMA, device_lost, peak_frame, with_rates
from dashboard.engine.analyses.roofline_bytes import ELEMENT_BYTES, OP_RULES, _op_tree, element_bytes, op_bytes
from dashboard.engine.analyses.shapes import _collector_causal, collector_shape
from dashboard.engine.model.trace import GPU_CATEGORIES, Trace, per_trace
from dashboard.engine.rules.peaks import DevicePeak


OWN_BYTES_WORDS = "bytes its own kernels move, from the recorded shapes"  # what a roofline point's bytes are


# --- the trace: each unit of work's bytes --------------------------------------------------------

BYTES_SCHEMA: dict[str, pl.DataType] = {"id": pl.Int64, "step": pl.Int64, "bytes": pl.Int64, "reason": pl.String}


@per_trace(schema=BYTES_SCHEMA)
def device_bytes(trace: Trace) -> pl.DataFrame:
    """The bytes of the device events a roofline point sums (BYTES_SCHEMA: id, step, bytes, reason:
    why bytes is null): those the attention calls launched and the fused attention kernels, and on
    a collectors' trace every device event. Empty on a CPU-only trace (see _OpTree)."""
    ev = trace.events
    gpu = ev.filter(pl.col("cat").is_in(GPU_CATEGORIES)).select(
        "id",
        pl.col("cat").cast(pl.String),
        pl.col("name").cast(pl.String),
        "bytes",
        pl.col("launch").fill_null(-1),
        "step",
    )
    # only what a roofline point sums: the attention calls' work, and every step's on a collectors' trace
    work = _attention_work(trace)
    if isinstance(collector_shape(trace), str):
        called = (
            work[0].filter((pl.col("owner") >= 0) | pl.col("attention"))["id"]
            if work is not None
            else pl.Series([], dtype=pl.Int64)
        )
        # a list: polars 1.20 reads an imploded Series as one list per row
        gpu = gpu.filter(pl.col("id").is_in(called.to_list()))
    if gpu.height == 0:
        return pl.DataFrame(schema=BYTES_SCHEMA)
    parent = ev["parent"].fill_null(-1).to_numpy()
    names = ev["name"].cast(pl.String)
    graph_calls = set(names_where(trace, "launch", {"graph"}, LAUNCH_CATEGORIES))
    is_op = ev.select((pl.col("cat") == "cpu_op") & ~name_is(trace, "op_kind", BOOKKEEPING_KINDS))["cat"].to_numpy()
    launch = gpu["launch"].to_numpy()
    start = np.where(launch >= 0, parent[np.maximum(launch, 0)], -1)
    op = nearest_marked(parent, start, is_op)
    kernels_of = {}
    for o, cat in zip(op.tolist(), gpu["cat"].to_list()):
        if cat == "kernel" and o >= 0:
            kernels_of[o] = kernels_of.get(o, 0) + 1
    columns = ["input_dims", "input_types"] + (["concrete_inputs"] if "concrete_inputs" in ev.columns else [])
    info = {c: ev[c].cast(pl.String) for c in columns}
    hint = _collector_causal(trace)
    fused = _fused_kernels(trace)
    cache: dict[tuple, int | str] = {}
    rows = []
    for (ident, cat, name, size, at, step), o in zip(gpu.iter_rows(), op.tolist()):
        moved: int | str
        if ident in fused:
            moved = fused[ident]
        elif cat == "gpu_memcpy":
            twice = "DtoD" in name or "Device -> Device" in name
            moved = size * (2 if twice else 1) if size is not None else f"{name}: its bytes are not in the trace"
        elif cat == "gpu_memset":
            moved = size if size is not None else f"{name}: its bytes are not in the trace"
        elif at < 0:
            moved = f"{name[:80]}: its launch call is not in the trace, so neither is the op that shaped it"
        elif names[at] in graph_calls:
            moved = f"{name[:80]}: replayed from a CUDA graph ({names[at]}): no op records its shapes"
        elif o < 0:
            moved = f"{name[:80]}: no op around its launch records its shapes"
        elif kernels_of.get(o, 0) > 1:
            moved = (
                f"{names[o]} launches {kernels_of[o]} kernels: how its bytes split between them (and what passes "
                "between them) is not in the trace"
            )
        else:
            key = (names[o], *(info[c][o] for c in columns))
            if key not in cache:
                cache[key] = op_bytes(
                    names[o],
                    info["input_dims"][o],
                    info["input_types"][o],
                    info["concrete_inputs"][o] if "concrete_inputs" in info else None,
                    hint,
                )
            moved = cache[key]
        rows.append((ident, step, moved if isinstance(moved, int) else None, moved if isinstance(moved, str) else None))
    return pl.DataFrame(rows, schema=BYTES_SCHEMA, orient="row")


def _fused_kernels(trace: Trace) -> dict[int, int | str]:
    """The fused attention kernels (efficiency's 'attention' device work) whose call efficiency.
    attention_calls has bytes for: kernel id -> the call's bytes (read Q, K, V, write O: what a fused
    kernel moves), or why not when the call has more than one of them (SageAttention's quantization
    kernels and its attention kernel: what passes between them is not in the trace). That covers a
    kernel launched inside an op without a rule of its own (cuDNN's aten::_cudnn_attention_forward
    inside aten::_scaled_dot_product_cudnn_attention) and, on collectors' traces, one replayed from a
    CUDA graph with no op at all (the call is the kernel, shaped by the collector's metadata)."""
    found = _attention_work(trace)
    if found is None:
        return {}
    calls = attention_calls(trace).select("call", pl.coalesce("op", "kernel").alias("op"), "bytes")
    owned = (
        found[0]
        .filter(pl.col("attention") & pl.col("call").is_not_null())
        .select("id", "call")
        .join(calls.filter(pl.col("bytes").is_not_null()), on="call", how="inner")
        .with_columns(pl.len().over("call").alias("fused"))
    )
    out: dict[int, int | str] = {}
    for ident, op, moved, fused in owned.select("id", "op", "bytes", "fused").iter_rows():
        out[ident] = (
            moved
            if fused == 1
            else (
                f"{op} launches {fused} fused attention kernels: how its bytes split between them is not in the trace"
            )
        )
    return out


def call_bytes(trace: Trace) -> pl.DataFrame:
    """The bytes each attention call's own work moves (efficiency.attention_calls' calls): call,
    moved (null when unknown), moved_reason. On a GPU trace the sum over the device events whose
    time is the call's (its attention kernels, or all its work on the math path: not a KV-cache
    write or a fill beside the attention kernel); on a CPU-only trace the call's ops (see _OpTree)."""
    calls = attention_calls(trace)
    schema = {"call": pl.Int64, "moved": pl.Int64, "moved_reason": pl.String}
    if calls.height == 0:
        return pl.DataFrame(schema=schema)
    if not trace.has_gpu:
        tree = _op_tree(trace)
        rows = []
        for call in calls["call"].to_list():
            got = tree.safe_bytes(call)
            rows.append((call, None if isinstance(got, str) else got, got if isinstance(got, str) else None))
        return pl.DataFrame(rows, schema=schema, orient="row")
    found = _attention_work(trace)
    # the events the call's time sums (efficiency's counted work: its attention kernels), by call
    owner = (
        found[0].filter(pl.col("counted") & pl.col("call").is_not_null()).select("id", pl.col("call").alias("owner"))
        if found is not None
        else pl.DataFrame(schema={"id": pl.Int64, "owner": pl.Int64})
    )
    per_event = owner.join(device_bytes(trace).select("id", "bytes", "reason"), on="id", how="inner")
    summed = per_event.group_by("owner").agg(
        pl.when(pl.col("bytes").null_count() == 0).then(pl.col("bytes").sum()).alias("moved"),
        pl.col("reason").drop_nulls().first().alias("moved_reason"),
        pl.col("reason").drop_nulls().len().alias("unknown"),
    )
    return (
        calls.select("call")
        .join(summed, left_on="call", right_on="owner", how="left", maintain_order="left")
        .with_columns(
            pl.when(pl.col("moved").is_null())
            .then(
                pl.coalesce(
                    _more(pl.col("moved_reason"), pl.col("unknown")), pl.lit("no device work launched by the call")
                )
            )
            .alias("moved_reason")
        )
        .select(list(schema))
    )


def _more(reason: pl.Expr, unknown: pl.Expr) -> pl.Expr:
    """'<first reason>' or '<first reason> (and n more units of work without bytes)'."""
    return (
        pl.when(unknown > 1)
        .then(pl.format("{} (and {} more units of work without bytes)", reason, unknown - 1))
        .otherwise(reason)
    )


def step_bytes(trace: Trace) -> tuple[float | None, str | None]:
    """(bytes a step's work moves, the mean over the steps with work; or None and why) on a
    collectors' trace: every device event of the step on a GPU trace (the events step_efficiency
    times), the ops under the step's attention:: annotations on a CPU-only trace."""
    ev = trace.events
    if trace.has_gpu:
        moved = device_bytes(trace).filter(pl.col("step").is_not_null())
        if moved.height == 0:
            return None, "no device work inside any step"
        unknown = moved.filter(pl.col("bytes").is_null())
        if unknown.height:
            more = f" (and {unknown.height - 1} more units of work without bytes)" if unknown.height > 1 else ""
            return None, unknown["reason"][0] + more
        return float(moved["bytes"].sum()) / moved["step"].n_unique(), None
    roots = ev.filter(
        (pl.col("cat") == "user_annotation")
        & pl.col("step").is_not_null()
        & pl.col("name").cast(pl.String).str.starts_with("attention::")
    ).select("id", "step")
    if roots.height == 0:
        return None, "no attention:: annotation inside any step"
    tree = _op_tree(trace)
    total = 0
    for root in roots["id"].to_list():
        got = tree.safe_bytes(root)
        if isinstance(got, str):
            return None, got
        total += got
    return total / roots["step"].n_unique(), None


# --- the roofline's rows -------------------------------------------------------------------------

MEASURE_OPS, MEASURE_STEP = "attention ops", "whole step"  # review's words for the two measures


def roofline_rows(trace: Trace, peak: DevicePeak | Mapping[str, float] | None = None) -> pl.DataFrame:
    """The trace's attention on the roofline at the bytes its own kernels move (ROOFLINE_ROW_SCHEMA):
    one row per attention op/kernel group (measure MEASURE_OPS, grouped as efficiency.efficiency;
    name = the op, else the kernel) and, on collectors' traces, one for the whole step (MEASURE_STEP;
    name = the variant). bytes: per call (per step), what its kernels move; intensity, tbps, the
    roofline, pct_of_roofline and bound follow from them; reason says why a number is missing
    (bytes that cannot be told among them). flops and tflops are efficiency's."""
    frames = [f.select(list(ROOFLINE_ROW_SCHEMA)) for f in (_op_rows(trace, peak), _step_row(trace, peak)) if f.height]
    return pl.concat(frames, how="vertical_relaxed") if frames else pl.DataFrame(schema=ROOFLINE_ROW_SCHEMA)


@per_trace(schema=ROOFLINE_ROW_SCHEMA)
def own_roofline(trace: Trace) -> pl.DataFrame:
    """roofline_rows with the peaks table's peaks, once per trace."""
    return roofline_rows(trace)


def _op_rows(trace: Trace, peak: DevicePeak | Mapping[str, float] | None) -> pl.DataFrame:
    calls = attention_calls(trace)
    if calls.height == 0:
        return pl.DataFrame(schema=ROOFLINE_ROW_SCHEMA)
    calls = calls.join(call_bytes(trace), on="call", how="left", maintain_order="left").with_columns(
        pl.coalesce("reason", pl.when(pl.col("flops").is_not_null()).then(pl.col("moved_reason"))).alias("reason"),
        pl.when(pl.col("flops").is_not_null()).then(pl.col("moved")).alias("moved"),
    )  # no work, no point: no bytes either
    keys = ["op", "called", "kernel", "backend", "pass", "shape", "dtype", "device", "flops", "moved", "reason"]
    groups = (
        calls.group_by(keys, maintain_order=True)
        .agg(
            pl.len().cast(pl.Int64).alias("count"),
            pl.col("time_ns").sum().alias("total_ns"),
            pl.col("time_ns").count().alias("timed"),
        )
        .rename({"moved": "bytes"})
    )
    if device_lost(trace):
        groups = groups.with_columns(
            pl.lit(None, pl.Int64).alias("total_ns"),
            pl.lit(0, pl.UInt32).alias("timed"),
            pl.coalesce("reason", pl.lit(LOST_REASON)).alias("reason"),
        )
    table = with_rates(groups, peak_frame(trace, groups, peak))
    return table.select(
        pl.lit(MEASURE_OPS).alias("measure"),
        pl.coalesce("op", "kernel").alias("name"),
        *(pl.col(c).cast(t) for c, t in ROOFLINE_ROW_SCHEMA.items() if c not in ("measure", "name")),
    )


def _step_row(trace: Trace, peak: DevicePeak | Mapping[str, float] | None) -> pl.DataFrame:
    found = step_groups(trace)
    if found is None:
        return pl.DataFrame(schema=ROOFLINE_ROW_SCHEMA)
    groups, _ = found
    moved, why = step_bytes(trace)
    groups = groups.with_columns(
        pl.lit(None if moved is None else round(moved), pl.Int64).alias("bytes"),
        pl.coalesce("reason", pl.lit(why, pl.String)).alias("reason"),
    )
    table = with_rates(groups, peak_frame(trace, groups, peak))
    return table.select(
        pl.lit(MEASURE_STEP).alias("measure"),
        pl.col("variant").alias("name"),
        pl.lit(None, pl.String).alias("backend"),
        pl.col("steps").alias("count"),
        *(
            pl.col(c).cast(t)
            for c, t in ROOFLINE_ROW_SCHEMA.items()
            if c not in ("measure", "name", "backend", "count")
        ),
    )


__all__ = [
    "ELEMENT_BYTES",
    "OP_RULES",
    "OWN_BYTES_WORDS",
    "ROOFLINE_ROW_SCHEMA",
    "call_bytes",
    "device_bytes",
    "element_bytes",
    "op_bytes",
    "own_roofline",
    "roofline_rows",
    "step_bytes",
]
