"""The per-file summary that `attnscope summary --json` prints and tools and CI read."""

from __future__ import annotations

from typing import Any

import polars as pl

from dashboard.engine.analyses.backends import detect_backends
from dashboard.engine.analyses.copies import copies, copy_summary
from dashboard.engine.analyses.efficiency import efficiency_block
from dashboard.engine.analyses.graphs import graph_summary, graph_warning
from dashboard.engine.analyses.health import health
from dashboard.engine.analyses.kernels import step_device_times
from dashboard.engine.analyses.host import host_block
from dashboard.engine.analyses.kernels import family_per_step, per_step, work_unit
from dashboard.engine.rules.devices import accelerator, device_names, gpu_vendor
from dashboard.engine.analyses.memory import memory_block
from dashboard.engine.analyses.phases import phases_block
from dashboard.engine.model.trace import Trace, names_by_category, per_trace


def device_info(trace: Trace) -> dict[str, Any]:
    """{"type": "cuda" | "rocm" | "mtia" | "xpu" | "hpu" | "privateuse1" | "cpu" | "other",
    "name": the first deviceProperties name or None}. Vendor categories (mtia_ccp_events,
    xpu_runtime, ...; see load.CATEGORIES) decide first; then hip* launches and the metadata
    (version keys, device names), which a cut file keeps even when no device event survived; then a
    GPU job's communication: distributedInfo.backend "nccl", or nccl:* / c10d:: collective ops (c10d::
    not when the backend is "gloo"), which read "cuda" (RCCL also says nccl; only the metadata tells
    ROCm). A GPU trace with no device event (cut before them) keeps its accelerator type: that it lost
    them is review.cut_state's CUT_DEVICE_LOST (not has_gpu and an accelerator type), which
    review.device_label and the CLI print, never "cpu"."""
    names = device_names(trace.meta)
    kind = accelerator(trace.raw_categories)
    if kind is None:
        by_cat = names_by_category(trace)
        runtime = [cat for cat in ("cuda_runtime", "cuda_driver") if cat in by_cat]
        hip = any(name.startswith("hip") for cat in runtime for name in by_cat[cat])
        vendor = gpu_vendor(trace.meta)
        dist = trace.meta.get("distributedInfo")
        backend = str(dist.get("backend") or "").lower() if isinstance(dist, dict) else ""
        ops = by_cat.get("cpu_op", []) + by_cat.get("user_annotation", [])
        collective = "nccl" in backend or any(
            name.startswith("nccl:") or (name.startswith("c10d::") and backend != "gloo") for name in ops
        )
        if hip or vendor == "rocm":
            kind = "rocm"
        elif trace.has_gpu or runtime or vendor == "cuda" or collective:
            kind = "cuda"
        elif not trace.meta.get("deviceProperties"):
            kind = "cpu"
        else:
            kind = "other"
    return {"type": kind, "name": names[0] if names else None}


TOP_FAMILIES = 3
"""Kernel families named per step in the summary (by device time)."""


def top_families(trace: Trace, n: int = TOP_FAMILIES) -> dict[int, list[dict[str, Any]]]:
    """Per step: the `n` kernel families with the most device time (on a CPU-only trace, the work
    ops' self time: kernels.work_time), each {"family", "us", "share"}; share = the family's time /
    the step's summed work time
    (0..1; kernels on several streams can overlap, so shares add to 1 over all families, not to
    the busy time). Ties by family name."""
    fam = family_per_step(trace)
    out: dict[int, list[dict[str, Any]]] = {}
    total = pl.col("total_ns").sum().over("step")
    fam = fam.with_columns(pl.when(total > 0).then(pl.col("total_ns") / total).otherwise(0.0).alias("share"))
    # each step's first n rows in one query and one pass over them, not a frame per step
    ranked = fam.sort(["step", "total_ns", "family"], descending=[False, True, False])
    top = ranked.group_by("step", maintain_order=True).head(n).select("step", "family", "total_ns", "share")
    for step, family, total_ns, share in top.iter_rows():
        out.setdefault(int(step), []).append({"family": family, "us": total_ns / 1000.0, "share": share})
    return out


def device_spans(trace: Trace) -> dict[int, dict[str, float]]:
    """Per step with device work, on its busiest device (the one busy_us is read from; ties: the
    lowest device id): device_span_us (from the first start to the last end of the work the step
    launched: kernels.step_device_times) and ran_ahead_us (how long that work ran on after the
    step's CPU span ended; 0 when it ended inside it), both µs."""
    times = step_device_times(trace)
    if times.height == 0:
        return {}
    busiest = (
        times.sort(["step", "busy_ns", "device"], descending=[False, True, False])
        .group_by("step", maintain_order=True)
        .first()
        .join(trace.steps.select("step", pl.col("end_ns").alias("cpu_end_ns")), on="step", how="inner")
    )
    return {
        int(row["step"]): {
            "device_span_us": row["span_ns"] / 1000.0,
            "ran_ahead_us": max(row["end_ns"] - row["cpu_end_ns"], 0) / 1000.0,
        }
        for row in busiest.iter_rows(named=True)
    }


@per_trace(json="{source, health, device, events, counts, ..., host, graphs, memory, collector, warnings}")
def summarize(trace: Trace) -> dict[str, Any]:
    """A JSON-ready summary of one trace (see the README for the keys). Computed once per trace
    and kept with it in the store (kept.py): callers must not change the dict they get."""
    ev = trace.events
    # one query for both, grouped by the Categorical codes and only the groups read as text: a cast
    # of every event's category and kind first cost 0.17 s on a 2M-event trace
    per_kind = ev.group_by("cat", "kind").len().with_columns(pl.col("cat", "kind").cast(pl.String)).sort("cat", "kind")
    counts: dict[str, int] = {}
    memcpy: dict[str, int] = {}
    for cat, kind, n in per_kind.iter_rows():
        counts[cat] = counts.get(cat, 0) + n
        if cat == "gpu_memcpy":
            memcpy[kind or "unknown"] = memcpy.get(kind or "unknown", 0) + n
    steps = per_step(trace)
    cut = trace.cut  # a step still running at the last event read lost what came after it
    past = (
        set(trace.steps.filter(pl.col("end_ns") > cut.last_ts_ns)["step"].to_list())
        if cut is not None and not cut.events_whole and cut.last_ts_ns is not None
        else set()
    )
    found = detect_backends(trace)
    table = copies(trace)
    top = top_families(trace)
    device = device_spans(trace)
    phases = phases_block(trace)  # serving traces only: other summaries keep their keys
    return {
        "source": trace.source,
        "health": health(trace),
        "device": device_info(trace),
        "events": ev.height,
        "counts": counts,
        "memcpy": memcpy,
        "work_unit": work_unit(trace),
        "implicit_step": trace.implicit_step,
        "steps": [
            {
                "name": row["name"],
                "kernel": row["kernel"],
                "gpu_memcpy": row["gpu_memcpy"],
                "gpu_memset": row["gpu_memset"],
                "work": row["work"],
                "dur_us": row["dur_ns"] / 1000.0,
                "busy_us": row["busy_ns"] / 1000.0,
                **device.get(row["step"], {"device_span_us": None, "ran_ahead_us": None}),
                "past_cut": row["step"] in past,
                "top_families": top.get(row["step"], []),
            }
            for row in steps.iter_rows(named=True)
        ],
        "attention": {"backends": found.backends, "evidence": found.all_evidence, "by_backend": found.evidence},
        "copies": [
            {
                "kind": row["kind"],
                "op_chain": row["op_chain"],
                "class": row["copy_class"],
                "hidden": row["hidden"],
                "count": row["count"],
                "bytes": row["bytes"],
            }
            for row in copy_summary(table).iter_rows(named=True)
        ],
        "efficiency": efficiency_block(trace),
        **({"phases": phases} if phases is not None else {}),
        "host": host_block(trace),
        "graphs": graph_summary(trace),
        "memory": memory_block(trace),
        "collector": trace.collector or None,
        "warnings": list(trace.warnings) + [line for line in (graph_warning(trace),) if line],
    }
