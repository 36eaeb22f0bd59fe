"""Copies tab: every copy with kind, bytes, bandwidth, time and the chain of ops that caused it.
Hidden copies (made inside another op, like the clone inside an out-of-place masked_fill) stand
out: red boxes on top, red rows below."""

from __future__ import annotations

import polars as pl
import streamlit as st

from dashboard import charts
from dashboard.engine import comparison as facade
from dashboard.engine.comparison import COPY_CLASSES, format_bytes, format_us
from dashboard.runs import Selection
from dashboard.views import figures, literal, relation, tables

MAX_BOXES = 3  # hidden-copy boxes per run; the rest are red rows in the table

EXPLAIN = (
    "A copy is **hidden** when the op that started its chain did not ask for a copy: e.g. "
    "`aten::masked_fill > aten::clone > aten::copy_` copies the whole scores tensor because the "
    "out-of-place masked_fill clones it first (`masked_fill_` does not). Copies under `aten::copy_`, "
    "`aten::to`, `aten::clone`, `aten::contiguous` at the top are requested, and expected; copies inside the autograd "
    "engine are *autograd*, inside a collective *communication*, and copies no op holds *unattributed*. Only hidden copies are alarms, "
    "and only those that cost at least 1% of the step's time or 1 MB a step (red); cheaper ones are notes (yellow). "
    "On CPU-only traces a copy is a tensor `aten::copy_` (scalar conversions are left out)."
)


SIZE_UNKNOWN = (
    "size unknown (the trace records neither the copy's bytes nor its op's input shapes: "
    "profile with record_shapes=True)"
)


def render(sel: Selection) -> None:
    runs, cmp = sel.runs, sel.comparison
    groups = cmp.copies
    hidden = groups.filter(pl.col("alarm"))
    relation.say(sel)
    with st.container(key="copies_alarms"):
        _alarms(runs, hidden, cmp.small_copies)
    st.caption(EXPLAIN)

    with st.container(key="chart_copies"):
        st.plotly_chart(
            figures.once(sel, "copies", lambda: charts.copy_time_bars(groups, list(runs), modes=sel.modes)),
            key="fig_copies",
        )
    if len(cmp.groups) > 1:
        st.caption("GPU copies are timed on the device, CPU copies on the CPU: the bars are side by side, not a ratio.")

    st.subheader("Copies grouped by the op chain that made them")
    tables.show(
        groups,
        "tbl_copy_groups",
        {
            "run": tables.text("run"),
            # the class says hidden and the row's colour the alarm: both checkboxes one click away
            "hidden": tables.hidden(st.column_config.CheckboxColumn("hidden!", width="small")),
            "alarm": tables.hidden(
                st.column_config.CheckboxColumn(
                    "alarm",
                    help=f"A hidden chain that costs at least {facade.COPY_ALARM_SHARE:.0%} of the step or "
                    f"{format_bytes(facade.COPY_ALARM_BYTES)} a step (red); cheaper hidden chains are yellow",
                    width="small",
                )
            ),
            "copy_class": tables.text("class", "; ".join(f"{name}: {why}" for name, why in COPY_CLASSES)),
            "kind": tables.text("kind", "DtoD, HtoD, DtoH...: a GPU memcpy; kernel: a copy kernel; cpu: a CPU copy_"),
            "per_step": tables.count("copies / step"),
            "bytes_per_step": st.column_config.NumberColumn("size / step", format="bytes"),
            "us_per_step": tables.us("µs / step", digits=2),
            "share": tables.share("share of step time"),
            # the chain last: the numbers stay in view however long it is
            "op_chain": tables.text("op chain (outermost first)", width="large"),
            "count": tables.hidden(tables.count("count (all steps)")),
        },
        highlight=lambda row: tables.ALARM_BG if row["alarm"] else tables.NOTE_BG if row["hidden"] else "",
        height=tables.fit(groups.height, 420),
        keep=(sel, ()),  # both tables are the selection's Comparison's, coloured by their own columns
    )

    _every_copy(cmp.every_copy, sel)


def _alarms(runs: dict, hidden: pl.DataFrame, small: pl.DataFrame) -> None:
    """A box per hidden copy over the alarm's threshold (MAX_BOXES a run, then a count), or one
    line saying there is none and naming the cheaper ones (`small`: Comparison.small_copies)."""
    if hidden.height == 0:
        threshold = f"{facade.COPY_ALARM_SHARE:.0%} of the step or {format_bytes(facade.COPY_ALARM_BYTES)} a step"
        below = [
            f"**{literal.md(row['run'])}** {row['per_step']:.4g} per step"
            + (f", {format_bytes(row['bytes_per_step'])} a step" if row["bytes_per_step"] else "")
            for row in small.iter_rows(named=True)
        ]
        st.success(
            f"No hidden copy at or above the alarm's threshold ({threshold}) in the selected runs"
            + (f"; below it: {'; '.join(below)} (the yellow rows below)." if below else "."),
            icon=":material/check_circle:",
        )
    for label in runs:
        mine = hidden.filter(pl.col("run") == label)
        for row in mine.head(MAX_BOXES).iter_rows(named=True):
            known = format_bytes(row["bytes_per_step"])
            size = f"{known} per step" if known else SIZE_UNKNOWN
            share = f"{row['share']:.1%} of the step time" if row["share"] is not None else "share unknown"
            st.error(
                f"**{literal.md(row['run'])}: hidden {literal.md(row['kind'])} copy**, {row['per_step']:.4g} per step, {size}, "
                f"{format_us(row['us_per_step'])} per step ({share})  \nfrom {literal.code(row['op_chain'])}",
                icon=":material/content_copy:",
            )
        if mine.height > MAX_BOXES:
            more = mine.height - MAX_BOXES
            total = mine["per_step"].sum()
            st.error(
                f"**{literal.md(label)}:** and {more} more op {'chain' if more == 1 else 'chains'} with hidden copies "
                f"({total:.4g} hidden {'copy' if total == 1 else 'copies'} per step in all): see the red rows below.",
                icon=":material/content_copy:",
            )


def _every_copy(every: pl.DataFrame, sel: Selection) -> None:
    """Every copy of every run, one row each (Comparison.every_copy), kept for `sel` (tables.show's `keep`)."""
    st.subheader("Every copy")
    if every.height == 0:
        st.info("The selected runs make no copies.")
        return
    tables.show(
        every,
        "tbl_copies",
        {
            "run": tables.text("run"),
            "step": tables.count("step", width="small"),
            "hidden": tables.hidden(st.column_config.CheckboxColumn("hidden!", width="small")),  # the class says it
            "copy_class": tables.text("class"),
            "kind": tables.text("kind"),
            "bytes": st.column_config.NumberColumn("size", format="bytes"),
            "dur_us": tables.us("time (µs)", digits=2),
            "gbps": st.column_config.NumberColumn("GB/s", format="%.3g"),
            # the names last: the numbers stay in view however long they are
            "name": tables.text("event", width="medium"),
            "chain": tables.text("op chain that caused it", width="large"),
        },
        highlight=lambda row: tables.ALARM_BG if row["hidden"] else "",
        height=tables.fit(every.height, 420),
        keep=(sel, ()),
    )
