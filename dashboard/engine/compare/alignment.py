"""Two runs aligned step by step and, inside a step, op by op: which top-level ops (the
outermost cpu_op the user's code called, under its module or record_function scope) were added,
removed or replaced, with the device work, copies and time that went with them.

Steps are matched in order (step_pairs: the i-th profiled step of one run with the i-th of the
other; the extra steps of the longer run are left out). Inside a matched pair the two op sequences are
aligned by name with diff.aligned_opcodes (the kernel diff's aligner), and an op present in both
whose sequence of work units (kernels, memcpys, memsets; leaf ops on a CPU-only trace) changed is
a 'kernels changed' change with the change of each unit's count. Every figure is a mean per
matched step: times in ns, bytes in bytes.

`attnscope check` (its --json and --markdown), the reports and the dashboard's Timeline diff all
read these changes from op_changes and word them with describe."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import polars as pl

from dashboard.engine.analyses.copies import copies_in_steps
from dashboard.engine.compare.diff import aligned_opcodes
from dashboard.engine.analyses.kernels import work_events
from dashboard.engine.model.formatting import bytes_rounded as _bytes
from dashboard.engine.model.trace import Trace, names_matching, per_trace

SCOPE_CATEGORIES = ("user_annotation", "python_function", "gpu_user_annotation")


@dataclass
class OpChange:
    """One change of a step's op sequence: kind ('added', 'removed', 'replaced', 'kernels
    changed'), scope (the module or record_function around the ops, '' at the step's top),
    base_ops / candidate_ops (op names, in order), delta_ns (device time of their work per step,
    candidate minus base; on a CPU-only trace the ops' own time), work (unit of work -> change of
    its count per step: 'kernel', 'DtoD memcpy', ...), copies (one line per copy the base ops made:
    'clone + copy_' with bytes per step), base_copy_bytes / candidate_copy_bytes, steps (matched
    step pairs it was seen in)."""

    kind: str
    scope: str
    base_ops: tuple[str, ...]
    candidate_ops: tuple[str, ...]
    delta_ns: float = 0.0
    work: dict[str, float] = field(default_factory=dict)
    base_copies: dict[str, float] = field(default_factory=dict)  # 'clone + copy_' -> bytes per step
    candidate_copies: dict[str, float] = field(default_factory=dict)
    steps: int = 0


def _unit(name: str, cat: str) -> str:
    """'kernel', 'DtoD memcpy', 'memset', or 'op' (a CPU-only trace's leaf op)."""
    if cat == "gpu_memcpy":
        for kind in ("DtoD", "HtoD", "DtoH", "PtoP", "DtoA", "AtoD", "HtoA", "AtoH"):
            if kind in name:
                return f"{kind} memcpy"
        return "memcpy"
    return {"kernel": "kernel", "gpu_memset": "memset"}.get(cat, "op")


# top_ops' columns: each top-level op, its device work's unit names and kinds, its copies' lines and bytes
TOP_OPS_SCHEMA: dict[str, pl.DataType] = {
    "step": pl.Int64,
    "id": pl.Int64,
    "op": pl.String,
    "scope": pl.String,
    "ts_ns": pl.Int64,
    "dur_ns": pl.Int64,
    "units": pl.List(pl.String),
    "kinds": pl.List(pl.String),
    "work_ns": pl.Int64,
    "copy_lines": pl.List(pl.String),
    "copy_bytes": pl.List(pl.Int64),
}


@per_trace(schema=TOP_OPS_SCHEMA)
def top_ops(trace: Trace) -> pl.DataFrame:
    """Every top-level cpu_op inside a step (one no other cpu_op holds): step, id, op, scope
    (innermost annotation or python function around it, step annotations left out), ts_ns, in
    start order, with its device work (work_ns, units: list of unit names in launch order, kinds)
    and its copies (copy lines, copy bytes)."""
    ev = trace.events
    n = ev.height
    parent = ev["parent"].fill_null(-1).to_numpy()
    # flags from the Categorical columns, never an array of 2 million Python strings (the 910 MB
    # trace's categories and names as objects took 600 MB more at the peak)
    step_mark = names_matching(ev["name"], lambda name: name.str.starts_with("ProfilerStep#"))
    flags = ev.select(
        (pl.col("cat") == "cpu_op").fill_null(False).alias("op"),
        (pl.col("cat").is_in(SCOPE_CATEGORIES) & ~step_mark).fill_null(False).alias("scope"),
    )
    is_op = flags["op"].to_numpy()
    is_scope = flags["scope"].to_numpy()

    def outermost_op(ids: np.ndarray) -> np.ndarray:
        top = np.where(is_op[ids], ids, -1)
        cur = parent[ids]
        while (cur >= 0).any():
            live = cur >= 0
            hit = live & np.where(live, is_op[np.clip(cur, 0, n - 1)], False)
            top = np.where(hit, cur, top)
            cur = np.where(live, parent[np.clip(cur, 0, n - 1)], -1)
        return top

    ops = ev.filter((pl.col("cat") == "cpu_op") & pl.col("step").is_not_null())
    ids = ops["id"].to_numpy()
    ops = ops.filter(pl.Series(outermost_op(ids) == ids))
    ids = ops["id"].to_numpy()
    base = ops.select(
        "step",
        "id",
        pl.col("name").cast(pl.String).alias("op"),
        _scopes(ev, parent, is_scope, ids),
        "ts_ns",
        "dur_ns",
    )
    units = _work_units(trace, outermost_op)
    copy_lines = _copy_lines(trace, outermost_op)
    return (
        base.join(units, left_on="id", right_on="top", how="left", maintain_order="left")
        .join(copy_lines, left_on="id", right_on="top", how="left", maintain_order="left")
        # a CPU-only trace's op time is its own span (a fused op's time is not in its leaves)
        .with_columns(pl.col("work_ns").fill_null(0) if trace.has_gpu else pl.col("dur_ns").alias("work_ns"))
        .sort("step", "ts_ns", "id")
    )


def _scopes(ev: pl.DataFrame, parent: np.ndarray, is_scope: np.ndarray, ids: np.ndarray) -> pl.Series:
    """The innermost scope event's name around each op of `ids` ('' where none holds it)."""
    n = ev.height
    scope_id = np.full(ids.size, -1, dtype=np.int64)  # the innermost scope event around each op
    cur, todo = parent[ids], np.ones(ids.size, dtype=bool)
    while todo.any():
        live = todo & (cur >= 0)
        safe = np.clip(cur, 0, n - 1)
        found = live & is_scope[safe]
        scope_id[found] = safe[found]
        todo = live & ~found
        cur = np.where(todo, parent[safe], -1)
    return (
        pl.DataFrame({"name": ev["name"].gather(np.clip(scope_id, 0, max(n - 1, 0))), "has": scope_id >= 0})
        .select(pl.when("has").then(pl.col("name").cast(pl.String)).otherwise(pl.lit("")).alias("scope"))
        .to_series()
        if ids.size
        else pl.Series("scope", [], dtype=pl.String)
    )


def _work_units(trace: Trace, outermost_op: Callable[[np.ndarray], np.ndarray]) -> pl.DataFrame:
    """Per top-level op (top): its work units' names and kinds in launch order, and their time."""
    ev = trace.events
    n = ev.height
    work = work_events(trace).filter(pl.col("step").is_not_null())
    holder_of = ev["launch"].gather(work["id"]).fill_null(-1).to_numpy() if trace.has_gpu else work["id"].to_numpy()
    held = np.where(holder_of >= 0, outermost_op(np.clip(holder_of, 0, n - 1)), -1)
    work = work.with_columns(pl.Series("top", held), pl.concat_str(pl.col("name").cast(pl.String)).alias("name"))
    launch_ts = ev["ts_ns"].gather(np.clip(holder_of, 0, n - 1)).to_numpy()
    work = work.with_columns(pl.Series("order", np.where(holder_of >= 0, launch_ts, work["ts_ns"].to_numpy())))
    return (
        work.sort("order", "ts_ns")
        .with_columns(
            pl.struct("name", "cat")
            .map_elements(lambda r: _unit(r["name"], str(r["cat"])), return_dtype=pl.String)
            .alias("unit")
        )
        .group_by("top", maintain_order=True)
        .agg(pl.col("name").alias("units"), pl.col("unit").alias("kinds"), pl.col("dur_ns").sum().alias("work_ns"))
    )


def _copy_lines(trace: Trace, outermost_op: Callable[[np.ndarray], np.ndarray]) -> pl.DataFrame:
    """Per top-level op (top): one line per kind of copy it made ('clone + copy_') and their bytes."""
    ev = trace.events
    copies = copies_in_steps(trace)
    if not copies.height:
        return pl.DataFrame(schema={"top": pl.Int64, **{c: TOP_OPS_SCHEMA[c] for c in ("copy_lines", "copy_bytes")}})
    holder = ev["launch"].gather(copies["id"]).fill_null(-1).to_numpy() if trace.has_gpu else copies["id"].to_numpy()
    holder = np.where(holder >= 0, holder, copies["id"].to_numpy())
    copies = copies.with_columns(
        pl.Series("top", outermost_op(holder)),
        pl.col("op_chain")
        .list.slice(1)
        .list.eval(pl.element().str.replace("^aten::", ""))
        .list.join(" + ")
        .alias("line"),
    ).with_columns(pl.when(pl.col("line") == "").then(pl.col("kind")).otherwise(pl.col("line")).alias("line"))
    # group_by without maintain_order hands its groups back in any order: lines in a fixed order
    # (first copy's position) keep the answer byte-identical from run to run
    copy_rows = copies.group_by("top", "line", maintain_order=True).agg(pl.col("bytes").sum().alias("bytes"))
    return copy_rows.group_by("top", maintain_order=True).agg(
        pl.col("line").alias("copy_lines"), pl.col("bytes").alias("copy_bytes")
    )


def _side(rows: list[dict], has_gpu: bool) -> tuple[float, dict[str, float], dict[str, float]]:
    ns = float(sum(r["work_ns"] or 0 for r in rows))
    work: dict[str, float] = {}
    copies: dict[str, float] = {}
    for r in rows:
        for kind in r["kinds"] or []:
            work[kind] = work.get(kind, 0) + 1
        for line, size in zip(r["copy_lines"] or [], r["copy_bytes"] or []):
            copies[line] = copies.get(line, 0) + float(size or 0)
    return ns, work, copies


def step_pairs(base: Trace, candidate: Trace) -> list[tuple[int, int]]:
    """The matched steps: (step of base, step of candidate), the i-th profiled step of one run
    with the i-th of the other, as many pairs as the shorter run has steps."""
    return list(zip(base.steps["step"].to_list(), candidate.steps["step"].to_list()))


PAIR_CACHE = 8  # op_changes results kept per base trace (the dashboard asks again on every rerun)


def op_changes(base: Trace, candidate: Trace, pairs: list[tuple[int, int]] | None = None) -> list[OpChange]:
    """The op-level changes of candidate against base, summed over the matched step pairs
    (step_pairs, or the given (base step, candidate step) pairs) and given per step; largest
    change of device time first (ties: by kind and ops). Computed once per pair of traces and
    steps: the result is shared, callers must not change it."""
    pairs = step_pairs(base, candidate) if pairs is None else [(int(a), int(b)) for a, b in pairs]
    memo = base._analyses.setdefault(f"{__name__}.op_changes", {})
    key = (id(candidate), tuple(pairs))
    hit = memo.get(key)
    if hit is not None and hit[0]() is candidate:
        return hit[1]
    out = _op_changes(base, candidate, pairs)
    if len(memo) >= PAIR_CACHE:
        memo.pop(next(iter(memo)))
    memo[key] = (weakref.ref(candidate), out)
    return out


def _op_changes(base: Trace, candidate: Trace, pairs: list[tuple[int, int]]) -> list[OpChange]:
    for trace, steps in ((base, {a for a, _ in pairs}), (candidate, {b for _, b in pairs})):
        missing = sorted(steps - set(trace.steps["step"].to_list()))
        if missing:
            raise KeyError(f"no step {missing[0]} in {trace.source}")
    a_ops, b_ops = top_ops(base), top_ops(candidate)
    a_steps = a_ops.partition_by("step", as_dict=True, maintain_order=True)  # one pass, not a filter per pair
    b_steps = a_steps if candidate is base else b_ops.partition_by("step", as_dict=True, maintain_order=True)
    empty = a_ops.clear()
    found: dict[tuple, OpChange] = {}
    for sa, sb in pairs:
        if candidate is base and sa == sb:  # a step against itself: nothing changed
            continue
        ra = a_steps.get((sa,), empty).to_dicts()
        rb = b_steps.get((sb,), empty).to_dicts()
        for tag, i1, i2, j1, j2 in aligned_opcodes([r["op"] for r in ra], [r["op"] for r in rb]):
            blocks: list[tuple[str, list[dict], list[dict]]] = []
            if tag == "equal":
                for x, y in zip(ra[i1:i2], rb[j1:j2]):
                    if (x["units"] or []) != (y["units"] or []):
                        blocks.append(("kernels changed", [x], [y]))
            else:
                kind = {"insert": "added", "delete": "removed", "replace": "replaced"}[tag]
                blocks.append((kind, ra[i1:i2], rb[j1:j2]))
            for kind, xs, ys in blocks:
                scope = (ys or xs)[0]["scope"] or (xs or ys)[0]["scope"] or ""
                key = (kind, scope, tuple(r["op"] for r in xs), tuple(r["op"] for r in ys))
                change = found.setdefault(key, OpChange(kind, scope, key[2], key[3]))
                a_ns, a_work, a_copies = _side(xs, base.has_gpu)
                b_ns, b_work, b_copies = _side(ys, candidate.has_gpu)
                change.delta_ns += b_ns - a_ns
                for unit in set(a_work) | set(b_work):
                    change.work[unit] = change.work.get(unit, 0) + b_work.get(unit, 0) - a_work.get(unit, 0)
                for line, size in a_copies.items():
                    change.base_copies[line] = change.base_copies.get(line, 0) + size
                for line, size in b_copies.items():
                    change.candidate_copies[line] = change.candidate_copies.get(line, 0) + size
                change.steps += 1
    n = max(len(pairs), 1)
    out = []
    for change in found.values():
        change.delta_ns /= n
        change.work = {k: v / n for k, v in sorted(change.work.items()) if v}
        change.base_copies = {k: v / n for k, v in sorted(change.base_copies.items())}
        change.candidate_copies = {k: v / n for k, v in sorted(change.candidate_copies.items())}
        out.append(change)
    return sorted(out, key=lambda c: (-abs(c.delta_ns), c.kind, c.base_ops, c.candidate_ops))


def _plain(text: str) -> str:
    return text


def _code(text: str) -> str:
    return f"`{text}`"


def _ops(
    ops: tuple[str, ...],
    copies: dict[str, float],
    code: Callable[[str], str],
    plain: Callable[[str], str],
    limit: int = 4,
) -> str:
    shown = plain(", ").join(code(op) for op in ops[:limit]) + (
        plain(f" and {len(ops) - limit} more") if len(ops) > limit else ""
    )
    if copies:
        shown += plain(
            " (" + "; ".join(f"{line}, {_bytes(size)}" if size else line for line, size in copies.items()) + ")"
        )
    return shown


def describe(change: OpChange, code: Callable[[str], str] = _code, plain: Callable[[str], str] = _plain) -> str:
    """One line: "under `attention::naive`: `aten::masked_fill` (clone + copy_, 268 MB) replaced
    by `aten::masked_fill_`; -1 DtoD memcpy, -0.13 ms a step". Names (scope and ops) go through
    `code`, the rest through `plain`: the defaults give Markdown with names as inline code, as the
    reports print it; the dashboard passes its own escaping so that a name shows as written."""
    where = plain("under ") + code(change.scope) + plain(": ") if change.scope else ""
    before = _ops(change.base_ops, change.base_copies, code, plain)
    after = _ops(change.candidate_ops, change.candidate_copies, code, plain)
    text = {
        "added": after + plain(" added"),
        "removed": before + plain(" removed"),
        "replaced": before + plain(" replaced by ") + after,
        "kernels changed": before + plain(" launches other work"),
    }[change.kind]
    counts = [f"{v:+g} {unit}" for unit, v in change.work.items()]
    ms = change.delta_ns / 1e6
    counts.append(f"{ms:+.3g} ms a step" if abs(ms) >= 0.001 else f"{change.delta_ns / 1e3:+.3g} us a step")
    return where + text + plain(f"; {', '.join(counts)}")
