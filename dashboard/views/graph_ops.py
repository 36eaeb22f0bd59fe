"""The Kernels tab's CUDA-graph section: the kernels a graph replayed, attributed to the op chains that
launched them through the run's compiled twin among the selected runs (compare/graph_source.py);
without a twin, how much of the device time the replays hold and what to select to attribute it."""

from __future__ import annotations

import os

import polars as pl
import streamlit as st

from dashboard.engine.comparison import parse_name
from dashboard.runs import Selection
from dashboard.views import literal, tables


def show(sel: Selection) -> None:
    """One line per selected run whose kernels a CUDA graph replayed, then one table of the
    attributed op chains with a run column; nothing when no run replayed a graph."""
    replayed = {label: block for label, block in sel.comparison.graphs.items() if block["launches"]}
    if not replayed:
        return
    st.subheader("CUDA graph replays by op", anchor=False)
    st.caption(
        "A replayed graph's kernels sit under one launch call, so the trace does not say which op launched each. "
        "The run's compiled twin (the same code without graphs) launches the same kernels in the same order, each "
        "under its op chain: each replayed kernel takes its twin's chain. A kernel with no twin stays unattributed."
    )
    lines, parts = [], []
    for label, block in replayed.items():
        line, rows = _run(sel, label, block)
        lines.append(f"- {line}")
        if rows is not None:
            parts.append(rows)
    st.markdown("\n".join(lines))  # one element (and one table below) however many runs replayed graphs
    if parts:
        rows = pl.concat(parts)
        tables.show(
            rows,
            "tbl_graph_ops",
            {
                "run": tables.text("run"),
                "chain": tables.text("op chain (from the twin)", width="large"),
                "kernels": tables.count("device events"),
                "device_us": tables.us("device µs"),
            },
            height=tables.fit(rows.height, 420),
        )


def _short(kernel: str) -> str:
    """A kernel's function name, without its template arguments and signature."""
    found = parse_name(kernel)
    return f"{found.namespace}::{found.base}" if found.namespace else found.base or kernel


def _run(sel: Selection, label: str, block: dict) -> tuple[str, pl.DataFrame | None]:
    """A replaying run's line (its replayed events, through which twin, from which file) and its
    attributed op chains (None without a twin among the selected runs)."""
    share = f"{block['share']:.0%} of its device time" if block["share"] is not None else "its device time"
    twin = sel.comparison.compiled_twin(label)
    head = f"**{literal.md(label)}**: {block['kernels']:,} replayed device events, {share}"
    if twin is None:
        variant = (sel.runs[label].collector or {}).get("variant")
        select = f"select **{literal.md(variant)} (compiled)**" if variant else "compare it with its compiled twin"
        return f"{head}; the ops that launched them are not in this trace: {select} to attribute them.", None
    found = sel.comparison.graph_attribution(label, twin)
    part = found["attributed_share"]
    line = (
        f"{head}; attributed through **{literal.md(twin)}** ({literal.md(os.path.basename(sel.runs[twin].source))}): "
        f"{found['attributed']:,} of {found['kernels']:,}"
        + (f" ({part:.0%} of the replayed time)" if part is not None else "")
        + (
            f"; not in the twin: {literal.md(', '.join(_short(n) for n in found['unaligned']))}"
            if found["unaligned"]
            else ""
        )
    )
    rows = pl.DataFrame(
        found["ops"], schema={"op": pl.String, "chain": pl.String, "kernels": pl.Int64, "device_us": pl.Float64}
    )
    return line, rows.select(pl.lit(label).alias("run"), "chain", "kernels", "device_us")
