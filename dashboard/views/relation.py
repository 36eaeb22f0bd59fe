"""How each run relates to its baseline, said first on every tab that compares runs: the runs that
do other work than their baseline (no speedup; what differs is a difference, not a change) and the
ones that do the same work on another device, each with the fingerprint's why (speed.speed_table's
relation and relation_why, fingerprint.relation for the Timeline's pair). The reports say it in the
same words (report.NOT_SAME_WORK...)."""

from __future__ import annotations

import polars as pl
import streamlit as st

from dashboard import report
from dashboard.engine.comparison import CROSS_DEVICE, DIFFERENT
from dashboard.runs import Selection
from dashboard.views import literal, tab_set


def table(sel: Selection) -> pl.DataFrame:
    """The speed table of the selection against its baseline (each device group's own): Comparison.speed."""
    return sel.comparison.speed


def say(sel: Selection, speed: pl.DataFrame | None = None) -> set[str]:
    """Draw the relation block (nothing when every run does the baseline's work on its device) and
    return the runs that do other work than their baseline."""
    different, cross = report.relations(table(sel) if speed is None else speed)
    if different or cross:
        with st.container(key=tab_set.keyed("relation")):
            if different:
                st.warning(_block(report.NOT_SAME_WORK, report.NOT_SAME_WORK_WHY, different), icon=":material/block:")
            if cross:
                st.info(_block(report.ANOTHER_DEVICE, report.ANOTHER_DEVICE_WHY, cross), icon=":material/devices:")
    return {r["run"] for r in different}


def _block(title: str, why: str, rows: list[dict[str, str]]) -> str:
    lines = [f"- **{literal.md(r['run'])}** against {literal.md(r['baseline'])}: {literal.md(r['why'])}" for r in rows]
    return f"**{title}:** {why}.\n\n" + "\n".join(lines)


def say_pair(sel: Selection, a: str, b: str) -> str:
    """Draw how run B relates to run A (the Timeline diff's pair), first: a warning when they do
    different work, a note when it is the same work on another device, nothing otherwise.
    Returns fingerprint.relation's kind."""
    kind, why = sel.comparison.relation(a, b)
    if kind not in (DIFFERENT, CROSS_DEVICE):
        return kind
    with st.container(key=tab_set.keyed("relation")):
        if kind == DIFFERENT:
            st.warning(
                f"**A and B are not the same work:** {literal.md(why)}. The two steps below are two programs side by side: "
                "where their kernels and ops differ, that is a difference between the programs, not a change from A to B.",
                icon=":material/block:",
            )
        elif kind == CROSS_DEVICE:
            st.info(
                f"**A and B are the same work on two devices:** {literal.md(why)}. What differs below comes from the "
                "devices as well as the code.",
                icon=":material/devices:",
            )
    return kind
