"""Kernels tab: counts and time per step by kernel family (grouped bars), every kernel of every
run with count, total, mean and share of device time, and what changed against the baseline."""

from __future__ import annotations

import polars as pl
import streamlit as st

from dashboard import charts
from dashboard.engine import review
from dashboard.engine.kernels import kernel_delta, kernel_table, work_unit
from dashboard.runs import Selection
from dashboard.views import literal, tables

CHANGE_WORDS = {
    "added": "only in this run", "removed": "only in the baseline", "more": "launched more often",
    "fewer": "launched less often", "slower": "slower (mean > +5%)", "faster": "faster (mean < -5%)",
}
# red = slower, yellow = more launches, green = fewer launches or faster (the 'better' direction)
CHANGE_STYLE = {"slower": tables.ALARM_BG, "added": tables.NOTE_BG, "more": tables.NOTE_BG, "removed": tables.ADDED_BG, "fewer": tables.ADDED_BG, "faster": tables.ADDED_BG}


def render(sel: Selection) -> None:
    runs = sel.runs
    units = {label: work_unit(t) for label, t in runs.items()}
    if "leaf cpu_op" in units.values():
        st.info(
            "CPU-only traces have no kernels: their unit of work is the leaf CPU op (an op that does work — not a view, an allocation or torch.compile bookkeeping — and holds no other such op). "
            "Runs counted that way: " + ", ".join(literal.md(label) for label, u in units.items() if u == "leaf cpu_op") + ".",
            icon=":material/memory:",
        )
    split = review.device_groups(runs, sel.baseline)
    if len(split) > 1:
        st.info(literal.md(review.MIXED_DEVICES_WHY), icon=":material/call_split:")
    fam = review.families(runs)
    for group in split:
        suffix = "" if len(split) == 1 else f"_{tables.group_key(group)}"
        mine = fam.filter(pl.col("run").is_in(group.runs))
        if len(split) > 1:
            st.markdown(tables.group_heading(group))
        with st.container(key=f"chart_kernels_count{suffix}"):
            st.plotly_chart(charts.family_grouped(mine, group.runs, "count", sel.colors), key=f"fig_kernels_count{suffix}")
        with st.container(key=f"chart_kernels_time{suffix}"):
            st.plotly_chart(charts.family_grouped(mine, group.runs, "time", sel.colors), key=f"fig_kernels_time{suffix}")

    st.subheader("Every kernel, per run")
    st.caption("Over all profiled steps. Share is the kernel's part of the run's total device work time. Sort by any column; "
               "type in the table's search to filter.")
    all_kernels = pl.concat(
        [kernel_table(t).select(pl.lit(label).alias("run"), pl.all()) for label, t in runs.items()], how="vertical_relaxed"
    ).with_columns((pl.col("total_ns") / 1000.0).alias("total_us"), (pl.col("mean_ns") / 1000.0).alias("mean_us"))
    tables.show(
        all_kernels,
        "tbl_kernels",
        {
            "run": tables.text("run"),
            "name": tables.text("kernel (or leaf op)", width="large"),
            "family": tables.text("family"),
            "count": tables.count("count"),
            "per_step": tables.count("per step"),
            "total_us": tables.us("total (µs)"),
            "mean_us": tables.us("mean (µs)", digits=2),
            "share": tables.share("share of device time"),
        },
        height=420,
    )

    against = {label: g.baseline for g in split for label in g.runs}
    others = [label for label in runs if label != against[label]]
    heading = f"Against the baseline: {sel.baseline}" if len(split) == 1 else "Against each group's baseline: " + ", ".join(
        f"{g.baseline} ({g.name})" for g in split
    )
    st.subheader(heading, anchor=False)
    if sel.baseline is None or not others:
        st.info("Select at least two runs of the same kind (GPU or CPU-only) to compare kernels against the baseline.")
        return
    deltas = pl.concat(
        [kernel_delta(runs[against[label]], runs[label]).select(pl.lit(label).alias("run"), pl.lit(against[label]).alias("baseline"), pl.all())
         for label in others],
        how="vertical_relaxed",
    ).with_columns((pl.col("base_mean_ns") / 1000.0).alias("base_mean_us"), (pl.col("other_mean_ns") / 1000.0).alias("other_mean_us"))
    summary = review.kernel_change_counts(deltas, others)
    present = [c for c in summary.columns if c != "run"]
    st.caption(
        "How many distinct kernels changed, by kind of change (launch counts per step; 'slower'/'faster' = mean "
        "duration off by more than 5%). Below, each change: red = slower, yellow = launched more, green = fewer or faster."
    )
    tables.show(
        summary, "tbl_kernels_change_summary", {"run": tables.text("run"), **{c: tables.count(CHANGE_WORDS.get(c, c)) for c in present}},
        height=tables.fit(summary.height),
    )
    only_changes = st.toggle("Show only kernels that changed", value=True, key="kernels_only_changes")
    shown = deltas.filter(pl.col("change") != "same") if only_changes else deltas
    tables.show(
        shown,
        "tbl_kernels_delta",
        {
            "run": tables.text("run"),
            "baseline": tables.text("against") if len(split) > 1 else None,
            "change": tables.text("change"),
            "name": tables.text("kernel (or leaf op)", width="medium"),
            "family": tables.text("family"),
            "base_per_step": tables.count("baseline / step"),
            "other_per_step": tables.count("run / step"),
            "delta_per_step": st.column_config.NumberColumn("Δ / step", format="%+.4g"),
            "base_mean_us": tables.us("baseline mean (µs)", digits=2),
            "other_mean_us": tables.us("run mean (µs)", digits=2),
        },
        highlight=lambda row: CHANGE_STYLE.get(row["change"], ""),
        height=tables.fit(shown.height, 420),
    )
