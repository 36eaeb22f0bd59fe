"""The text the terminal gets from `attnscope summary`: one compact table per file, and the
slowest rank of each step for a folder of rank traces."""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

from dashboard.engine.model.constants import UNIT_KERNEL, WAITING_CHECKS

if TYPE_CHECKING:
    from dashboard.engine.model.trace import Trace

MAX_STEP_LINES = 8  # steps whose top kernel families the text summary names


def _head_lines(summary: dict[str, Any]) -> list[str]:
    """The file, its device, events and unit of work."""
    dev = summary["device"]
    unit = summary["work_unit"]
    lines = [
        f"{summary['source']}  ({dev['type']}{', ' + dev['name'] if dev['name'] else ''}; "
        f"{summary['events']:,} events; "
        + (
            f"unit of device work: {unit})"
            if unit == UNIT_KERNEL
            else f"unit of work: {unit}, an op that computes and holds "
            "no other such op; views, allocations and bookkeeping ops are not counted)"
        ),
    ]
    return lines


def _health_lines(summary: dict[str, Any]) -> list[str]:
    """The health line: the trace's faults, then the facts of the run."""
    lines: list[str] = []
    problems = [h for h in summary["health"] if h["check"] not in WAITING_CHECKS]
    waiting = [h for h in summary["health"] if h["check"] in WAITING_CHECKS]
    lines.append(
        "  health: "
        + (
            "; ".join(f"{h['check']} {h['count']:,} ({h['example']})" for h in problems)
            if problems
            else "no problem found (overlaps, overflowed durations, lost launches or device events, clock skew)"
        )
    )
    if waiting:
        lines.append(
            "  how the device ran (facts of the run, not faults of the trace): "
            + "; ".join(f"{h['check']} {h['count']:,} ({h['example']})" for h in waiting)
        )
    backends = summary["attention"]["backends"]
    lines.append(f"  attention: {', '.join(backends) if backends else 'none detected'}")
    if summary["memcpy"]:
        lines.append("  memcpy: " + ", ".join(f"{k} {v:,}" for k, v in summary["memcpy"].items()))
    return lines


def _step_lines(summary: dict[str, Any]) -> list[str]:
    """Each step's counts, where its time goes, cut and ran-ahead notes."""
    unit = summary["work_unit"]
    lines: list[str] = []
    header = f"  {'step':<32} {'work':>8} {'kernel':>8} {'memcpy':>8} {'memset':>8} {'span ms':>10} {'busy ms':>10}"
    lines.append(header)
    for step in summary["steps"]:
        name = f"{step['name']} (past the cut)" if step["past_cut"] else step["name"]
        lines.append(
            f"  {name:<32} {step['work']:>8,} {step['kernel']:>8,} {step['gpu_memcpy']:>8,} "
            f"{step['gpu_memset']:>8,} {step['dur_us'] / 1000:>10.3f} {step['busy_us'] / 1000:>10.3f}"
        )
    shown = summary["steps"][:MAX_STEP_LINES]
    for step in shown:
        if step["top_families"]:
            busy = ""
            if step.get("device_span_us") and unit == UNIT_KERNEL:
                busy = f"; device busy {step['busy_us'] / step['device_span_us']:.0%} of the {_ms(step['device_span_us'])} its work spans"
                if step["ran_ahead_us"]:
                    busy += f", which ends {_ms(step['ran_ahead_us'])} after the step's CPU span (the CPU ran ahead)"
            lines.append(
                f"  {step['name']}: "
                + ", ".join(f"{f['family']} {f['share']:.1%}" for f in step["top_families"])
                + f" of the {'device' if unit == UNIT_KERNEL else 'op'} time{busy}"
            )
    if len(summary["steps"]) > len(shown):
        lines.append(f"  ... where the time goes in the other {len(summary['steps']) - len(shown):,} steps: see --json")
    past = [step["name"] for step in summary["steps"] if step["past_cut"]]
    if past:
        lines.append(
            f"  {', '.join(past)} {'was' if len(past) == 1 else 'were'} still running at the last event read before "
            "the cut: what came after it is missing, so "
            + ("its counts are" if len(past) == 1 else "their counts are")
            + " partial"
        )
    ahead = sum(1 for step in summary["steps"] if step.get("ran_ahead_us"))
    if ahead and unit == UNIT_KERNEL:
        lines.append(
            f"  the CPU ran ahead in {ahead:,} of {len(summary['steps']):,} steps: the device finished work they launched "
            "after their CPU span ended (a kernel counts in the step that launched it; busy and idle are measured on the "
            "device's own timeline)"
        )
    return lines


def _efficiency_lines(summary: dict[str, Any]) -> list[str]:
    """Attention efficiency and the graph replays."""
    unit = summary["work_unit"]
    lines: list[str] = []
    lines.append(f"  attention efficiency: {_efficiency_line(summary['efficiency'])}")
    for step in summary["efficiency"]["per_step"]:  # collectors' traces: the measure `compare` ranks variants by
        lines.append(f"  attention efficiency over the whole step: {_step_efficiency_line(step, unit == UNIT_KERNEL)}")
    return lines + graph_lines(summary["graphs"])


GRAPH_OPS_SHOWN = 8


def _short(kernel: str) -> str:
    """A kernel's name as its function: namespace::base, without template arguments or signature."""
    from dashboard.engine.rules.names import parse

    found = parse(kernel)
    return f"{found.namespace}::{found.base}" if found.namespace else found.base or kernel


def graph_lines(graphs: dict[str, Any]) -> list[str]:
    """The graph replays: how much device time they hold and, with a source (--graph-source), the op
    chains their kernels came from; without one, that the trace does not say (never idle, never 'no ops')."""
    if not graphs["launches"]:
        return []
    one = graphs["launches"] == 1
    ops = ", ".join(f"{n:,} under {op}" for op, n in graphs["ops"].items()) or f"no op holds {'it' if one else 'them'}"
    launches = "1 launch" if one else f"{graphs['launches']:,} launches"
    share = graphs.get("share")
    of = f", {share:.0%} of the device time" if share is not None else ""
    lines = [f"  graph replays: {launches} replayed {graphs['kernels']:,} device events{of} ({ops})"]
    found = graphs.get("attribution")
    if found is None:
        lines.append(
            "    the ops that launched them are not in this trace: --graph-source TRACE (the same code run "
            "without graphs) attributes them"
        )
        return lines
    part = found["attributed_share"]
    lines.append(
        f"    attributed through {os.path.basename(found['source'])}: {found['attributed']:,} of {found['kernels']:,} "
        f"device events" + (f", {part:.0%} of the replayed time" if part is not None else "")
    )
    for op in found["ops"][:GRAPH_OPS_SHOWN]:
        lines.append(f"      {op['device_us']:>10,.1f} µs {op['kernels']:>5,} x  {op['chain']}")
    if len(found["ops"]) > GRAPH_OPS_SHOWN:
        lines.append(f"      ... and {len(found['ops']) - GRAPH_OPS_SHOWN} more op chains")
    if found["without_op"]:
        lines.append(f"    {found['without_op']:,} aligned with work no op launched in the source")
    if found["unaligned"]:
        names = ", ".join(_short(n) for n in found["unaligned"][:3]) + (
            f" and {len(found['unaligned']) - 3} more" if len(found["unaligned"]) > 3 else ""
        )
        lines.append(f"    not in the source (left unattributed): {names}")
    return lines


def _host_lines(summary: dict[str, Any]) -> list[str]:
    """Host-bound or device-bound, and the attention call's host side (analyses.host.host_line)."""
    from dashboard.engine.analyses.host import host_line

    line = host_line(summary.get("host"))
    return [f"  {line}"] if line else []


def _memory_lines(summary: dict[str, Any]) -> list[str]:
    """The memory peak, as recorded."""
    lines: list[str] = []
    memory = summary["memory"]  # decimal MB and GB (10^6, 10^9 bytes)
    size = lambda n, sign="": f"{n / 1e9:{sign}.2f} GB" if abs(n) >= 1e9 else f"{n / 1e6:{sign}.1f} MB"  # noqa: E731
    if not memory["recorded"]:
        lines.append("  memory: not recorded (profile_memory=False)")
    elif not memory["events"]:
        lines.append("  memory: recorded (profile_memory=True), but the trace holds no allocation or free")
    elif memory["peak_allocated_bytes"] is None:
        lines.append(
            f"  memory: {memory['events']:,} memory events, but without the allocator's Total Allocated "
            "(an older profiler): no peak"
        )
    else:
        where = f"at {memory['peak_op'] or 'no op'}" + (
            f" (step {memory['peak_step']})" if memory["peak_step"] is not None else " (outside any step)"
        )
        added = f"; {size(memory['added_bytes'], '+')} over the step" if memory["added_bytes"] is not None else ""
        lines.append(
            f"  memory: peak {size(memory['peak_allocated_bytes'])} allocated on {memory['device']}, {where}{added}"
        )
    return lines


def _copy_lines(summary: dict[str, Any]) -> list[str]:
    """Copies by class and the hidden ones by op chain."""
    lines: list[str] = []
    classes: dict[str, int] = {}
    for copy in summary["copies"]:
        classes[copy["class"]] = classes.get(copy["class"], 0) + copy["count"]
    if classes:
        lines.append("  copies by class: " + ", ".join(f"{name} {n:,}" for name, n in sorted(classes.items())))
    hidden = [c for c in summary["copies"] if c["hidden"]]
    if hidden:
        lines.append("  hidden copies (made inside another op):")
        for copy in hidden[:10]:
            size = (
                f"{copy['bytes']:,} B in all"
                if copy["bytes"] is not None
                else "bytes unknown (no bytes or shapes recorded)"
            )
            lines.append(f"    {copy['count']:>6,} x {copy['kind']:<6} {size:>23}  {' > '.join(copy['op_chain'])}")
        if len(hidden) > 10:
            lines.append(f"    ... and {len(hidden) - 10} more op chains")
    return lines


def _human(summary: dict[str, Any]) -> str:
    """A compact table for one file."""
    from dashboard.phase_lines import summary_lines as _phase_lines  # serving traces: prefill/decode/mixed

    lines = []
    for part in (
        _head_lines,
        _health_lines,
        _step_lines,
        _efficiency_lines,
        _host_lines,
        _phase_lines,
        _memory_lines,
        _copy_lines,
    ):
        lines += part(summary)
    return "\n".join(lines)  # (warnings go to stderr once, not here as well)


def _ms(us: float) -> str:
    """µs as text: '95.7 ms' from 1 ms up, else '812.4 µs'."""
    return f"{us / 1000:,.1f} ms" if us >= 1000 else f"{us:,.1f} µs"


def _efficiency_line(block: dict[str, Any]) -> str:
    """'19.4% of the H100 SXM5 80GB roofline (90.4 TFLOP/s, 24 of 34 calls measured, 71% of attention
    device time; the rest has no shapes)', or why not, with the share of the attention time measured."""
    share = block.get("measured_share")
    covered = ""
    if share is not None:
        rest = "the rest has no shapes" if block.get("unmeasured_without_shapes") else "the rest is not measured"
        percent = f"{100 * share:.0f}%" if share == 0 or share >= 0.01 else "<1%"
        covered = f", {percent} of attention device time" + ("" if share >= 1 else f"; {rest}")
    if block["pct_of_roofline"] is not None:
        return (
            f"{block['pct_of_roofline']:.1f}% of the {block['device']['matched']} roofline "
            f"({block['tflops']:.1f} TFLOP/s, {block['measured']:,} of {block['calls']:,} calls measured{covered})"
        )
    if not block["calls"]:
        return "no attention op or kernel to measure"
    why = block["device"]["reason"] or "; ".join(block["reasons"][:2]) or "not measurable"
    achieved = f"{block['tflops']:.3g} TFLOP/s achieved; " if block["tflops"] else ""
    return f"no percentage ({achieved}{why})"  # nothing measured: 0% of the attention time, said by the reason


def _step_efficiency_line(step: dict[str, Any], gpu: bool) -> str:
    """'17.6% of the H200 SXM roofline (174.1 TFLOP/s: the collectors' shape ...)', or why not."""
    what = (
        "the collectors' shape over each step's device time, every kernel, copy and memset of the step included"
        if gpu
        else "the collectors' shape over each step's attention:: span"
    )
    if step["pct_of_roofline"] is not None:
        return f"{step['pct_of_roofline']:.1f}% of the {step['device']} roofline ({step['tflops']:.1f} TFLOP/s: {what})"
    achieved = f"{step['tflops']:.3g} TFLOP/s achieved: {what}; " if step["tflops"] else ""
    return f"no percentage ({achieved}{step['reason'] or 'not measurable'})"


def _rank_lines(folder: str, traces: list[Trace]) -> list[str]:
    """Per-rank step times and the straggler of each step, for a folder of rank traces."""
    from dashboard.engine.store.ingest import one_job, world_of
    from dashboard.engine.compare.ranks import STRAGGLER_SPREAD, rank_of, rank_step_times, stragglers

    if not one_job([rank_of(t) for t in traces], [world_of(t) for t in traces]):
        return []
    ranks = {rank_of(t): t for t in traces}
    table = stragglers(rank_step_times(ranks))
    lines = [
        f"{folder}: {len(ranks)} ranks ({', '.join(str(r) for r in sorted(ranks))}); the slowest rank of each step: "
        f"(straggler: spread {STRAGGLER_SPREAD:g} or more, as the Ranks tab shades it)",
        f"  {'step':>10} {'slowest rank':>13} {'its ms':>10} {'median ms':>10} {'spread':>7} {'straggler':>9}",
    ]
    for row in table.iter_rows(named=True):
        lines.append(
            f"  {row['step']:>10} {row['slowest_rank']:>13} {row['slowest_us'] / 1000:>10.3f} "
            f"{row['median_us'] / 1000:>10.3f} {_spread(row['spread']):>7} {'yes' if row['straggler'] else 'no':>9}"
        )
    return lines


def _spread(value: float | None) -> str:
    """slowest / median as text; '-' for a step no rank did any work in (0 / 0)."""
    return f"{value:.2f}" if value is not None and math.isfinite(value) else "-"
