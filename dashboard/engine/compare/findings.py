"""The findings a team must not miss when reviewing several runs (a hidden copy, a backend
fallback, a parity failure, more copies than the baseline, ...): one function per kind of
finding, each giving the rows of one run, and findings() gathering them in a fixed order.

Messages are plain text, one line each; trace strings (op and kernel names) are quoted as they
are, unescaped. Runs are passed as {label: Trace} in display order; `baseline` is one of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from dashboard.engine.analyses.summary import device_info
from dashboard.engine.compare.fingerprint import CROSS_DEVICE
from dashboard.engine.model.formatting import format_bytes
from dashboard.engine.compare.overview import (
    CUT_DEVICE_LOST,
    SEVERITIES,
    SEVERITY_ALARM,
    SEVERITY_NOTE,
    SEVERITY_WARNING,
    VERDICT_FALLBACK,
    VERDICT_UNVERIFIED,
    cut_state,
    is_compiled_verdict,
    overview,
    parity,
)
from dashboard.engine.compare.review_tables import copy_groups
from dashboard.engine.compare.speed import NO_SPEEDUP, group_baselines, speed_table
from dashboard.engine.model.constants import COPY_ALARM_BYTES, COPY_ALARM_SHARE
from dashboard.engine.model.trace import Trace

FINDING_SCHEMA: dict[str, pl.DataType] = {
    "run": pl.String,
    "severity": pl.String,
    "kind": pl.String,
    "message": pl.String,
}

Row = dict[str, Any]  # one overview row (overview.OVERVIEW_SCHEMA)
Found = list[dict[str, Any]]  # findings of one kind for one run, as _finding makes them


@dataclass(frozen=True)
class _Review:
    """What every run's findings read, computed once for all runs: the copy groups, copies per
    step, what the copies that are not hidden cost, why a run is related as it is to its baseline,
    each run's baseline, and the copy alarm's thresholds."""

    runs: dict[str, Trace]
    groups: pl.DataFrame
    copies_of: dict[str, float]
    copy_us: dict[str, float]
    speed_why: dict[str, str]
    against: dict[str, str]
    alarm_share: float
    alarm_bytes: float


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
    groups = copy_groups(runs, alarm_share, alarm_bytes) if groups is None else groups
    view = overview(runs, baseline) if overview_table is None else overview_table
    review = _Review(
        runs=runs,
        groups=groups,
        copies_of=dict(zip(view["run"].to_list(), view["copies_per_step"].to_list())),
        # what copies cost besides the hidden ones (those have their own alarm): requested, autograd, ...
        copy_us={
            run: float(part["us_per_step"].sum()) for (run,), part in groups.filter(~pl.col("hidden")).group_by(["run"])
        },
        speed_why=(
            dict(zip(*speed_table(runs, baseline or "").select("run", "relation_why").to_dict().values()))
            if runs
            else {}
        ),
        against=group_baselines(runs, baseline) if runs else {},
        alarm_share=alarm_share,
        alarm_bytes=alarm_bytes,
    )
    rows = [found for row in view.iter_rows(named=True) for found in _run_findings(review, row)]
    rows.sort(key=lambda r: -(r["_cost"] if r["_cost"] is not None else float("inf")))  # stable: by_severity keeps it
    return pl.DataFrame([{k: v for k, v in r.items() if k != "_cost"} for r in rows], schema=FINDING_SCHEMA)


def _run_findings(review: _Review, row: Row) -> Found:
    """One run's findings, kind by kind in a fixed order (findings() then ranks them by cost)."""
    label = row["run"]
    trace = review.runs[label]
    loader_lines = list(trace.warnings)
    out: Found = []
    if trace.cut is not None:
        out.append(_cut_finding(label, trace, loader_lines.pop(0) if loader_lines else ""))
    out += _hidden_copy_findings(review, label)
    out += _backend_findings(row)
    out += _parity_findings(label, trace)
    out += _more_copies_findings(review, row)
    out += _relation_findings(review, row)
    if trace.implicit_step:
        out.append(
            _finding(
                label, SEVERITY_NOTE, "no steps", "no ProfilerStep in the trace: the whole trace counts as one step"
            )
        )
    out += [_finding(label, SEVERITY_NOTE, "trace", text) for text in loader_lines]
    return out


def _cut_finding(label: str, trace: Trace, said: str) -> dict[str, Any]:
    """'cut trace': the loader's line (`said`), led, when every device event was lost, by what
    that makes of the run; a warning when every event was read, else an alarm."""
    lead = (
        f"this {device_info(trace)['type']} trace lost every device event, so it is counted as a CPU-only run "
        "(leaf CPU ops, the CPU step span) and compared only with CPU-only runs; its device work is unknown. "
        if cut_state(trace) == CUT_DEVICE_LOST
        else ""
    )
    severity = SEVERITY_WARNING if trace.cut.events_whole else SEVERITY_ALARM
    return _finding(label, severity, "cut trace", lead + said)


def _hidden_copy_findings(review: _Review, label: str) -> Found:
    """'hidden copy' (an alarm: the chains past the alarm's thresholds) and 'small hidden copy' (a
    note: the cheaper ones)."""
    hidden = review.groups.filter((pl.col("run") == label) & pl.col("hidden"))
    costly, small = hidden.filter(pl.col("alarm")), hidden.filter(~pl.col("alarm"))
    out: Found = []
    if costly.height:
        cost = float(costly["share"].fill_null(0.0).sum())
        out.append(_finding(label, SEVERITY_ALARM, "hidden copy", _hidden_words(costly), cost=cost))
    if small.height:
        below = (
            f"; below the alarm's {_share_words(review.alarm_share)} of the step or "
            f"{format_bytes(review.alarm_bytes)} a step"
        )
        cost = float(small["share"].fill_null(0.0).sum())
        out.append(_finding(label, SEVERITY_NOTE, "small hidden copy", _hidden_words(small) + below, cost=cost))
    return out


def _backend_findings(row: Row) -> Found:
    """'backend fallback' (an alarm), 'backend compiled' or 'backend unverified' (notes), from the
    overview's backend verdict."""
    label, verdict, requested, backends = row["run"], row["backend_verdict"], row["backend_requested"], row["backends"]
    if verdict == VERDICT_FALLBACK:
        text = f"requested SDPA backend '{requested}' but the trace shows {backends}"
        return [_finding(label, SEVERITY_ALARM, "backend fallback", text)]
    if is_compiled_verdict(verdict):
        text = (
            f"requested SDPA backend '{requested}', but torch.compile replaced its op by inductor's "
            f"generated kernels ({backends}): the numbers are the compiled kernels', not the {requested} path's"
        )
        return [_finding(label, SEVERITY_NOTE, "backend compiled", text)]
    if verdict == VERDICT_UNVERIFIED:
        text = (
            f"requested SDPA backend '{requested}', but no attention op or kernel is named in the "
            "trace (torch.compile may have decomposed it), so the backend cannot be checked"
        )
        return [_finding(label, SEVERITY_NOTE, "backend unverified", text)]
    return []


def _parity_findings(label: str, trace: Trace) -> Found:
    """'parity failure': the collectors' parity record says the output disagreed with fp32."""
    par = parity(trace)
    if par is None or par.get("passed") is not False:
        return []
    text = (
        f"output differs from the fp32 reference: max abs {_num(par.get('max_abs'))}, max rel "
        f"{_num(par.get('max_rel'))} (atol {_num(par.get('atol'))}, rtol {_num(par.get('rtol'))})"
    )
    return [_finding(label, SEVERITY_ALARM, "parity failure", text)]


def _more_copies_findings(review: _Review, row: Row) -> Found:
    """'more copies': more copies per step than the run's baseline, with what the copies that are
    not hidden add to the step and which grew most. A note: only hidden copies are alarms (their
    own, above); these are asked for. Said only within one workload: between different work
    "more copies" says nothing."""
    label = row["run"]
    base = review.against.get(label)
    if base is None or label == base or row["relation"] == NO_SPEEDUP:
        return []
    mine, theirs = row["copies_per_step"], review.copies_of[base]
    if not mine > theirs:
        return []
    added_us = review.copy_us.get(label, 0.0) - review.copy_us.get(base, 0.0)
    step_us = row["median_step_us"] or 0.0
    share = added_us / step_us if step_us > 0 else None
    cost = (
        f"; the copies that are not hidden add {added_us / 1000:+.3g} ms a step"
        + (f", {share:.1%} of the step" if share is not None else "")
        if added_us > 0
        else ""
    )
    text = (
        f"{mine:.4g} {_plural(mine, 'copy', 'copies')} per step against {theirs:.4g} in the baseline '{base}'"
        + cost
        + _largest_growth(review.groups, label, base)
    )
    return [_finding(label, SEVERITY_NOTE, "more copies", text, cost=share if share is not None else 0.0)]


def _largest_growth(groups: pl.DataFrame, label: str, base: str) -> str:
    """'; most of it: KIND from CHAIN (CLASS, +x ms a step)': the copy group that is not hidden
    and grew most against the baseline, or '' when none grew."""
    keys = ["kind", "op_chain", "copy_class"]
    plain = groups.filter(~pl.col("hidden")).with_columns(pl.col(keys).fill_null(""))  # a null key would match nothing
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
    if not (worst.height and worst["grew"][0] > 0):
        return ""
    return (
        f"; most of it: {worst['kind'][0]} from {worst['op_chain'][0] or 'no op'} "
        f"({worst['copy_class'][0]}, {worst['grew'][0] / 1000:+.3g} ms a step)"
    )


def _relation_findings(review: _Review, row: Row) -> Found:
    """'different workload' (a warning: no speedup is set) or 'cross-device' (a note: the speedup
    compares devices as well as code), from speed_table's relation to the baseline."""
    label = row["run"]
    base, why = review.against.get(label), review.speed_why.get(label, "")
    if row["relation"] == NO_SPEEDUP:
        text = f"not the same work as '{base}' ({why}): no speedup is set, and its changes are not one code change"
        return [_finding(label, SEVERITY_WARNING, "different workload", text, cost=None)]
    if row["relation"] == CROSS_DEVICE:
        text = f"the same workload as '{base}' on another device ({why}): the speedup compares devices as well as code"
        return [_finding(label, SEVERITY_NOTE, "cross-device", text)]
    return []


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


def _finding(run: str, severity: str, kind: str, message: str, cost: float | None = None) -> dict[str, Any]:
    """One finding; `cost` (share of the step's time, 0..1) ranks findings of one severity: the
    biggest change in time leads, and a finding without a time (a cut, a fallback, a parity
    failure: wrong numbers, whatever they cost) before all of them."""
    return {"run": run, "severity": severity, "kind": kind, "message": message, "_cost": cost}


def _plural(n: float, one: str, many: str) -> str:
    return one if n == 1 else many


def _num(value: object) -> str:
    return f"{value:.3g}" if isinstance(value, (int, float)) else "n/a"
