"""The review of several runs side by side: one overview row per run and the findings a team
must not miss (a hidden copy, a backend fallback, a parity failure, more copies than the baseline).

Pure functions over loaded traces; the dashboard, the CLI and the offline reports all read these.
Runs are passed as {label: Trace} in display order; `baseline` is one of the labels.
Units: `*_us` columns are microseconds, `*_bytes` bytes, `share` a fraction 0..1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from dashboard.engine.analyses.backends import NOT_FORCED, detect_backends, fallback, requested_backend
from dashboard.engine.analyses.copies import copies_in_steps
from dashboard.engine.compare.diff import (
    CHANGES,
    NOISE_NS,
    SLOWER,
    changed_rows,
    explained,
    kernel_diff,
    op_diff,
    readings,
)
from dashboard.engine.analyses.efficiency import efficiency_block
from dashboard.engine.analyses.roofline import ROOFLINE_ROW_SCHEMA, own_roofline
from dashboard.engine.analyses.kernels import family_per_step, kernel_table, per_step, step_count, work_unit
from dashboard.engine.model.trace import Trace, per_trace
from dashboard.engine.compare.fingerprint import CROSS_DEVICE
from dashboard.engine.compare.speed import (
    NO_SPEEDUP,
    GROUP_CPU,
    GROUP_GPU,
    MIXED_DEVICES_WHY,
    Group,
    device_group,
    device_groups,
    group_baselines,
    speed_table,
    step_time,
    step_time_column,
)
from dashboard.engine.analyses.summary import device_info

__all__ = ["GROUP_CPU", "GROUP_GPU", "MIXED_DEVICES_WHY", "Group", "device_group", "device_groups", "group_baselines"]

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
FINDING_SCHEMA: dict[str, pl.DataType] = {
    "run": pl.String,
    "severity": pl.String,
    "kind": pl.String,
    "message": pl.String,
}
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

# The copy alarms' thresholds live in constants.py (the CLI's flags show them); re-exported here.
from dashboard.engine.model.constants import COPY_ALARM_BYTES, COPY_ALARM_SHARE  # noqa: E402,F401


def step_time_total_ns(trace: Trace) -> int:
    """The time the step-time statistics use, summed over all steps (ns): device busy time on
    GPU traces, the CPU step span otherwise (the same choice as speed.step_time)."""
    return int(per_step(trace)[step_time_column(trace)].sum() or 0)


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


def findings(
    runs: dict[str, Trace],
    baseline: str | None,
    *,
    overview_table: pl.DataFrame | None = None,
    groups: pl.DataFrame | None = None,
    alarm_share: float = COPY_ALARM_SHARE,
    alarm_bytes: float = COPY_ALARM_BYTES,
) -> pl.DataFrame:
    """What a reviewer must see first: run, severity ('alarm' or 'note'), kind, message (one line).

    Alarms: 'cut trace' (the file was cut off mid-write and events were lost: the loader's own
    line, and when the device events were lost, that the run counts as CPU-only), 'hidden copy' (a
    copy made inside another op, with bytes and share of the step, when its chain costs at least
    `alarm_share` of the step or `alarm_bytes` a step; a cheaper one is the note 'small hidden
    copy'), 'backend fallback' (another SDPA
    backend ran than the one requested), 'parity failure' (the output disagreed with the fp32
    reference). Warning: 'cut trace' when every event was read and only metadata after them was
    lost. Notes: 'more copies' (more copies per step than
    the run's baseline, which is always of the same device group, with what the copies that are not
    hidden cost: requested, autograd and communication copies are never alarms; not said between
    runs of different work), 'backend compiled' (the
    requested backend's op was replaced by inductor's kernels), 'backend unverified' (a backend
    was forced but the trace names no attention op or kernel), 'no steps' (no ProfilerStep: the
    whole trace is one step), 'trace' (loader warnings such as a salvaged cut-off file). Messages
    are plain text: trace strings (op and kernel names) are quoted as they are, unescaped. Pass `overview_table` and `groups` when already
    computed for the same runs and baseline, to avoid computing them twice."""
    rows: list[dict[str, str]] = []
    groups = copy_groups(runs, alarm_share, alarm_bytes) if groups is None else groups
    view = overview(runs, baseline) if overview_table is None else overview_table
    copies_of = dict(zip(view["run"].to_list(), view["copies_per_step"].to_list()))
    # what copies cost besides the hidden ones (those have their own alarm, above): requested, autograd, ...
    copy_us = {
        run: float(part["us_per_step"].sum()) for (run,), part in groups.filter(~pl.col("hidden")).group_by(["run"])
    }
    speed_why = (
        dict(zip(*speed_table(runs, baseline or "").select("run", "relation_why").to_dict().values())) if runs else {}
    )
    against = group_baselines(runs, baseline) if runs else {}
    for row in view.iter_rows(named=True):
        label = row["run"]
        trace = runs[label]
        loader_lines = list(trace.warnings)
        if trace.cut is not None:
            said = loader_lines.pop(0) if loader_lines else ""
            state = cut_state(trace)
            lead = (
                f"this {device_info(trace)['type']} trace lost every device event, so it is counted as a CPU-only run "
                "(leaf CPU ops, the CPU step span) and compared only with CPU-only runs; its device work is unknown. "
                if state == CUT_DEVICE_LOST
                else ""
            )
            severity = SEVERITY_WARNING if trace.cut.events_whole else SEVERITY_ALARM
            rows.append(_finding(label, severity, "cut trace", lead + said))
        hidden = groups.filter((pl.col("run") == label) & pl.col("hidden"))
        costly, small = hidden.filter(pl.col("alarm")), hidden.filter(~pl.col("alarm"))
        if costly.height:
            rows.append(
                _finding(
                    label,
                    SEVERITY_ALARM,
                    "hidden copy",
                    _hidden_words(costly),
                    cost=float(costly["share"].fill_null(0.0).sum()),
                )
            )
        if small.height:
            rows.append(
                _finding(
                    label,
                    SEVERITY_NOTE,
                    "small hidden copy",
                    _hidden_words(small) + f"; below the alarm's {_share_words(alarm_share)} of the step or "
                    f"{format_bytes(alarm_bytes)} a step",
                    cost=float(small["share"].fill_null(0.0).sum()),
                )
            )
        if row["backend_verdict"] == VERDICT_FALLBACK:
            rows.append(
                _finding(
                    label,
                    SEVERITY_ALARM,
                    "backend fallback",
                    f"requested SDPA backend '{row['backend_requested']}' but the trace shows {row['backends']}",
                )
            )
        elif is_compiled_verdict(row["backend_verdict"]):
            rows.append(
                _finding(
                    label,
                    SEVERITY_NOTE,
                    "backend compiled",
                    f"requested SDPA backend '{row['backend_requested']}', but torch.compile replaced its op by inductor's "
                    f"generated kernels ({row['backends']}): the numbers are the compiled kernels', not the {row['backend_requested']} path's",
                )
            )
        elif row["backend_verdict"] == VERDICT_UNVERIFIED:
            rows.append(
                _finding(
                    label,
                    SEVERITY_NOTE,
                    "backend unverified",
                    f"requested SDPA backend '{row['backend_requested']}', but no attention op or kernel is named in the "
                    "trace (torch.compile may have decomposed it), so the backend cannot be checked",
                )
            )
        par = parity(trace)
        if par is not None and par.get("passed") is False:
            rows.append(
                _finding(
                    label,
                    SEVERITY_ALARM,
                    "parity failure",
                    f"output differs from the fp32 reference: max abs {_num(par.get('max_abs'))}, max rel "
                    f"{_num(par.get('max_rel'))} (atol {_num(par.get('atol'))}, rtol {_num(par.get('rtol'))})",
                )
            )
        base = against.get(label)
        # copies are compared only within one workload: between different work "more copies" says nothing
        if (
            base is not None
            and label != base
            and row["relation"] != NO_SPEEDUP
            and row["copies_per_step"] > copies_of[base]
        ):
            mine, theirs = row["copies_per_step"], copies_of[base]
            added_us = copy_us.get(label, 0.0) - copy_us.get(base, 0.0)
            step_us = row["median_step_us"] or 0.0
            share = added_us / step_us if step_us > 0 else None
            keys = ["kind", "op_chain", "copy_class"]
            plain = groups.filter(~pl.col("hidden")).with_columns(
                pl.col(keys).fill_null("")
            )  # a null key would match nothing
            worst = (
                plain.filter(pl.col("run") == label)
                .select(*keys, "us_per_step")
                .join(
                    plain.filter(pl.col("run") == base).select(*keys, pl.col("us_per_step").alias("base_us")),
                    on=keys,
                    how="left",
                )  # keys never null: op_chain is joined text
                .with_columns((pl.col("us_per_step") - pl.col("base_us").fill_null(0.0)).alias("grew"))
                .sort(["grew", "kind", "op_chain"], descending=[True, False, False])
            )
            cost = (
                f"; the copies that are not hidden add {added_us / 1000:+.3g} ms a step"
                + (f", {share:.1%} of the step" if share is not None else "")
                if added_us > 0
                else ""
            )
            largest = (
                f"; most of it: {worst['kind'][0]} from {worst['op_chain'][0] or 'no op'} "
                f"({worst['copy_class'][0]}, {worst['grew'][0] / 1000:+.3g} ms a step)"
                if worst.height and worst["grew"][0] > 0
                else ""
            )
            rows.append(
                _finding(
                    label,
                    SEVERITY_NOTE,  # only hidden copies are alarms (their own, above): these are asked for
                    "more copies",
                    f"{mine:.4g} {_plural(mine, 'copy', 'copies')} per step against {theirs:.4g} in the baseline '{base}'"
                    + cost
                    + largest,
                    cost=share if share is not None else 0.0,
                )
            )
        if row["relation"] == NO_SPEEDUP:
            rows.append(
                _finding(
                    label,
                    SEVERITY_WARNING,
                    "different workload",
                    f"not the same work as '{base}' ({speed_why.get(label, '')}): no speedup is set, and "
                    "its changes are not one code change",
                    cost=None,
                )
            )
        elif row["relation"] == CROSS_DEVICE:
            rows.append(
                _finding(
                    label,
                    SEVERITY_NOTE,
                    "cross-device",
                    f"the same workload as '{base}' on another device ({speed_why.get(label, '')}): the "
                    "speedup compares devices as well as code",
                )
            )
        if trace.implicit_step:
            rows.append(
                _finding(
                    label, SEVERITY_NOTE, "no steps", "no ProfilerStep in the trace: the whole trace counts as one step"
                )
            )
        for text in loader_lines:
            rows.append(_finding(label, SEVERITY_NOTE, "trace", text))
    rows.sort(key=lambda r: -(r["_cost"] if r["_cost"] is not None else float("inf")))  # stable: by_severity keeps it
    return pl.DataFrame([{k: v for k, v in r.items() if k != "_cost"} for r in rows], schema=FINDING_SCHEMA)


def _share_words(share: float) -> str:
    return f"{share:.0%}" if share * 100 == round(share * 100) else f"{share:.2%}"


def _hidden_words(hidden: pl.DataFrame) -> str:
    """'N hidden copies per step (bytes, share of the step); largest: KIND from CHAIN (and n other chains)'."""
    worst = hidden.sort("us_per_step", descending=True, maintain_order=True).row(0, named=True)
    per_step = hidden["per_step"].sum()
    size = hidden["bytes_per_step"].sum() if hidden["bytes_per_step"].is_not_null().any() else None
    share = hidden["share"].sum() if hidden["share"].is_not_null().any() else None
    detail = ", ".join(
        part
        for part in (
            f"{format_bytes(size)} per step" if size else "",
            f"{share:.1%} of the step time" if share is not None else "",
        )
        if part
    )
    others = hidden.height - 1
    more = f" (and {others} other {_plural(others, 'chain', 'chains')})" if others else ""
    return (
        f"{per_step:.4g} hidden {_plural(per_step, 'copy', 'copies')} per step"
        + (f" ({detail})" if detail else "")
        + f"; largest: {worst['kind']} from {worst['op_chain']}{more}"
    )


def by_severity(found: pl.DataFrame) -> pl.DataFrame:
    """Findings ordered alarms first, then warnings, then notes (in their order within each)."""
    rank = {s: i for i, s in enumerate(SEVERITIES)}
    return found.sort(
        pl.col("severity").replace_strict(rank, default=len(rank), return_dtype=pl.Int64), maintain_order=True
    )


def format_bytes(value: float | None) -> str:
    """Bytes as a short string in decimal units, like bandwidth in GB/s: '16.8 MB'; '' for None."""
    if value is None:
        return ""
    size = float(value)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(size) < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"


def _finding(run: str, severity: str, kind: str, message: str, cost: float | None = None) -> dict[str, Any]:
    """One finding; `cost` (share of the step's time, 0..1) ranks findings of one severity: the
    biggest change in time leads, and a finding without a time (a cut, a fallback, a parity
    failure: wrong numbers, whatever they cost) before all of them."""
    return {"run": run, "severity": severity, "kind": kind, "message": message, "_cost": cost}


def _plural(n: float, one: str, many: str) -> str:
    return one if n == 1 else many


def _num(value: object) -> str:
    return f"{value:.3g}" if isinstance(value, (int, float)) else "n/a"


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


@per_trace
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


ROOFLINE_SCHEMA: dict[str, pl.DataType] = {
    "run": pl.String,
    "measure": pl.String,
    "name": pl.String,
    "backend": pl.String,
    "shape": pl.String,
    "dtype": pl.String,
    "device": pl.String,
    "count": pl.Int64,
    "mean_us": pl.Float64,
    "bytes": pl.Float64,
    "intensity": pl.Float64,
    "tflops": pl.Float64,
    "tbps": pl.Float64,
    "peak_tflops": pl.Float64,
    "peak_tbps": pl.Float64,
    "pct_of_roofline": pl.Float64,
    "bound": pl.String,
}
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


TOP_EXPLAINED = 12  # rows of a kernel diff whose share of the change is stated


@dataclass(frozen=True)
class Change:
    """One run against its device group's baseline over the chosen steps: kernels (diff.kernel_diff,
    ranked by their effect on step time), ops (diff.op_diff), readings (diff.readings: one line per
    plain cause), top (rows counted in `explained`) and explained ((ns per step the top rows
    account for, ns per step of the whole change in summed kernel time); diff.explained)."""

    run: str
    baseline: str
    step_base: int | None
    step_run: int | None
    kernels: pl.DataFrame
    ops: pl.DataFrame
    readings: list[str]
    top: int
    explained: tuple[float, float]


def changes(
    runs: dict[str, Trace],
    baseline: str | None,
    steps: dict[str, int | None] | None = None,
    by: str = "base",
    top: int = TOP_EXPLAINED,
) -> list[Change]:
    """What changed in each run against its device group's baseline (speed.group_baselines), in run
    order, the baselines themselves left out. `steps`: run -> the step compared (None or absent:
    every step, per-step figures being totals / steps); `by`: 'name' (full kernel names) or 'base'
    (template instances folded under their base name)."""
    steps = steps or {}
    against = group_baselines(runs, baseline) if runs else {}
    out = []
    for label, trace in runs.items():
        base = against.get(label)
        if base is None or base == label:
            continue
        sb, so = steps.get(base), steps.get(label)
        kernels = kernel_diff(runs[base], trace, sb, so, by=by)
        out.append(
            Change(
                run=label,
                baseline=base,
                step_base=sb,
                step_run=so,
                kernels=kernels,
                ops=op_diff(runs[base], trace, sb, so),
                readings=readings(runs[base], trace, sb, so),
                top=top,
                explained=explained(kernels, top),
            )
        )
    return out


KERNELS_BY_RUN_SCHEMA: dict[str, pl.DataType] = {
    "run": pl.String,
    "name": pl.String,
    "family": pl.String,
    "count": pl.UInt32,
    "per_step": pl.Float64,
    "total_ns": pl.Int64,
    "mean_ns": pl.Float64,
    "share": pl.Float64,
    "total_us": pl.Float64,
    "mean_us": pl.Float64,
}


def kernels_by_run(runs: dict[str, Trace]) -> pl.DataFrame:
    """Every kernel (leaf op on CPU traces) of every run, over all its steps (KERNELS_BY_RUN_SCHEMA):
    run, then kernels.kernel_table's columns (name, family, count, per_step, total_ns, mean_ns,
    share of the run's device work time, 0..1), then total_us and mean_us (µs, as the tables show
    them). Runs in the given order, each run's kernels in kernel_table's order."""
    frames = [kernel_table(trace).select(pl.lit(label).alias("run"), pl.all()) for label, trace in runs.items()]
    if not frames:
        return pl.DataFrame(schema=KERNELS_BY_RUN_SCHEMA)
    return pl.concat(frames, how="vertical_relaxed").with_columns(
        (pl.col("total_ns") / 1000.0).alias("total_us"),
        (pl.col("mean_ns") / 1000.0).alias("mean_us"),
    )


def diffs_by_run(changes: list[Change], table: str) -> pl.DataFrame:
    """The kernel diff (`table` 'kernels') or op diff ('ops') of every Change, one frame: run and
    baseline, then diff.kernel_diff's (or op_diff's) columns, then the times in µs as the tables
    show them: base_us_per_step, other_us_per_step, delta_us_per_step, base_mean_us, other_mean_us.
    Runs in the given order, each run's rows in its diff's order (largest change of time first)."""
    if table not in ("kernels", "ops"):
        raise ValueError(f"table is 'kernels' or 'ops', not {table!r}")
    if not changes:
        raise ValueError("no changes to stack")
    return pl.concat(
        [
            getattr(c, table).select(pl.lit(c.run).alias("run"), pl.lit(c.baseline).alias("baseline"), pl.all())
            for c in changes
        ],
        how="vertical_relaxed",
    ).with_columns(
        *[(pl.col(f"{side}_ns_per_step") / 1000.0).alias(f"{side}_us_per_step") for side in ("base", "other", "delta")],
        *[(pl.col(f"{side}_mean_ns") / 1000.0).alias(f"{side}_mean_us") for side in ("base", "other")],
    )


EXPLAINED_BY_RUN_SCHEMA: dict[str, pl.DataType] = {
    "run": pl.String,
    "baseline": pl.String,
    "rows": pl.Int64,  # the top changed rows of the run's kernel diff
    "top_us": pl.Float64,  # what they change of the summed kernel time per step, µs
    "total_us": pl.Float64,  # the change of the summed kernel time per step, µs
}


def explained_by_run(changes: list[Change]) -> pl.DataFrame:
    """How much of each run's change in summed kernel time per step its top changed rows account
    for (Change.explained, in µs), one row per run (EXPLAINED_BY_RUN_SCHEMA): the table form of
    explained_sentence for many runs."""
    return pl.DataFrame(
        {
            "run": [c.run for c in changes],
            "baseline": [c.baseline for c in changes],
            "rows": [changed_rows(c.kernels, c.top) for c in changes],
            "top_us": [c.explained[0] / 1000.0 for c in changes],
            "total_us": [c.explained[1] / 1000.0 for c in changes],
        },
        schema=EXPLAINED_BY_RUN_SCHEMA,
    )


MEAN_CHANGE = f"{SLOWER - 1:.0%}"
"""diff.SLOWER / FASTER as a reader writes them ('5%'): the mean-duration change past which a
kernel is slower or faster, for the sentences and labels that name it."""
EXPLAINED_STYLES = ("report", "tab")


def signed_number(value: float, digits: int) -> str:
    """A change with its sign at `digits` decimals, thousands separated: '+1,234.5', '-0.7'; one
    that rounds to zero reads '+0.0', never '-0.0' (charts.signed, for the engine's sentences)."""
    text = f"{value:+,.{digits}f}"
    return "+" + text[1:] if text.startswith("-") and not text.strip("-0.,") else text


def explained_sentence(change: Change, style: str = "report", lead: str = "") -> str:
    """The sentence saying how much of the change in summed kernel time per step the top changed
    rows of a run's kernel diff account for (Change.explained), its thresholds read from
    diff.SLOWER and diff.NOISE_NS. style 'report' (plain text, amounts in µs): the rows are the
    ones listed right below it, as the reports list them; 'tab' (Markdown, amounts in bold, in ms
    past 10 ms): a table of every row follows, as on the Kernels tab. `lead` goes before it (the
    sentence then starts in lower case: "Over all steps: the top 12 changed rows ...")."""
    if style not in EXPLAINED_STYLES:
        raise ValueError(f"style must be one of {', '.join(EXPLAINED_STYLES)}")
    top_ns, total_ns = change.explained
    rows = changed_rows(change.kernels, change.top)
    tab = style == "tab"

    def amount(ns: float) -> str:
        if not tab:
            return f"{signed_number(ns / 1000, 1)} µs"
        us = ns / 1000.0
        return f"**{signed_number(us, 1)} µs**" if abs(us) < 10_000 else f"**{signed_number(us / 1000, 2)} ms**"

    if not rows:
        text = (
            f"no kernel changed its count, or its mean time by more than {MEAN_CHANGE} and {NOISE_NS / 1000:g} µs a "
            f"step; summed kernel time per step changed by {amount(total_ns)}."
        )
    else:
        plural, verb = ("s", "") if rows > 1 else ("", "s")
        share = f" ({top_ns / total_ns:.0%})" if abs(total_ns) >= 1e3 else ""
        change_words = f"change in summed kernel time per step{share}"
        if tab:
            text = (
                f"the top {rows} changed row{plural} account{verb} for {amount(top_ns)} of the {amount(total_ns)} "
                f"{change_words}; the rest comes from the rows below them and those within {MEAN_CHANGE} ('same'). "
                "Summed kernel time counts overlapping kernels twice, so it is not the step time."
            )
        else:
            text = (
                f"the {rows} changed kernel{plural} below account{verb} for {amount(top_ns)} of the {amount(total_ns)} "
                f"{change_words}; the rest comes from kernels not listed. Overlapping kernels count twice, so this is "
                "not the step time."
            )
    return lead + text if lead else text[0].upper() + text[1:]
