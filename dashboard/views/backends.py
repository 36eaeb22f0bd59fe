"""Backends tab: which attention implementation each run asked for, which one really ran (by the
op and kernel names in the trace), the names that prove it, and the fallback alarm."""

from __future__ import annotations

import polars as pl
import streamlit as st

from dashboard.engine import review
from dashboard.engine.backends import BACKEND_PATTERNS
from dashboard.runs import Selection
from dashboard.views import tables

VERDICT_STYLE = {review.VERDICT_FALLBACK: tables.ALARM_BG, review.VERDICT_UNVERIFIED: tables.NOTE_BG}


def render(sel: Selection) -> None:
    frame = review.backend_table(sel.runs)
    with st.container(key="backend_alarms"):
        alarms = frame.filter(pl.col("verdict") == review.VERDICT_FALLBACK)
        if alarms.height == 0:
            st.success("No backend fallback: every run that forced an SDPA backend shows no other backend.", icon=":material/check_circle:")
        for row in alarms.iter_rows(named=True):
            st.error(
                f"**{row['run']}: backend fallback.** Requested **{row['requested']}**, but the trace shows **{row['detected']}**. "
                "PyTorch falls back silently (e.g. to the unfused math path), so these numbers are not the requested kernel's.",
                icon=":material/swap_horiz:",
            )
        for row in frame.filter(pl.col("verdict") == review.VERDICT_UNVERIFIED).iter_rows(named=True):
            st.warning(
                f"**{row['run']}: unverified.** Requested **{row['requested']}**, but no attention op or kernel is named in "
                "the trace (torch.compile may have decomposed it into plain kernels), so which backend ran cannot be read from it.",
                icon=":material/help:",
            )
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
            "verdict": tables.text("verdict"),
            "evidence": st.column_config.ListColumn("evidence (op and kernel names)", width="large"),
        },
        highlight=lambda row: VERDICT_STYLE.get(row["verdict"], ""),
        height=tables.fit(frame.height),
    )
    with st.expander("How each backend is recognised"):
        st.dataframe(
            pl.DataFrame({"backend": [b for b, _ in BACKEND_PATTERNS], "names matching (regular expression)": [p for _, p in BACKEND_PATTERNS]}),
            hide_index=True,
        )
