"""Serving traces by phase (issue 39): each serving step is prefill, decode or mixed, and per phase its
steps, device time, attention time, tokens and, for decode, the KV cache its attention reads against
the device's memory bandwidth (decode attention is bandwidth-bound: TFLOP/s says nothing there).

A step is a serving framework's step annotation (serving.PHASE_ANNOTATIONS: vLLM's current and older
forms, SGLang's step[MODE bs= toks=]; nested annotations are one step, read from the one that tells
the most); the device work it launched is its own. A trace without such annotations is split by
ProfilerStep, each step's phase told by its attention kernels (rules.phases.PHASE_KERNELS); a trace
with neither has no phases. Times are ns in the frames, µs in the block; bytes are bytes."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import polars as pl

from dashboard.engine.analyses.attention_calls import attention_device_ns, attention_work, nearest_marked
from dashboard.engine.analyses.formulas import DTYPES
from dashboard.engine.rules.op_readers import reader_for
from dashboard.engine.analyses.rates import device_matches
from dashboard.engine.analyses.serving import PHASE_ANNOTATIONS, StepPhases, read_phases
from dashboard.engine.model.columns import series
from dashboard.engine.model.trace import GPU_CATEGORIES, Trace, per_trace
from dashboard.engine.rules.phases import kernel_phase

PHASES = ("prefill", "decode", "mixed")

STEP_SCHEMA: dict[str, pl.DataType] = {
    "unit": pl.Int64,
    "name": pl.String,
    "phase": pl.String,
    "found_by": pl.String,
    "requests": pl.Int64,
    "tokens": pl.Int64,
    "prefill_tokens": pl.Int64,
    "decode_tokens": pl.Int64,
    "decode_keys": pl.Int64,
    "keys_reason": pl.String,
    "device_ns": pl.Int64,
    "attention_ns": pl.Int64,
    "calls": pl.Int64,
    "kv_bytes": pl.Int64,
    "kv_reason": pl.String,
}

NO_ANNOTATION = "no step annotation: the trace does not give the step's requests, tokens or keys"
GRAPH_REASON = (
    "the attention kernels ran from a CUDA/HIP graph replay with no op around them, so the trace records "
    "no KV head count or head dim"
)
MIXED_REASON = (
    "a mixed step's attention kernels serve its prefill and decode tokens together: the decode part's "
    "time cannot be told apart"
)


def _gpu_work(trace: Trace) -> pl.DataFrame:
    """Device events: id, device, step, dur_ns, launch (-1: none)."""
    return (
        trace.events.lazy()
        .filter(pl.col("cat").is_in(GPU_CATEGORIES))
        .select("id", "device", "step", "dur_ns", pl.col("launch").fill_null(-1))
        .collect()
    )


def _annotated(trace: Trace) -> tuple[dict[int, StepPhases], np.ndarray] | None:
    """The serving steps found by annotation: {outermost annotation's event id: its reading (the
    most telling of the annotations it holds)}, and each device event's step (-1: none), in
    _gpu_work's order; None when the trace has no step annotation."""
    ev = trace.events
    pattern = "|".join(p.pattern for p in PHASE_ANNOTATIONS)
    marks = (
        ev.lazy()
        .filter(pl.col("cat") == "user_annotation")
        .select("id", pl.col("name").cast(pl.String))
        .filter(pl.col("name").str.contains(pattern).fill_null(False))
        .collect()
    )
    readings = {int(i): read_phases(name) for i, name in marks.iter_rows()}
    readings = {i: r for i, r in readings.items() if r is not None}
    if not readings:
        return None
    parent = ev["parent"].fill_null(-1).to_numpy()
    is_ann = np.zeros(ev.height, dtype=bool)
    ids = np.array(sorted(readings), dtype=np.int64)
    is_ann[ids] = True
    above = dict(zip(ids.tolist(), nearest_marked(parent, parent[ids], is_ann).tolist()))
    units: dict[int, StepPhases] = {}
    for i in ids.tolist():
        top = i
        while above[top] >= 0:
            top = above[top]
        if top not in units or readings[i].rank > units[top].rank:
            units[top] = readings[i]
    is_unit = np.zeros(ev.height, dtype=bool)
    is_unit[list(units)] = True
    owner = nearest_marked(parent, _gpu_work(trace)["launch"].to_numpy(), is_unit)
    return units, owner


def _by_kernels(trace: Trace, work: pl.DataFrame) -> tuple[dict[int, str], np.ndarray] | None:
    """The serving steps found by kernel evidence: {ProfilerStep index: its phase} for the steps whose
    attention kernels name a phase (PHASE_KERNELS), and each device event's step (-1: none)."""
    attention = work.filter(pl.col("counted"))
    if attention.height == 0:
        return None
    gpu = _gpu_work(trace)
    steps = gpu.select("id", "step").join(attention.select("id", "name"), on="id", how="inner")
    phase_of = {name: kernel_phase(name) for name in steps["name"].drop_nulls().unique().to_list()}
    seen = (
        steps.with_columns(pl.col("name").replace_strict(phase_of, default=None, return_dtype=pl.String).alias("phase"))
        .filter(pl.col("phase").is_not_null() & pl.col("step").is_not_null())
        .group_by("step")
        .agg(pl.col("phase").unique())
    )
    if seen.height == 0:
        return None
    phases = {int(step): found[0] if len(found) == 1 else "mixed" for step, found in seen.iter_rows()}
    owner = gpu["step"].fill_null(-1).to_numpy().astype(np.int64)
    known = np.fromiter((o in phases for o in owner.tolist()), dtype=bool, count=len(owner))  # np.isin imports numpy.ma
    return phases, np.where(known, owner, -1)


@per_trace(schema=STEP_SCHEMA)
def phase_steps(trace: Trace) -> pl.DataFrame:
    """One row per serving step (STEP_SCHEMA): unit (the annotation's event id, or the ProfilerStep
    index), name, phase, found_by ('annotation' or 'kernels'), requests, tokens (new query tokens),
    prefill_tokens, decode_tokens, decode_keys (the keys the decode requests read; null where the
    annotation does not give them; keys_reason says why), device_ns (the summed durations of the device events it
    launched), attention_ns (of those, the attention time: attention_calls' counted kernels), calls
    (its attention calls: one per layer), kv_bytes (decode steps: the KV cache its attention reads)
    and kv_reason (why kv_bytes is null). Empty for a trace with no serving phases."""
    if not trace.has_gpu:
        return pl.DataFrame(schema=STEP_SCHEMA)
    found = attention_work(trace)
    work = found if found is not None else pl.DataFrame(schema={"id": pl.Int64, "counted": pl.Boolean})
    annotated = _annotated(trace)
    if annotated is not None:
        units, owner = annotated
        readings: dict[int, StepPhases | None] = dict(units)
        phases = {unit: reading.phase for unit, reading in units.items()}
        names = trace.events["name"].cast(pl.String)
        labels = {unit: names[unit] for unit in units}
        found_by = "annotation"
    else:
        by_kernels = _by_kernels(trace, work) if found is not None else None
        if by_kernels is None:
            return pl.DataFrame(schema=STEP_SCHEMA)
        phases, owner = by_kernels
        readings = dict.fromkeys(phases)
        step_names = dict(trace.steps.select("step", "name").iter_rows())
        labels = {unit: step_names.get(unit) for unit in phases}
        found_by = "kernels"
    gpu = _gpu_work(trace).with_columns(series("unit", np.asarray(owner, dtype=np.int64))).filter(pl.col("unit") >= 0)
    device = dict(gpu.group_by("unit").agg(pl.col("dur_ns").fill_null(0).sum()).iter_rows())
    attention = work.filter(pl.col("counted")).join(gpu.select("id", "unit"), on="id", how="inner")
    parts = attention.partition_by("unit", as_dict=True) if attention.height else {}
    empty = attention.clear()
    rows = [
        _step_row(
            trace,
            (unit, labels[unit], phases[unit], found_by),
            readings[unit],
            int(device.get(unit, 0)),
            parts.get((unit,), empty),
        )
        for unit in phases
    ]
    return pl.DataFrame(rows, schema=STEP_SCHEMA, orient="row").sort("unit")


def _step_row(trace: Trace, head: tuple, reading: StepPhases | None, device_ns: int, attention: pl.DataFrame) -> tuple:
    """One STEP_SCHEMA row (see phase_steps): head is (unit, name, phase, found_by); device_ns the
    step's device time; attention its counted attention work."""
    phase = head[2]
    attention_ns = int(attention["dur_ns"].fill_null(0).sum()) if attention.height else 0
    calls = int(attention["call"].drop_nulls().n_unique()) if attention.height else 0
    kv_bytes, kv_reason = None, None
    if phase == "decode":
        kv_bytes, kv_reason = _kv_bytes(trace, reading, attention)
    elif phase == "mixed":
        kv_reason = MIXED_REASON
    counts = (
        (
            reading.requests,
            reading.tokens,
            reading.prefill_tokens,
            reading.decode_tokens,
            reading.decode_keys,
            reading.keys_reason,
        )
        if reading is not None
        else (None,) * 5 + (NO_ANNOTATION,)
    )
    return (*head, *counts, device_ns, attention_ns, calls, kv_bytes, kv_reason)


def kv_layout(trace: Trace, op_id: int) -> tuple[int, str | None]:
    """The bytes one key token of the KV cache takes in one layer, read from a serving attention op's
    inputs (layout TND: key [tokens, kv heads, head dim], value [tokens, kv heads, head dim v]):
    kv heads x (head dim + head dim v) x the key's dtype bytes, i.e. 2 x heads x dim x bytes for
    K and V of one dim. (0, reason) where the op's inputs do not give it."""
    row = trace.events.row(op_id, named=True)
    name = str(row["name"])
    reader = reader_for(name)
    if reader is None or not reader.serving:
        return 0, f"{name}: its inputs do not give the KV cache's heads and head dim"
    try:
        dims = json.loads(row["input_dims"]) if row.get("input_dims") else None
        types = json.loads(row["input_types"]) if row.get("input_types") else []
    except (ValueError, RecursionError):  # a damaged file's args
        dims, types = None, []
    if not isinstance(dims, list) or len(dims) < reader.q + 3:
        return 0, f"{name}: shapes not recorded (profile with record_shapes=True)"
    key, value = dims[reader.q + 1], dims[reader.q + 2]
    dtype = types[reader.q + 1] if isinstance(types, list) and len(types) > reader.q + 1 else None
    if not (_three(key) and _three(value)) or key[1] != value[1]:
        return 0, f"{name}: key and value are not [tokens, kv heads, head dim]"
    if dtype not in DTYPES:
        return 0, f"{name}: unknown key type {dtype!r}"
    return key[1] * (key[2] + value[2]) * DTYPES[dtype][1], None


def _three(dims: Any) -> bool:
    return isinstance(dims, list) and len(dims) == 3 and all(type(x) is int and x > 0 for x in dims)


def _kv_bytes(trace: Trace, reading: StepPhases | None, attention: pl.DataFrame) -> tuple[int | None, str | None]:
    """A decode step's KV-cache reads in bytes: its decode keys x, over its attention calls (one per
    layer), each call's bytes per key token (kv_layout); or (None, why not)."""
    if reading is None:
        return None, NO_ANNOTATION
    if reading.decode_keys is None:
        return None, reading.keys_reason
    if attention.height == 0:
        return None, "no attention kernel in the step"
    owners = attention.filter(pl.col("owner") >= 0)["owner"].unique().sort().to_list()
    if attention.filter(pl.col("owner") < 0).height:
        return None, GRAPH_REASON
    per_token = 0
    for op_id in owners:
        size, reason = kv_layout(trace, int(op_id))
        if reason is not None:
            return None, reason
        per_token += size
    return reading.decode_keys * per_token, None


def _phase_entry(trace: Trace, part: pl.DataFrame, phase: str, total_attention_ns: int) -> dict[str, Any]:
    """The block's entry for one phase (see phases_block)."""
    attention_ns = int(part["attention_ns"].sum())
    entry: dict[str, Any] = {
        "phase": phase,
        "steps": part.height,
        "device_us": int(part["device_ns"].sum()) / 1e3,
        "attention_us": attention_ns / 1e3,
        "attention_share": attention_ns / total_attention_ns if total_attention_ns else None,
    }
    columns = {
        "prefill": ("requests", "tokens"),
        "decode": ("requests", "tokens", "decode_keys"),
        "mixed": ("requests", "tokens", "prefill_tokens", "decode_tokens", "decode_keys"),
    }[phase]
    for column in columns:
        values = part[column]
        entry[column] = int(values.sum()) if values.null_count() == 0 else None
    keys_reason = part["keys_reason"].drop_nulls() if "decode_keys" in columns else part["keys_reason"].clear()
    if keys_reason.len():
        entry["keys_reason"] = keys_reason[0]
    if entry["tokens"] is None:
        entry["tokens_reason"] = NO_ANNOTATION
    if phase == "decode":
        entry.update(_bandwidth(trace, part, attention_ns))
    return entry


def _bandwidth(trace: Trace, part: pl.DataFrame, attention_ns: int) -> dict[str, Any]:
    """Decode attention's KV reads against the memory-bandwidth roof: kv_bytes, kv_tbps (kv_bytes /
    attention time; 1 byte/ns = 1e-3 TB/s), peak_tbps, pct_of_bandwidth (0-100), kv_reason."""
    out: dict[str, Any] = {"kv_bytes": None, "kv_tbps": None, "peak_tbps": None, "pct_of_bandwidth": None}
    reasons = part["kv_reason"].drop_nulls()
    if reasons.len():
        out["kv_reason"] = reasons[0]
        return out
    out["kv_bytes"] = int(part["kv_bytes"].sum())
    if attention_ns <= 0:
        out["kv_reason"] = "no attention time in the decode steps"
        return out
    out["kv_tbps"] = out["kv_bytes"] / attention_ns / 1e3
    devices = trace.events.filter(pl.col("cat") == "kernel")["device"].drop_nulls().unique().sort().to_list()
    match = device_matches(trace, [devices[0] if devices else None])
    peak = next(iter(match.values())).peak
    if peak is None or not peak.bandwidth_tbps:
        out["kv_reason"] = f"no bandwidth peak for the device ({next(iter(match.values())).reason})"
        return out
    out["peak_tbps"] = peak.bandwidth_tbps
    out["pct_of_bandwidth"] = 100.0 * out["kv_tbps"] / peak.bandwidth_tbps
    return out


@per_trace(json="{found_by, attention_us, by_phase: [{phase, steps, ...}, ...], empty_steps}, or null")
def phases_block(trace: Trace) -> dict[str, Any] | None:
    """The summary's "phases" (None for a trace with no serving phases): found_by ('annotation' or
    'kernels'), attention_us (the trace's attention device time), and by_phase, one entry per phase
    present in order prefill, decode, mixed: steps, device_us, attention_us, attention_share (of the
    trace's attention time, 0..1), requests, tokens, decode_keys (null where an annotation does not
    give them; tokens_reason says why), and for decode kv_bytes, kv_tbps, peak_tbps,
    pct_of_bandwidth, kv_reason (why a number is missing)."""
    steps = phase_steps(trace)
    if steps.height == 0:
        return None
    total = attention_device_ns(trace)
    by_phase = [
        _phase_entry(trace, steps.filter(pl.col("phase") == phase), phase, total)
        for phase in PHASES
        if steps.filter(pl.col("phase") == phase).height
    ]
    empty = steps.filter(pl.col("phase").is_null()).height
    return {
        "found_by": steps["found_by"][0],
        "attention_us": total / 1e3,
        "by_phase": by_phase,
        "empty_steps": empty,
    }


PHASE_TABLE_SCHEMA: dict[str, pl.DataType] = {
    "run": pl.String,
    "phase": pl.String,
    "steps": pl.Int64,
    "device_us": pl.Float64,
    "attention_us": pl.Float64,
    "attention_share": pl.Float64,
    "tokens": pl.Int64,
    "us_per_token": pl.Float64,
    "decode_keys": pl.Int64,
    "kv_gb": pl.Float64,
    "kv_tbps": pl.Float64,
    "pct_of_bandwidth": pl.Float64,
    "note": pl.String,
}


def phase_table(runs: dict[str, Trace]) -> pl.DataFrame:
    """One row per run and phase of the serving runs among `runs` (PHASE_TABLE_SCHEMA; the others have
    none): phases_block's numbers, us_per_token (attention µs / tokens), kv_gb (10^9 bytes), and note
    (why tokens or the KV-cache numbers are missing)."""
    rows = []
    for label, trace in runs.items():
        block = phases_block(trace)
        for entry in block["by_phase"] if block else []:
            tokens = entry.get("tokens")
            note = entry.get("tokens_reason") or entry.get("kv_reason")
            rows.append(
                (
                    label,
                    entry["phase"],
                    entry["steps"],
                    entry["device_us"],
                    entry["attention_us"],
                    entry["attention_share"],
                    tokens,
                    entry["attention_us"] / tokens if tokens else None,
                    entry.get("decode_keys"),
                    entry["kv_bytes"] / 1e9 if entry.get("kv_bytes") is not None else None,
                    entry.get("kv_tbps"),
                    entry.get("pct_of_bandwidth"),
                    note,
                )
            )
    return pl.DataFrame(rows, schema=PHASE_TABLE_SCHEMA, orient="row")
