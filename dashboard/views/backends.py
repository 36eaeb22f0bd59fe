"""Backends tab: which attention implementation each run asked for, which one really ran (by the
op and kernel names in the trace), the kernels that prove it with the op that launched them, and
the fallback alarm. A run where nothing is recognised says so: no green banner for it."""

from __future__ import annotations

import polars as pl
import streamlit as st

from dashboard.engine import comparison as facade
from dashboard.engine.comparison import BACKEND_TABLE
from dashboard.runs import Selection
from dashboard.views import literal, relation, tables
from dashboard.views.folded import folded

VERDICT_STYLE = {facade.VERDICT_FALLBACK: tables.ALARM_BG, facade.VERDICT_UNVERIFIED: tables.NOTE_BG}


def verdict_style(verdict: str | None) -> str:
    """A verdict's row style: FALLBACK red; unverified and 'compiled: inductor replaced the <backend>
    path' yellow (no fallback, but not the requested kernels: worth a look); the others plain."""
    if facade.is_compiled_verdict(verdict):
        return tables.NOTE_BG
    return VERDICT_STYLE.get(verdict or "", "")


def render(sel: Selection) -> None:
    relation.say(sel)
    frame = sel.comparison.backends_shown
    with st.container(key="backend_alarms"):
        _banners(frame)
    st.caption(
        "*Requested* comes from the collectors' metadata (empty for traces from elsewhere; 'default' = plain SDPA, which "
        "picks for itself). *Detected* = every backend whose op or kernel names appear in the trace; 'eager' = "
        "matmul + softmax written by hand, outside any SDPA op. *Evidence* lists the names found."
    )
    tables.show(
        frame,
        "tbl_backends",
        {
            "run": tables.text("run"),
            "requested": tables.text("requested"),
            "detected": tables.text("detected"),
            # the verdict whole (a glide column sizes itself to its first rows only); the evidence takes the rest
            "verdict": tables.text("verdict", width=tables.text_width(frame["verdict"], "verdict", most=400)),
            "evidence": st.column_config.ListColumn("evidence (op and kernel names)", width="large"),
        },
        highlight=lambda row: verdict_style(row["verdict"]),
        height=tables.fit(frame.height),
    )
    launches = sel.comparison.attention_launches
    st.subheader("Attention kernels and the op that launched them")
    if launches.height == 0:
        st.info(
            "No attention kernel in these runs (on a CPU-only trace the op is the evidence).", icon=":material/info:"
        )
    else:
        tables.show(
            launches,
            "tbl_attention_kernels",
            {
                "run": tables.text("run"),
                "backend": tables.text("backend"),
                "kernel": tables.text("kernel", width="large"),
                "op": tables.text(
                    "launched by op",
                    "Innermost cpu_op around the launch call; empty when none holds it "
                    "(a CUDA/HIP graph replay) or the call is not in the trace",
                ),
                "launch": tables.text("launch call"),
                "count": tables.count("kernels"),
            },
            height=tables.fit(launches.height),
        )
    _host(sel)

    def backend_table() -> None:
        st.dataframe(
            pl.DataFrame(
                {
                    "backend": [b.name for b in BACKEND_TABLE],
                    "library": [b.library for b in BACKEND_TABLE],
                    "vendor": [b.vendor for b in BACKEND_TABLE],
                    "op names (regular expression)": [b.op for b in BACKEND_TABLE],
                    "kernel names (regular expression)": [b.kernel for b in BACKEND_TABLE],
                }
            ),
            hide_index=True,
        )

    folded("How each backend is recognised", "fold_backend_table", backend_table)


def _host(sel: Selection) -> None:
    """The host side of each run (Comparison.host): an attention call's host time and
    launches, the launch latency, and how much of a step the device waits on launches."""
    frame = sel.comparison.host
    if frame.height == 0:
        return
    st.subheader("The host side: what a call costs the CPU, and who waits")
    st.caption(
        "*Host µs*: the attention op's span on the CPU (median a call); *launches*: runtime launch calls under it; "
        "*latency*: from a launch call to its first kernel's start. *Waits on launches*: the share of a step the "
        "device sits idle with nothing queued; past the busy share the step is host-bound (docs: the host side)."
    )
    tables.show(
        frame,
        "tbl_host",
        {
            "run": tables.text("run"),
            "backend": tables.text("backend"),
            "calls": tables.count("calls"),
            "host_us": tables.us("host µs a call"),
            "launches": tables.count("launches a call"),
            "latency_median_us": tables.us("launch latency median µs"),
            "latency_p90_us": tables.us("launch latency p90 µs"),
            "waiting_share": tables.share("waits on launches"),
            "busy_share": tables.share("device busy"),
            "host_bound_steps": tables.count("host-bound steps"),
            "steps": tables.count("steps"),
        },
        height=tables.fit(frame.height),
    )


def _banners(frame: pl.DataFrame) -> None:
    """Fallback alarms, unverified warnings, a plain note for runs where nothing was recognised, and
    a success banner naming only the runs where a backend was found and it is the one asked for."""
    for row in frame.filter(pl.col("verdict") == facade.VERDICT_FALLBACK).iter_rows(named=True):
        st.error(
            f"**{literal.md(row['run'])}: backend fallback.** Requested **{literal.md(row['requested'])}**, "
            f"but the trace shows **{literal.md(row['detected'])}**. "
            "PyTorch falls back silently (e.g. to the unfused math path), so these numbers are not the requested kernel's.",
            icon=":material/swap_horiz:",
        )
    for row in frame.filter(pl.col("verdict") == facade.VERDICT_UNVERIFIED).iter_rows(named=True):
        st.warning(
            f"**{literal.md(row['run'])}: unverified.** Requested **{literal.md(row['requested'])}**, but no attention op or kernel is named in "
            "the trace (torch.compile may have decomposed it into plain kernels), so which backend ran cannot be read from it.",
            icon=":material/help:",
        )
    for row in frame.filter(
        pl.col("verdict").map_elements(facade.is_compiled_verdict, return_dtype=pl.Boolean)
    ).iter_rows(named=True):
        st.warning(
            f"**{literal.md(row['run'])}: {literal.md(row['verdict'])}.** Requested **{literal.md(row['requested'])}**, but "
            f"torch.compile replaced its op by inductor's generated kernels ({literal.md(row['detected'])}): no fallback, but "
            f"the numbers are the compiled kernels', not the {literal.md(row['requested'])} path's.",
            icon=":material/auto_fix_high:",
        )
    nothing = frame.filter((pl.col("detected") == "") & (pl.col("verdict") != facade.VERDICT_UNVERIFIED))
    for row in nothing.iter_rows(named=True):
        st.info(
            f"**{literal.md(row['run'])}: no attention backend found.** No op or kernel in this trace is one the engine recognises "
            "(see 'How each backend is recognised' below), so it cannot say which attention ran, or whether it fell back.",
            icon=":material/search_off:",
        )
    fine = frame.filter((pl.col("detected") != "") & (pl.col("verdict") != facade.VERDICT_FALLBACK))
    if fine.height:
        shown = ", ".join(f"{literal.md(r['run'])} ({literal.md(r['detected'])})" for r in fine.iter_rows(named=True))
        st.success(f"No backend fallback in {shown}.", icon=":material/check_circle:")
