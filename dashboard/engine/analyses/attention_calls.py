"""The trace's attention calls: which op or kernel is a call, the device work each launched (its
attention kernels, and what it launched beside them), its shape and its work (formulas, shapes)."""

from __future__ import annotations

import numpy as np
import polars as pl

from dashboard.engine.analyses.backends import detect_backends
from dashboard.engine.analyses.formulas import BACKWARD, FORWARD
from dashboard.engine.rules.op_readers import reader_for
from dashboard.engine.analyses.serving import OLDER_STEP_ANNOTATION, STEP_ANNOTATION, ServingBatch
from dashboard.engine.analyses.shapes import (
    AttentionShape,
    _collector_causal,
    collector_shape,
    kernel_causal,
    read_shape,
)
from dashboard.engine.model.columns import series
from dashboard.engine.model.trace import GPU_CATEGORIES, Trace, names_in, per_trace
from dashboard.engine.rules import call_backend, call_part, is_kv_cache_write


# --- the trace: attention calls, their device work, the roofline -------------------------------

# Raw JSON text of args "Concrete Inputs", when the loader keeps it (is_causal and the maximum
# varlen lengths live there); without it is_causal comes from kernel names or the collectors.
CONCRETE_COLUMN = "concrete_inputs"
# Backends of detect_backends whose evidence is not an attention op or kernel of its own.
NOT_ATTENTION = ("eager", "inductor")
NOT_FUSED = ("math",) + NOT_ATTENTION

CALL_SCHEMA: dict[str, pl.DataType] = {
    "call": pl.Int64,
    "op": pl.String,
    "called": pl.String,
    "kernel": pl.String,
    "backend": pl.String,
    "device": pl.Int64,
    "time_ns": pl.Int64,
    "kernels": pl.Int64,
    "other_ns": pl.Int64,
    "others": pl.Int64,
    "pass": pl.String,
    "shape": pl.String,
    "dtype": pl.String,
    "flops": pl.Int64,
    "bytes": pl.Int64,
    "reason": pl.String,
}


def nearest_marked(parent: np.ndarray, start: np.ndarray, marked: np.ndarray) -> np.ndarray:
    """For each start id (-1 = none), the first id at or above it along `parent` links whose
    `marked` is true, or -1. All ids climb together, one nesting level per pass."""
    result = np.full(len(start), -1, dtype=np.int64)
    node = start.astype(np.int64).copy()
    while (node >= 0).any():
        safe = np.maximum(node, 0)
        hit = (node >= 0) & marked[safe]
        result[hit] = node[hit]
        node = np.where((node >= 0) & ~hit, parent[safe], -1)
    return result


def _attention_names(trace: Trace) -> tuple[dict[str, str], set[str], set[str]]:
    """(name -> backend, attention op names, fused attention kernel names) from detect_backends'
    evidence and OP_READERS (a reader's op is attention whatever the classifier says)."""
    evidence = detect_backends(trace).evidence
    backend = {n: b for b, names in evidence.items() if b not in NOT_ATTENTION for n in names}
    ops = {n for n in names_in(trace, "cpu_op") if n in backend or reader_for(n) is not None}
    kernels = {n for n in names_in(trace, "kernel") if backend.get(n) not in (None,) + NOT_FUSED}
    return backend, ops, kernels


@per_trace(schema=CALL_SCHEMA)
def attention_calls(trace: Trace) -> pl.DataFrame:
    """One row per attention call: the innermost attention op of a nest such as
    scaled_dot_product_attention > _scaled_dot_product_flash_attention > _flash_attention_forward,
    and, for attention kernels that no such op launched, one per kernel with the kernels that are a
    part of its call (rules.CALL_PARTS: SageAttention's quantization before it, a split-KV merge after
    it). Columns (CALL_SCHEMA): call (event id of the op; of the main kernel for a call without op),
    op, called (outermost attention op), kernel (the call's longest attention kernel, else its longest
    device event), backend, device, time_ns (the call's attention device time: the durations of its
    attention kernels, or, for a call that launched none (the math path's bmm and softmax), of its
    device events but KV-cache writes; on a CPU-only trace the op's own span), kernels (the device
    events time_ns sums), other_ns and others (the time and number of the call's other device events:
    a KV-cache write, a fill of the output, a copy; attention_others lists them), pass, shape, dtype,
    flops, bytes (per call; null with a reason when the shapes do not say)."""
    found = _attention_work(trace)
    if found is None:
        return pl.DataFrame(schema=CALL_SCHEMA)
    work, call_ids, outer, backend = found
    calls = _call_rows(trace, call_ids, outer, work, backend)
    orphans = _orphan_rows(trace, work, backend, lone_steps=not calls.height)
    return pl.concat([calls, orphans]).select(list(CALL_SCHEMA))


@per_trace(returns="(device work table, attention call ids array, {call: op id}, {name: backend}) tuple, or None")
def _attention_work(trace: Trace) -> tuple[pl.DataFrame, np.ndarray, dict[int, int], dict[str, str]] | None:
    """(device work with its owning call (_device_work), ids of the attention calls, call -> the
    attention op around it (-1: none), name -> backend), or None when the trace shows no attention."""
    ev = trace.events
    backend, op_names, kernel_names = _attention_names(trace)
    if not op_names and not kernel_names:
        return None
    parent = ev["parent"].fill_null(-1).to_numpy()
    names = ev["name"].cast(pl.String)
    is_att = ((ev["cat"] == "cpu_op") & names.is_in(list(op_names))).to_numpy()
    att_ids = np.flatnonzero(is_att)
    above = nearest_marked(parent, parent[att_ids], is_att)
    is_call = is_att.copy()
    is_call[above[above >= 0]] = False
    outer = dict(zip(att_ids.tolist(), above.tolist()))
    work = _device_work(trace, parent, is_call, kernel_names)
    return work, np.flatnonzero(is_call), outer, backend


def attention_work(trace: Trace) -> pl.DataFrame | None:
    """The trace's device events with the attention call that owns them (id, name, device, stream,
    ts_ns, dur_ns, launch, owner, attention, call, counted: see _device_work), or None when the trace
    shows no attention."""
    found = _attention_work(trace)
    return None if found is None else found[0]


def attention_device_ns(trace: Trace) -> int:
    """The device time of the trace's attention (ns): every fused attention kernel (the 'fused
    attention' family: BACKEND_TABLE's fused rows, whatever op, graph or nothing launched it), and the
    device events of an attention op that launched no such kernel (the math path's bmm and softmax)
    but KV-cache writes; each counted once. Not counted: what an attention op launches beside its
    attention kernels (a KV-cache write, a fill of the output: attention_others). On a CPU-only trace,
    the spans of the attention calls. Not counted either: hand-written attention (detect_backends'
    eager and inductor evidence), whose matmuls a name does not tell from the model's other matmuls."""
    found = _attention_work(trace)
    if found is None:
        return 0
    if not trace.has_gpu:
        return int(attention_calls(trace)["time_ns"].fill_null(0).sum())
    work = found[0]
    return int(work.filter(pl.col("counted"))["dur_ns"].fill_null(0).sum())


OTHERS_SCHEMA: dict[str, pl.DataType] = {
    "op": pl.String,
    "name": pl.String,
    "count": pl.Int64,
    "calls": pl.Int64,
    "total_us": pl.Float64,
}


def attention_others(trace: Trace) -> pl.DataFrame:
    """The device work attention ops launched beside their attention kernels, which their attention
    time leaves out (OTHERS_SCHEMA): op (the call's op), name (the device event's), count, calls (how
    many calls launched it), total_us (its device time in all); longest first. vLLM's KV-cache write
    reshape_and_cache_flash under unified_attention, a FillFunctor zeroing the output before
    AOTriton's attn_fwd, a copy making an input contiguous."""
    found = _attention_work(trace)
    if found is None or not trace.has_gpu:
        return pl.DataFrame(schema=OTHERS_SCHEMA)
    other = found[0].filter((pl.col("owner") >= 0) & ~pl.col("counted"))
    if other.height == 0:
        return pl.DataFrame(schema=OTHERS_SCHEMA)
    ops = trace.events["name"].cast(pl.String).gather(other["owner"])
    return (
        other.with_columns(ops.alias("op"))
        .group_by("op", "name", maintain_order=True)
        .agg(
            pl.len().cast(pl.Int64).alias("count"),
            pl.col("owner").n_unique().cast(pl.Int64).alias("calls"),
            (pl.col("dur_ns").fill_null(0).sum() / 1e3).alias("total_us"),
        )
        .sort("total_us", descending=True, maintain_order=True)
        .select(list(OTHERS_SCHEMA))
    )


def _device_work(trace: Trace, parent: np.ndarray, is_call: np.ndarray, kernel_names: set[str]) -> pl.DataFrame:
    """Device events with the call that launched them: id, name, device, stream, ts_ns, dur_ns, launch,
    owner (the attention op's call id, or -1), attention (a fused attention kernel), call (the
    attention call the event is part of: the owner; for an attention kernel no op launched, the id of
    its call's main kernel (_lone_calls); null otherwise), counted (the event is attention time: see
    attention_calls' time_ns)."""
    gpu = (
        trace.events.lazy()
        .filter(pl.col("cat").is_in(GPU_CATEGORIES))
        .select(
            "id",
            pl.col("name").cast(pl.String),
            "device",
            "stream",
            "ts_ns",
            "dur_ns",
            pl.col("launch").fill_null(-1),
        )
        .collect()
    )
    owner = nearest_marked(parent, gpu["launch"].to_numpy(), is_call)
    kv_writes = [n for n in gpu["name"].unique().drop_nulls().to_list() if is_kv_cache_write(n)]
    owned = pl.col("owner") >= 0
    # a call that launched an attention kernel counts its attention kernels; one that launched none
    # (the math path) counts its device events, but a KV-cache write is never attention
    no_kernel = owned & ~pl.col("attention").any().over("owner")
    work = gpu.with_columns(series("owner", owner), pl.col("name").is_in(list(kernel_names)).alias("attention"))
    work = work.with_columns(
        (pl.col("attention") | (no_kernel & ~pl.col("name").is_in(kv_writes))).alias("counted"),
    )
    lone = _lone_calls(work.filter(pl.col("attention") & ~owned))
    return (
        work.join(lone, on="id", how="left", maintain_order="left")
        .with_columns(pl.when(owned).then(pl.col("owner")).otherwise(pl.col("lone_call")).alias("call"))
        .drop("lone_call")
    )


def _lone_calls(lone: pl.DataFrame) -> pl.DataFrame:
    """id -> lone_call for attention kernels that no attention op launched: a kernel that is a part
    of another's call (rules.CALL_PARTS) joins the next (a part before it) or the previous (a part
    after it) other attention kernel on its device and stream; every other kernel is a call of its
    own, its id the call's."""
    names = lone["name"].unique().drop_nulls().to_list()
    parts = {n: before for n in names if (before := call_part(n)) is not None}
    lane = ["device", "stream"]
    main_id = pl.when(pl.col("part").is_null()).then(pl.col("id"))
    return (
        lone.sort("ts_ns", "id")
        .with_columns(pl.col("name").replace_strict(parts, default=None, return_dtype=pl.Boolean).alias("part"))
        .with_columns(
            main_id.backward_fill().over(lane).alias("next_main"),
            main_id.forward_fill().over(lane).alias("prev_main"),
        )
        .select(
            "id",
            pl.when(pl.col("part").is_null())
            .then(pl.col("id"))
            .when(pl.col("part"))
            .then(pl.coalesce("next_main", "id"))
            .otherwise(pl.coalesce("prev_main", "id"))
            .alias("lone_call"),
        )
    )


def _call_rows(
    trace: Trace, call_ids: np.ndarray, outer: dict[int, int], work: pl.DataFrame, backend: dict[str, str]
) -> pl.DataFrame:
    """CALL_SCHEMA rows of the attention op calls (see attention_calls)."""
    counted = pl.col("counted")
    per_call = (
        work.filter(pl.col("owner") >= 0)
        # the longest attention kernel, else the longest counted event; equal times: the first launched
        .sort(["attention", "counted", "dur_ns"], descending=True, maintain_order=True)
        .group_by("owner", maintain_order=True)
        .agg(
            pl.col("name").first().alias("kernel"),
            pl.col("device").first(),
            pl.when(counted.any()).then(pl.col("dur_ns").filter(counted).sum()).alias("time_ns"),
            counted.sum().cast(pl.Int64).alias("kernels"),
            pl.col("dur_ns").filter(~counted).sum().alias("other_ns"),
            (~counted).sum().cast(pl.Int64).alias("others"),
            pl.col("name").filter(pl.col("attention")).first().alias("att_kernel"),
        )
    )
    by_owner = {row["owner"]: row for row in per_call.iter_rows(named=True)}
    ev = trace.events
    columns = ["name", "dur_ns", "input_dims", "input_types"] + (
        [CONCRETE_COLUMN] if CONCRETE_COLUMN in ev.columns else []
    )
    info = ev.select(pl.col("name").cast(pl.String), *columns[1:])
    hint_default = _collector_causal(trace)
    steps = _serving_steps(trace, call_ids, info)
    cache: dict[tuple, AttentionShape | str] = {}
    rows = []
    for call in call_ids.tolist():
        chain = [call]
        while outer.get(chain[-1], -1) >= 0:
            chain.append(outer[chain[-1]])
        found = by_owner.get(call)
        hint = kernel_causal(found["att_kernel"]) if found else None
        shape = _first_shape(info, chain, hint if hint is not None else hint_default, cache, steps.get(call))
        op = info["name"][call]
        if trace.has_gpu:
            time_ns, device, kernel, kernels, other_ns, others = (
                (
                    found["time_ns"],
                    found["device"],
                    found["kernel"],
                    found["kernels"],
                    found["other_ns"],
                    found["others"],
                )
                if found
                else (None, None, None, 0, 0, 0)
            )
        else:
            time_ns, device, kernel, kernels, other_ns, others = info["dur_ns"][call], None, None, 0, 0, 0
        reason = shape if isinstance(shape, str) else None
        if time_ns is None and reason is None:
            reason = (
                f"{op}: its device work is KV-cache writes only, no attention kernel"
                if others
                else f"{op}: no device work found under the op"
            )
        rows.append(
            _row(
                call,
                op,
                info["name"][chain[-1]],
                kernel,
                backend.get(op) or backend.get(kernel or ""),
                device,
                (time_ns, kernels, other_ns, others),
                shape,
                reason,
            )
        )
    return pl.DataFrame(rows, schema=CALL_SCHEMA, orient="row")


def _serving_steps(trace: Trace, call_ids: np.ndarray, info: pl.DataFrame) -> dict[int, ServingBatch | str]:
    """For the calls of serving ops (OpReader.serving), what the step annotation (a user_annotation
    in either form of STEP_ANNOTATIONS) that holds them on their thread reads as (ServingBatch.read:
    the batch, or why it gives no lengths), where there is one."""
    serving = [c for c in call_ids.tolist() if (r := reader_for(info["name"][c])) is not None and r.serving]
    if not serving:
        return {}
    ev = trace.events
    names = info["name"]
    annotated = names.str.contains(STEP_ANNOTATION.pattern) | names.str.contains(OLDER_STEP_ANNOTATION.pattern)
    is_step = ((ev["cat"] == "user_annotation") & annotated.fill_null(False)).to_numpy()
    if not is_step.any():
        return {}
    parent = ev["parent"].fill_null(-1).to_numpy()
    start = np.array(serving, dtype=np.int64)
    held = nearest_marked(parent, parent[start], is_step)
    read = {h: ServingBatch.read(names[h]) for h in set(held.tolist()) if h >= 0}
    return {c: read[h] for c, h in zip(serving, held.tolist()) if h >= 0 and read[h] is not None}


def _first_shape(
    info: pl.DataFrame, chain: list[int], hint: bool | None, cache: dict, step: ServingBatch | str | None = None
) -> AttentionShape | str:
    """The shape read from the innermost op of the chain that yields one; else the innermost's reason."""
    readings = []
    for node in chain:
        row = info.row(node)
        key = (row[0], row[2], row[3], row[4] if len(row) > 4 else None, hint, step)
        if key not in cache:
            cache[key] = read_shape(row[0], row[2], row[3], key[3], hint, step)
        readings.append(cache[key])
        if not isinstance(cache[key], str):
            return cache[key]
    return readings[0]


def _row(
    call: int,
    op: str | None,
    called: str | None,
    kernel: str | None,
    backend: str | None,
    device: int | None,
    timing: tuple[int | None, int, int, int],
    shape: AttentionShape | str,
    reason: str | None,
) -> tuple:
    """A CALL_SCHEMA row; timing: (time_ns, kernels, other_ns, others)."""
    if isinstance(shape, AttentionShape):
        w = shape.work()
        described = (BACKWARD if shape.backward else FORWARD, shape.describe(), shape.dtype, w.flops, w.bytes)
    else:
        described = (None, None, None, None, None)
    return (call, op, called, kernel, backend, device, *timing, *described, reason)


def _with_backend(calls: pl.DataFrame, backend: dict[str, str]) -> pl.DataFrame:
    """calls (one per lone call, its part kernels' names in `parts`) with its backend: the one a
    part names (rules.call_backend: SageAttention 1.x's quantize kernels before its Triton `_attn_fwd`),
    else its main kernel's."""
    parts = calls["parts"].explode().drop_nulls().unique().to_list()
    by_part = {n: b for n in parts if (b := call_backend(n)) is not None}
    of_parts = (
        pl.col("parts")
        .list.eval(pl.element().replace_strict(by_part, default=None, return_dtype=pl.String))
        .list.drop_nulls()
        .list.first()
    )
    of_kernel = pl.col("kernel").replace_strict(backend, default=None, return_dtype=pl.String)
    return calls.with_columns(pl.coalesce(of_parts, of_kernel).alias("backend")).drop("parts")


def _orphan_rows(trace: Trace, work: pl.DataFrame, backend: dict[str, str], lone_steps: bool = False) -> pl.DataFrame:
    """CALL_SCHEMA rows of the calls of attention kernels that no attention op launched (one per
    main kernel with its parts, see _lone_calls), with the reason. With lone_steps (the trace has no
    attention op at all), a collectors' trace whose steps each hold exactly one such call, as its runs
    replayed from a CUDA graph do, takes the shape from its own metadata: each step is one attention
    forward of the collector's shape (collector_shape)."""
    lone = work.filter(pl.col("attention") & (pl.col("owner") < 0))
    if lone.height == 0:
        return pl.DataFrame(schema=CALL_SCHEMA)
    main = pl.col("id") == pl.col("call")
    calls = lone.group_by("call", maintain_order=True).agg(
        pl.col("name").filter(main).first().alias("kernel"),
        pl.col("device").filter(main).first(),
        pl.col("dur_ns").sum().alias("time_ns"),
        pl.len().cast(pl.Int64).alias("kernels"),
        pl.col("launch").filter(main).first(),
        pl.col("name").filter(~main).alias("parts"),
    )
    calls = _with_backend(calls, backend)
    shape = _one_per_step_shape(trace, calls["call"]) if lone_steps else None
    if shape is not None:
        rows = [
            _row(k, None, None, name, named, device, (dur, n, 0, 0), shape, None)
            for k, name, named, device, dur, n in calls.select(
                "call", "kernel", "backend", "device", "time_ns", "kernels"
            ).iter_rows()
        ]
        return pl.DataFrame(rows, schema=CALL_SCHEMA, orient="row")
    reason = (
        pl.when(pl.col("launch") < 0)
        .then(
            pl.lit(
                "kernel without its launch call in the trace (launched before the profiler's CPU window, or replayed from a graph): no op, no shapes"
            )
        )
        .otherwise(
            pl.lit(
                "no shapes: no attention op around the kernel's launch, as in a graph replay or a library that records no op"
            )
        )
    )
    return calls.select(
        "call",
        pl.lit(None, pl.String).alias("op"),
        pl.lit(None, pl.String).alias("called"),
        "kernel",
        "backend",
        "device",
        "time_ns",
        "kernels",
        pl.lit(0, pl.Int64).alias("other_ns"),
        pl.lit(0, pl.Int64).alias("others"),
        *(pl.lit(None, CALL_SCHEMA[c]).alias(c) for c in ("pass", "shape", "dtype", "flops", "bytes")),
        reason.alias("reason"),
    )


def _one_per_step_shape(trace: Trace, kernel_ids: pl.Series) -> AttentionShape | None:
    """The collector's shape when every one of these (calls' main) kernels lies in a step and no step
    holds two."""
    shape = collector_shape(trace)
    if isinstance(shape, str) or kernel_ids.len() == 0:
        return None
    steps = trace.events["step"].gather(kernel_ids)
    return shape if steps.null_count() == 0 and steps.n_unique() == kernel_ids.len() else None
