"""The review's overview: one row per run (step times, work, copies, the attention backend's
verdict, parity, speedup, what a cut file lost), and the backend verdicts it reads. Runs are
passed as {label: Trace} in display order; `baseline` is one of the labels. Units: `*_us` columns
are microseconds. compare/review.py gathers this and the other review modules under one name."""

from __future__ import annotations

import polars as pl

from dashboard.engine.analyses.backends import NOT_FORCED, detect_backends, fallback, requested_backend
from dashboard.engine.analyses.copies import copies_in_steps
from dashboard.engine.analyses.kernels import per_step, step_count, work_unit
from dashboard.engine.analyses.summary import device_info
from dashboard.engine.compare.speed import device_group, speed_table, step_time
from dashboard.engine.model.trace import Trace

SEVERITY_ALARM = "alarm"  # wrong work or wrong numbers: must be fixed or explained
SEVERITY_WARNING = "warning"  # the numbers stand, but something was lost that a reader must know first
SEVERITY_NOTE = "note"  # worth knowing when reading the numbers
SEVERITIES: tuple[str, ...] = (SEVERITY_ALARM, SEVERITY_WARNING, SEVERITY_NOTE)  # most serious first

OVERVIEW_SCHEMA: dict[str, pl.DataType] = {
    "run": pl.String,
    "group": pl.String,
    "baseline": pl.String,
    "device": pl.String,
    "device_name": pl.String,
    "steps": pl.Int64,
    "median_step_us": pl.Float64,
    "p10_step_us": pl.Float64,
    "p90_step_us": pl.Float64,
    "time_source": pl.String,
    "work_unit": pl.String,
    "work_per_step": pl.Float64,
    "copies_per_step": pl.Float64,
    "hidden_copies_per_step": pl.Float64,
    "backend_requested": pl.String,
    "backends": pl.String,
    "backend_verdict": pl.String,
    "parity_passed": pl.Boolean,
    "parity_max_abs": pl.Float64,
    "speedup": pl.Float64,
    "cut": pl.String,
    "relation": pl.String,
}
VERDICT_FALLBACK = "FALLBACK"  # a forced backend was asked for, and another one ran
VERDICT_UNVERIFIED = "unverified"  # a forced backend was asked for, but no attention op or kernel is named
VERDICT_AS_REQUESTED = "as requested"
VERDICT_NOT_FORCED = "not forced"  # plain SDPA, hand-written attention, or a trace from elsewhere
# a forced backend whose op torch.compile replaced by inductor's generated kernels: no fallback,
# but not the requested kernels either (e.g. sdpa-math compiled runs no _scaled_dot_product_attention_math)
VERDICT_COMPILED = "compiled: inductor replaced the {requested} path"
INDUCTOR = "inductor"


def backend_check(trace: Trace) -> dict:
    """Requested vs detected attention backend: {requested (str | None), detected (list[str]),
    evidence (list[str]), verdict}. The verdict is FALLBACK only when another backend is seen;
    'compiled: inductor replaced the <backend> path' when the requested backend's own op is absent
    and inductor's generated kernels ran instead (torch.compile lowered it); when no attention op or
    kernel is named at all the trace cannot tell, and the verdict is 'unverified'."""
    found = detect_backends(trace)
    requested = requested_backend(trace)
    if not requested or requested in NOT_FORCED:
        verdict = VERDICT_NOT_FORCED
    elif not fallback(requested, found.backends):
        replaced = INDUCTOR in found.backends and not ({requested, "cpu_" + requested} & set(found.backends))
        verdict = VERDICT_COMPILED.format(requested=requested) if replaced else VERDICT_AS_REQUESTED
    elif found.backends:
        verdict = VERDICT_FALLBACK
    else:
        verdict = VERDICT_UNVERIFIED
    return {
        "requested": requested,
        "detected": list(found.backends),
        "evidence": found.all_evidence,
        "verdict": verdict,
    }


def backend_table(runs: dict[str, Trace]) -> pl.DataFrame:
    """One row per run: run, requested, detected (comma-joined), verdict (see backend_check),
    evidence (the op and kernel names that prove each detected backend)."""
    rows = []
    for label, trace in runs.items():
        check = backend_check(trace)
        rows.append(
            {
                "run": label,
                "requested": check["requested"],
                "detected": ", ".join(check["detected"]),
                "verdict": check["verdict"],
                "evidence": check["evidence"],
            }
        )
    return pl.DataFrame(
        rows,
        schema={
            "run": pl.String,
            "requested": pl.String,
            "detected": pl.String,
            "verdict": pl.String,
            "evidence": pl.List(pl.String),
        },
    )


CUT_DEVICE_LOST = "device events lost"
CUT_METADATA_LOST = "metadata after the events lost"
GPU_KINDS: tuple[str, ...] = ("cuda", "rocm", "mtia", "xpu", "hpu", "privateuse1")  # summary.device_info's accelerators


def cut_state(trace: Trace) -> str | None:
    """What a file cut off mid-write (Trace.cut) lost, in a few words, or None for a whole file:
    CUT_DEVICE_LOST when the trace is of an accelerator (summary.device_info) but none of its device
    events survived (so it has no GPU work and is grouped with CPU-only runs), CUT_METADATA_LOST
    when every event was read, else 'events after <ts> lost (<share> of the bytes read)'."""
    cut = trace.cut
    if cut is None:
        return None
    if cut.events_whole:
        return CUT_METADATA_LOST
    if not trace.has_gpu and device_info(trace)["type"] in GPU_KINDS:
        return CUT_DEVICE_LOST
    at = "" if cut.last_ts_ns is None else f" after {cut.last_ts_ns / 1e6:,.4g} ms"
    return f"events{at} lost ({cut.kept_share:.1%} of the bytes read)"


def device_label(device: str | None, name: str | None, cut: str | None) -> str:
    """How a run's device reads in a table: 'cuda · NVIDIA H100 80GB HBM3', 'cpu'; a cut
    accelerator trace whose device events were lost reads 'cuda trace, cut: device events lost',
    never as a CPU run."""
    kind = f"{device} trace, cut: {CUT_DEVICE_LOST}" if cut == CUT_DEVICE_LOST else (device or "")
    return " · ".join(part for part in (kind, name) if part)


def is_compiled_verdict(verdict: str | None) -> bool:
    """True for a VERDICT_COMPILED verdict (whatever backend it names)."""
    return bool(verdict) and verdict.startswith(VERDICT_COMPILED.split("{")[0])


def parity(trace: Trace) -> dict | None:
    """The collectors' parity record {max_abs, max_rel, atol, rtol, passed}, or None."""
    value = trace.collector.get("parity")
    return value if isinstance(value, dict) else None


def overview(runs: dict[str, Trace], baseline: str | None) -> pl.DataFrame:
    """One row per run: run, group (GROUP_GPU or GROUP_CPU), baseline (the run it is measured
    against: its device group's, see speed.device_groups), device (see below), device_name (from deviceProperties, else the collectors' metadata), steps,
    median/p10/p90_step_us (µs), time_source, work_unit ('kernel' = kernels + GPU memcpy + memset;
    'leaf cpu_op' on CPU-only traces), work_per_step (median over steps), copies_per_step and
    hidden_copies_per_step (count / steps), backend_requested, backends (detected, comma-joined,
    '' when none), backend_verdict (see backend_check), parity_passed and parity_max_abs (None without collector metadata),
    speedup (group baseline median / run median; > 1 is faster; never across device groups, nor
    between different workloads), relation (speed_table's: baseline, same workload, cross-device,
    or 'different workload: no speedup'), cut
    (what a file cut off mid-write lost, see cut_state; None for a whole file). The device type
    is summary.device_info's: 'cuda' | 'rocm' | 'mtia' | 'xpu' | 'hpu' | 'privateuse1' | 'cpu' | 'other'."""
    speed = speed_table(runs, baseline or "") if runs else None
    speedup = dict(zip(speed["run"], speed["speedup"])) if speed is not None else {}
    related = dict(zip(speed["run"], speed["relation"])) if speed is not None else {}
    against = dict(zip(speed["run"], speed["baseline"])) if speed is not None else {}
    rows = []
    for label, trace in runs.items():
        st = step_time(trace)
        steps = per_step(trace)
        table = copies_in_steps(trace)
        n = step_count(trace)
        check = backend_check(trace)
        par = parity(trace) or {}
        device = device_info(trace)
        name = device["name"] or trace.collector.get("device_name")
        rows.append(
            {
                "run": label,
                "group": device_group(trace),
                "baseline": against.get(label),
                "device": device["type"],
                "device_name": str(name) if name else None,
                "steps": trace.steps.height,
                "median_step_us": st.median_us,
                "p10_step_us": st.p10_us,
                "p90_step_us": st.p90_us,
                "time_source": st.source,
                "work_unit": work_unit(trace),
                "work_per_step": float(steps["work"].median()) if steps.height else 0.0,
                "copies_per_step": table.height / n,
                "hidden_copies_per_step": int(table["hidden"].sum()) / n,
                "backend_requested": check["requested"],
                "backends": ", ".join(check["detected"]),
                "backend_verdict": check["verdict"],
                "parity_passed": par.get("passed"),
                "parity_max_abs": par.get("max_abs"),
                "speedup": speedup.get(label),
                "cut": cut_state(trace),
                "relation": related.get(label),
            }
        )
    return pl.DataFrame(rows, schema=OVERVIEW_SCHEMA)
